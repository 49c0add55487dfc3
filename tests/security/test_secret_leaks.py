"""A database password reaches no artifact and no terminal output, in any failure mode.

Passwords hold the characters URLs and renderers treat specially (space, ``&``, ``@``, ``:``,
``/``, ``%``, ``#``, non-ASCII). Each failure mode — a refused port, a server that never
answers, a missing database — is tried through the Python API (message and whole traceback
chain), ``incidentkit inspect`` and ``incidentkit run`` (its output and every file it leaves).
"""

from __future__ import annotations

import html
import json
import os
import socket
import subprocess
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
import sqlalchemy as sa

from incidentkit import open_evidence
from incidentkit.errors import SourceError

ROOT = Path(__file__).resolve().parents[2]
CRASH = ROOT / "fixtures" / "crash_recovery"
CLI = str(Path(sys.executable).with_name("incidentkit"))
PASSWORDS = ["S3cr3t xyz&123", "p@ss:w/rd#%20ö", "naïve pässwörd&x=1"]


def renderings(password: str) -> set[str]:
    """Ways the password could be printed, written out here rather than taken from the kit."""
    url_form = sa.URL.create("x", username="u", password=password, host="h").render_as_string(
        hide_password=False
    )
    forms = {
        password,
        quote(password, safe=""),
        quote(password, safe=" "),
        quote_plus(password),
        url_form[len("x://u:") : url_form.rindex("@")],
        html.escape(password),
        json.dumps(password)[1:-1],
    }
    return {form for form in forms if len(form) >= 4}


def assert_clean(text: str, password: str, where: str) -> None:
    for form in renderings(password):
        assert form not in text, f"{where} holds the password as {form!r}"


@pytest.fixture(scope="module")
def silent_port() -> Iterator[int]:
    """A port on loopback that accepts connections and never answers (a hung server)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    yield server.getsockname()[1]
    server.close()


def _refused_port() -> int:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port: int = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    return port


@pytest.fixture(params=["refused", "silent", "missing-database"])
def failing_url(request: pytest.FixtureRequest, silent_port: int) -> Iterator[tuple[str, str]]:
    """(password, URL) for one failure mode; the password cycles through PASSWORDS."""
    mode = request.param
    password = PASSWORDS[["refused", "silent", "missing-database"].index(mode)]
    if mode == "missing-database":
        admin = sa.make_url(request.getfixturevalue("pg_admin_url"))
        host, port, user = admin.host, admin.port, admin.username
        database = "ik_no_such_db"
    else:
        host, port, user = "127.0.0.1", silent_port if mode == "silent" else _refused_port(), "u"
        database = "db"
    url = sa.URL.create(
        "postgresql+psycopg",
        username=user,
        password=password,
        host=host,
        port=port,
        database=database,
        query={"connect_timeout": "2"},
    ).render_as_string(hide_password=False)
    yield password, url


def _evidence(tmp_path: Path) -> Path:
    folder = tmp_path / "evidence"
    folder.mkdir()
    (folder / "evidence.toml").write_text(
        "allow_outside = true\n"
        f'[ledger]\nurl = "env:IK_SECRET_DB_URL"\n[events]\npath = "{CRASH / "events.jsonl"}"\n',
        encoding="utf-8",
    )
    return folder


@pytest.mark.postgres
def test_the_python_api_masks_the_password(failing_url: tuple[str, str], tmp_path: Path) -> None:
    password, url = failing_url
    incident = open_evidence(_evidence(tmp_path), environ={"IK_SECRET_DB_URL": url})
    with pytest.raises(SourceError, match="cannot connect") as info:
        _ = incident.runs
    assert_clean(str(info.value), password, "the message")
    assert_clean(repr(info.value), password, "the repr")
    # A notebook shows the whole chain (the driver's error is the cause): it must be clean too.
    chain = "".join(traceback.format_exception(info.value))
    assert_clean(chain, password, "the traceback")


@pytest.mark.postgres
def test_inspect_masks_the_password(failing_url: tuple[str, str], tmp_path: Path) -> None:
    password, url = failing_url
    done = subprocess.run(
        [CLI, "inspect", str(_evidence(tmp_path))],
        env={**os.environ, "IK_SECRET_DB_URL": url},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "cannot connect" in done.stdout + done.stderr
    assert_clean(done.stdout + done.stderr, password, "inspect's output")


@pytest.mark.postgres
@pytest.mark.notebook
def test_run_masks_the_password_in_every_artifact(
    failing_url: tuple[str, str], tmp_path: Path
) -> None:
    password, url = failing_url
    out = tmp_path / "out"
    command = [CLI, "run", "orphans", "--evidence", str(_evidence(tmp_path)), "--out", str(out)]
    done = subprocess.run(
        [*command, "--quiet", "-p", "as_of", "2026-11-29T04:00:00Z"],
        env={**os.environ, "IK_SECRET_DB_URL": url},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 2, done.stderr  # the ledger cannot be read
    assert_clean(done.stdout + done.stderr, password, "run's output")
    artifacts = sorted(out.iterdir())
    assert {p.name for p in artifacts} >= {"orphans.ipynb", "orphans.html"}
    for path in artifacts:
        text = path.read_text(encoding="utf-8")
        assert "cannot connect" in text or path.suffix not in (".ipynb", ".html")
        assert_clean(text, password, path.name)


def test_the_post_run_scan_finds_every_rendering(tmp_path: Path) -> None:
    """A notebook that prints the password anyway: the scan deletes what holds it and fails."""
    from incidentkit.redact import url_secrets
    from incidentkit.runner import scan_for_secrets

    for password in PASSWORDS:
        url = sa.URL.create("postgresql", username="u", password=password, host="h")
        secrets = url_secrets(url.render_as_string(hide_password=False))
        for i, form in enumerate(sorted(renderings(password))):
            leaky = tmp_path / f"leak-{i}.html"
            leaky.write_text(f"<pre>{form}</pre>", encoding="utf-8")
            assert scan_for_secrets([leaky], secrets) == [leaky], form
        clean = tmp_path / "clean.html"
        clean.write_text("<pre>cannot connect: u:***@h</pre>", encoding="utf-8")
        assert scan_for_secrets([clean], secrets) == []
