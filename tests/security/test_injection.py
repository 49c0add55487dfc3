"""No query path of the kit can commit a write, whatever a manifest or a parameter holds.

Each database gets a ``canary`` table and the kit reads with hostile text in every identifier
position (table, schema, mapped columns) and every value position (app, session and invocation
filters), through the Python API, a manifest and ``incidentkit run -p``. Afterwards ``canary``
must be empty and no ``pwned`` table may exist. The PostgreSQL payload is the one that once
committed through COPY's simple query protocol.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from incidentkit import open_evidence, store
from incidentkit.errors import IncidentkitError, SchemaError, SourceError
from incidentkit.manifest import Filters, SourceSpec
from incidentkit.sources import events
from incidentkit.sources.sql import journal, ledger

ROOT = Path(__file__).resolve().parents[2]
CRASH = ROOT / "fixtures" / "crash_recovery"
WRITE = "INSERT INTO canary VALUES (666); CREATE TABLE pwned (x int)"
ISSUE_PAYLOAD = (
    '" AS "status" FROM "agent_run_colon") TO STDOUT; COMMIT; BEGIN READ WRITE; '
    f"{WRITE}; COMMIT; --"
)
VALUES = [
    ISSUE_PAYLOAD,
    f"x'; COMMIT; {WRITE}; --",
    f"x\\'; {WRITE}; --",
    f'x"; {WRITE}; --',
    f"x`; {WRITE}; -- ",
    f"$$; {WRITE}; $$",
    f"$q$; {WRITE}; $q$",
    f"x/*; {WRITE}; */",
    f"x'); {WRITE}; #",
    "%(app_name)s",
    ":app_name",
    "%s",
    "?",
    "{}",
    "100%",
    "x'--",
]
# Identifiers the table really has (so the column check passes): each must reach the database
# as one quoted identifier. At most 63 bytes, PostgreSQL's limit.
IDENTIFIERS = [
    ":app_name",
    "%(app_name)s",
    '"; INSERT INTO canary VALUES (666); --',
    "'; INSERT INTO canary VALUES (666); --",
    "`); INSERT INTO canary VALUES (666) #",
    "$$; INSERT INTO canary VALUES (666); $$",
    "a%s?b",
    "x/* c */y",
]
MAPPED = ("app_name", "session_id", "invocation_id", "status", "user_id", "owner", "started_at")


def _engine(url: str) -> sa.Engine:
    return sa.create_engine(url, poolclass=sa.pool.NullPool)


@pytest.fixture
def evidence_db(db_url: str) -> Iterator[str]:
    """The database with the kit's tables, one ledger row, and an empty ``canary``."""
    engine = _engine(db_url)
    store.create_tables(engine, store.kit_metadata)
    store.insert_rows(engine, store.agent_run, [_run("r-1")])
    at = datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
    store.insert_rows(
        engine,
        store.tool_journal,
        [
            {
                "key": "send:1",
                "invocation_id": "e-1",
                "function_call_id": "c-1",
                "status": "DONE",
                "result": {"ok": True},
                "created_at": at,
                "updated_at": at,
            }
        ],
    )
    event = {"id": "ev-1", "invocationId": "e-1", "author": "user", "timestamp": 1764385200000}
    store.insert_rows(
        engine,
        store.adk_event,
        [
            {
                "event_id": "ev-1",
                "app_name": "support",
                "user_id": "u-1",
                "session_id": "s-1",
                "invocation_id": "e-1",
                "ts": at,
                "event": event,
            }
        ],
    )
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE canary (x integer)"))
    engine.dispose()
    yield db_url
    _assert_untouched(db_url)


def _run(run_id: str) -> dict[str, Any]:
    at = datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
    return {
        "run_id": f"00000000-0000-0000-0000-{int(run_id[2:]):012d}",
        "app_name": "support",
        "user_id": "u-1",
        "session_id": "s-1",
        "invocation_id": "e-1",
        "request": {"q": "hi"},
        "status": "DONE",
        "owner": "pod-1",
        "lease_until": None,
        "attempts": 1,
        "started_at": at,
        "updated_at": at,
    }


def _assert_untouched(url: str) -> None:
    engine = _engine(url)
    try:
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM canary")).scalar_one() == 0
        assert not sa.inspect(engine).has_table("pwned")
    finally:
        engine.dispose()


def _spec(section: str, url: str, **options: Any) -> SourceSpec:
    return SourceSpec(section=section, url_ref=url, naive_timestamps="utc", **options)


@pytest.mark.parametrize("value", VALUES)
def test_hostile_filter_values_are_bound_not_run(evidence_db: str, value: str) -> None:
    filters = [
        Filters(app_name=value),
        Filters(session_ids=(value, "s-1")),
        Filters(invocation_ids=(value,), app_name=value),
    ]
    for one in filters:
        runs = ledger.load(_spec("ledger", evidence_db), one).frames["runs"]
        assert runs["app_name"].tolist() in ([], ["support"])  # matched as text, or not at all
        assert value not in runs["app_name"].tolist()
        journal.load(_spec("journal", evidence_db), one)
        events.load(_spec("events", evidence_db, format="sql"), one)
    only = Filters(session_ids=(value, "s-1"))
    assert ledger.load(_spec("ledger", evidence_db), only).frames["runs"]["run_id"].size == 1


def test_hostile_identifiers_are_quoted_as_one_name(evidence_db: str) -> None:
    """A table and columns named like injections are read as what they are: names."""
    names = dict(zip(MAPPED, IDENTIFIERS, strict=False))
    table_name = IDENTIFIERS[-1]
    columns = [
        sa.Column(names.get(col.name, col.name), col.type, nullable=col.nullable)
        for col in store.agent_run.columns
    ]
    hostile = sa.Table(table_name, sa.MetaData(), *columns)
    engine = _engine(evidence_db)
    hostile.create(engine)
    row = _run("r-2")
    with engine.begin() as conn:
        conn.execute(hostile.insert(), [{names.get(k, k): v for k, v in row.items()}])
    engine.dispose()
    for value in VALUES:
        spec = _spec("ledger", evidence_db, table=table_name, columns=names)
        runs = ledger.load(spec, Filters(app_name=value)).frames["runs"]
        assert runs.empty
    runs = ledger.load(spec, Filters(app_name="support")).frames["runs"]
    assert runs[["app_name", "session_id", "status"]].values.tolist() == [
        ["support", "s-1", "DONE"]
    ]


def test_a_column_the_table_lacks_is_refused_before_any_query(evidence_db: str) -> None:
    spec = _spec("ledger", evidence_db, columns={"status": ISSUE_PAYLOAD})
    with pytest.raises(SchemaError, match="lacks columns"):
        ledger.load(spec, Filters(app_name=ISSUE_PAYLOAD))
    spec = _spec("ledger", evidence_db, table=ISSUE_PAYLOAD)
    # Not found; MySQL refuses the name outright (longer than 64 characters).
    with pytest.raises(SourceError, match=r"table not found|refused a statement"):
        ledger.load(spec, Filters())


def test_the_reported_attack_commits_nothing(evidence_db: str) -> None:
    """The issue's reproduction: a column named ``:app_name`` and the payload as the app."""
    columns = [sa.Column(col.name, col.type) for col in store.agent_run.columns]
    colon = sa.Table("agent_run_colon", sa.MetaData(), *columns, sa.Column(":app_name", sa.Text))
    engine = _engine(evidence_db)
    colon.create(engine)
    with engine.begin() as conn:
        conn.execute(colon.insert(), [{**_run("r-3"), ":app_name": "DONE"}])
    engine.dispose()
    spec = _spec("ledger", evidence_db, table="agent_run_colon", columns={"status": ":app_name"})
    for value in (ISSUE_PAYLOAD, "support"):
        runs = ledger.load(spec, Filters(app_name=value)).frames["runs"]
        assert runs["app_name"].tolist() == ([] if value == ISSUE_PAYLOAD else ["support"])


def _toml(value: str) -> str:
    return json.dumps(value)  # a TOML basic string takes JSON's escapes


@pytest.mark.slow
def test_hostile_manifest_values_commit_nothing(evidence_db: str, tmp_path: Path) -> None:
    for i, value in enumerate(VALUES):
        folder = tmp_path / f"m{i}"
        folder.mkdir()
        (folder / "evidence.toml").write_text(
            f"app_name = {_toml(value)}\nsessions = [{_toml(value)}]\n"
            f'invocations = [{_toml(value)}, "e-1"]\n'
            f'[ledger]\nurl = "env:IK_EVIDENCE_URL"\nnaive_timestamps = "utc"\n'
            f'[journal]\nurl = "env:IK_EVIDENCE_URL"\nnaive_timestamps = "utc"\n'
            f'[events]\nurl = "env:IK_EVIDENCE_URL"\nformat = "sql"\nnaive_timestamps = "utc"\n',
            encoding="utf-8",
        )
        incident = open_evidence(folder, environ={"IK_EVIDENCE_URL": evidence_db})
        for frame in (incident.runs, incident.journal, incident.events):
            assert value not in frame["invocation_id"].tolist()
            assert set(frame["invocation_id"]) <= {"e-1"}  # matched as text, or not at all


@pytest.mark.notebook
def test_hostile_run_parameters_commit_nothing(evidence_db: str, tmp_path: Path) -> None:
    """``incidentkit run orphans -p app_name <payload>`` against a ledger in each database."""
    folder = tmp_path / "evidence"
    folder.mkdir()
    (folder / "evidence.toml").write_text(
        'allow_outside = true\n[ledger]\nurl = "env:IK_EVIDENCE_URL"\nnaive_timestamps = "utc"\n'
        f'[events]\npath = "{CRASH / "events.jsonl"}"\n'
        f'[journal]\npath = "{CRASH / "journal.jsonl"}"\n',
        encoding="utf-8",
    )
    env = {**os.environ, "IK_EVIDENCE_URL": evidence_db}
    cli = str(Path(sys.executable).with_name("incidentkit"))
    out = tmp_path / "out"
    command = [cli, "run", "orphans", "--evidence", str(folder), "--out", str(out), "--quiet"]
    done = subprocess.run(
        [*command, "-p", "app_name", ISSUE_PAYLOAD, "-p", "as_of", "2026-11-29T04:00:00Z"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    # The payload was bound as a value: the ledger was read for that app and matched nothing.
    assert done.returncode == 3, done.stderr
    executed = (out / "orphans.ipynb").read_text(encoding="utf-8")
    assert "matches nothing: 0 runs, 0 events of app" in executed
    meta = json.loads(executed)["metadata"]["papermill"]["parameters"]
    assert meta["app_name"] == ISSUE_PAYLOAD


def test_every_refusal_is_an_incidentkit_error(evidence_db: str) -> None:
    """Hostile names that do not exist end in the kit's own errors, never a driver's."""
    for value in IDENTIFIERS + VALUES:
        for options in ({"table": value}, {"columns": {"status": value}}):
            with pytest.raises(IncidentkitError):
                ledger.load(_spec("ledger", evidence_db, **options), Filters())
