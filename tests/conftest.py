"""Shared fixtures: real PostgreSQL, MySQL/MariaDB and SQLite databases for tests.

PostgreSQL comes from ``INCIDENTKIT_TEST_DATABASE_URL`` (``scripts/test`` sets it, starting a
throwaway cluster when needed) or a server on 127.0.0.1:5432. Without one the PostgreSQL tests
fail, never skip. MySQL/MariaDB tests run when ``INCIDENTKIT_TEST_MYSQL_URL`` or 127.0.0.1:3306
answers and are skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

PG_ENV = "INCIDENTKIT_TEST_DATABASE_URL"
PG_LOCAL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
MYSQL_ENV = "INCIDENTKIT_TEST_MYSQL_URL"
MYSQL_LOCAL = "mysql+pymysql://root@127.0.0.1:3306/test"

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
TEXT_FIXTURES = Path(__file__).resolve().parent / "data"


@pytest.fixture(autouse=True)
def _forget_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no remembered secret: the kit remembers every ``env:`` value for
    the rest of its process, and one test's URL must not be masked in the next test's text."""
    from incidentkit import redact

    monkeypatch.setattr(redact, "_known", set())


def _try_connect(url: str) -> str | None:
    """None when ``url`` answers, else the reason it does not."""
    try:
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        engine.dispose()
        return None
    except Exception as err:  # noqa: BLE001 - the reason is reported, not hidden
        return str(err).splitlines()[0]


@pytest.fixture(scope="session")
def pg_admin_url() -> str:
    url = os.environ.get(PG_ENV) or PG_LOCAL
    reason = _try_connect(url)
    if reason is not None:
        pytest.fail(
            f"PostgreSQL tests need a server and {url} does not answer ({reason}). Run "
            f"scripts/test (it starts one from the installed binaries) or set {PG_ENV}.",
            pytrace=False,
        )
    return url


def _fresh_database(admin_url: str, prefix: str) -> Iterator[str]:
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    quoted = admin.dialect.identifier_preparer.quote_identifier(name)
    with admin.connect() as conn:
        charset = " CHARACTER SET utf8mb4" if admin.dialect.name != "postgresql" else ""
        conn.execute(sa.text(f"CREATE DATABASE {quoted}{charset}"))
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            force = " WITH (FORCE)" if admin.dialect.name == "postgresql" else ""
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {quoted}{force}"))
        admin.dispose()


@pytest.fixture
def pg_url(pg_admin_url: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database on the real server; dropped afterwards."""
    yield from _fresh_database(pg_admin_url, "ik_test")


@pytest.fixture(scope="session")
def mysql_admin_url() -> str:
    url = os.environ.get(MYSQL_ENV) or MYSQL_LOCAL
    reason = _try_connect(url)
    if reason is not None:
        pytest.skip(
            f"no MySQL/MariaDB for the MySQL tests: {url} does not answer ({reason}); "
            f"set {MYSQL_ENV} to run them"
        )
    return url


@pytest.fixture
def mysql_url(mysql_admin_url: str) -> Iterator[str]:
    """A fresh, empty MySQL/MariaDB database; dropped afterwards."""
    yield from _fresh_database(mysql_admin_url, "ik_test")


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    """A path for a new SQLite database file."""
    return tmp_path / "evidence.sqlite"


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgresql", marks=pytest.mark.postgres),
        pytest.param("mysql", marks=pytest.mark.mysql),
    ]
)
def db_url(request: pytest.FixtureRequest) -> str:
    """An empty database of each kind the kit reads: SQLite, PostgreSQL, MySQL/MariaDB."""
    if request.param == "sqlite":
        return f"sqlite:///{request.getfixturevalue('sqlite_path')}"
    url: str = request.getfixturevalue("pg_url" if request.param == "postgresql" else "mysql_url")
    return url


INCIDENT_DB_PASSWORD = "hunter22-never-shown"
"""The password an incident database URL carries in tests: trust auth ignores it; it is there
to prove it never reaches a notebook, a report or findings.json."""


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def incident_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL for a new incident database a simulated pack is written into (``--into``):
    SQLite, or PostgreSQL with :data:`INCIDENT_DB_PASSWORD` in it."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'incident.sqlite'}"
    from sqlalchemy.engine import make_url

    url = make_url(request.getfixturevalue("pg_url")).set(password=INCIDENT_DB_PASSWORD)
    return url.render_as_string(hide_password=False)


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    """A Redis of the module's own, which it may write into (scripts/testdb.py redis-up);
    skipped, with the reason, only when there is no redis-server to start."""
    testdb = ROOT / "scripts" / "testdb.py"
    done = subprocess.run(
        [sys.executable, str(testdb), "redis-up"], capture_output=True, text=True, check=False
    )
    if done.returncode == 2:
        pytest.skip(done.stderr.strip())
    assert done.returncode == 0, done.stderr
    exported = dict(re.findall(r"export (\w+)='([^']*)'", done.stdout))
    yield exported["INCIDENTKIT_TEST_REDIS_URL"]
    if "INCIDENTKIT_TEST_REDIS_DIR" in exported:
        subprocess.run(
            [sys.executable, str(testdb), "redis-down", exported["INCIDENTKIT_TEST_REDIS_DIR"]],
            check=False,
        )


def pack_without(pack: Path, tmp_path: Path, *sections: str) -> Path:
    """A copy of ``pack`` in ``tmp_path/pack`` whose manifest leaves ``sections`` out."""
    copy = tmp_path / "pack"
    shutil.copytree(pack, copy)
    manifest = copy / "evidence.toml"
    text = manifest.read_text(encoding="utf-8")
    for section in sections:
        text = re.sub(rf"\n\[{section}\]\n(?:[^\[\n][^\n]*\n)*", "\n", text)
    manifest.write_text(text, encoding="utf-8")
    return copy


@pytest.fixture(scope="session")
def demo_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``incidentkit demo`` run once per test process: a ``run all`` of every bundled incident
    with its own parameters into ``<pack>/``, and the page that links them. Tests only read it
    (one that changes a file works on a copy); the modules that use it share the ``demo``
    xdist group, so one worker builds it."""
    from incidentkit.demo import demo_packs, run_demo

    out = tmp_path_factory.mktemp("demo")
    page, runs = run_demo(FIXTURES, out)
    assert page == out / "index.html"
    assert [run.pack for run in runs] == list(demo_packs(FIXTURES).names)
    return out


def read_run(
    flow: str, evidence: Path, out: Path, **parameters: Any
) -> tuple[int, dict[str, Any], str]:
    """Run ``flow``'s notebook through papermill; its exit code, findings.json and HTML."""
    from incidentkit.runner import run_flow

    result = run_flow(flow, evidence, out, parameters=parameters, progress=False)
    assert result.html is not None and result.html.is_file()
    findings = json.loads(result.findings.read_text()) if result.findings else {}
    return result.exit_code, findings, result.html.read_text(encoding="utf-8")


_CACHE_HOME: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    """Each test process caches loaded sources in a folder of its own, never the user's, and
    removes it when it ends."""
    if not os.environ.get("INCIDENTKIT_TEST_KEEP_CACHE_HOME"):
        import tempfile

        _CACHE_HOME.append(tempfile.mkdtemp(prefix="incidentkit-test-cache-"))
        os.environ["XDG_CACHE_HOME"] = _CACHE_HOME[-1]


PYTESTMARK = re.compile(r"^pytestmark = (\[[^\]]*\]|.*)", re.MULTILINE)
GROUP = re.compile(r"xdist_group\(\"([\w-]+)\"\)")


def module_groups(root: Path) -> dict[str, str]:
    """Each test module's ``xdist_group``, by node id path, read off its ``pytestmark``."""
    tests = Path(__file__).resolve().parent
    groups: dict[str, str] = {}
    for path in sorted(tests.rglob("test_*.py")):
        marks = PYTESTMARK.search(path.read_text(encoding="utf-8"))
        found = GROUP.search(marks.group(1)) if marks else None
        if found:
            groups[path.relative_to(root).as_posix()] = found.group(1)
    return groups


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` that keeps a module's ``xdist_group`` on one worker, so the shared
    fixture it names (a demo, a ``run all``, snapshots) is built once. pytest-xdist 3.8 marks
    a group by appending it to the node id, which pytest 9.2 no longer lets it do (xdist issue
    1386): its loadgroup then spreads a group's tests like ``load``. The groups are read off the
    modules' ``pytestmark`` instead; any other test is its own unit, as in loadgroup."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    groups = module_groups(config.rootpath)

    class ModuleGroupScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            group = groups.get(nodeid.split("::", 1)[0])
            return f"@{group}" if group else str(super()._split_scope(nodeid))

    return ModuleGroupScheduling(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every notebook test is also ``slow`` (a kernel starts and a flow runs): ``pytest -m
    'not slow'`` leaves them out with the tests marked slow by hand."""
    for item in items:
        if item.get_closest_marker("notebook") is not None:
            item.add_marker(pytest.mark.slow)


def pytest_unconfigure(config: pytest.Config) -> None:
    for folder in _CACHE_HOME:
        shutil.rmtree(folder, ignore_errors=True)
