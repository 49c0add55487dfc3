"""The evidence the example plugin writes, read by the kit (docs/producing-evidence.md).

``producing_world.build_producing_world`` runs the invoicing app through the real google-adk
with ``docs/producing/incidentkit_plugin.py``: two workers killed with SIGKILL (one after its
tool's side effect, one in a model call), then runs that complete, fail in a tool, pause on a
long-running tool and fail in the model. The ledger and journal go to SQLite (tables from the
plugin's metadata) or PostgreSQL (tables from ``docs/producing/schema.sql``). These tests check
that the kit reads all of it with no reject and that the orphans flow's triage classifies the
dead workers' runs as the seed's sweeper would. Like the other ADK tests they fail, never
skip, without the adk extra, naming the install command.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import logging
import re
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd
import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import make_url

import incidentkit
from incidentkit import store
from incidentkit.flows import orphans
from incidentkit.sources.diagnostics import KINDS

pytestmark = [
    pytest.mark.adk,
    pytest.mark.xdist_group("adk_producing_evidence"),
]  # worlds built once

INSTALL = "pip install -e '.[adk]'"
ROOT = Path(__file__).resolve().parents[2]
PRODUCING = ROOT / "docs" / "producing"


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # the parent package is missing
        return False


def _world_module() -> ModuleType:
    """The world's module, or a failure naming the extra (import errors past that check mean
    ADK's API changed: fix the plugin or producing_world.py)."""
    missing = [name for name in ("google.adk", "aiosqlite") if not _has(name)]
    if missing:
        pytest.fail(
            f"the example plugin's tests need {', '.join(missing)}, from the project's adk "
            f"extra (google-adk[db], aiosqlite); install it: {INSTALL}",
            pytrace=False,
        )
    from . import producing_world

    return producing_world


@pytest.fixture(scope="module")
def pw() -> ModuleType:
    return _world_module()


@pytest.fixture(scope="module")
def plugin(pw: ModuleType) -> ModuleType:
    return pw.ik  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def pg_databases(pg_admin_url: str) -> Iterator[Callable[[], str]]:
    """Makes fresh PostgreSQL databases that live as long as this module's tests."""
    admin = sa.create_engine(pg_admin_url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    names: list[str] = []

    def create() -> str:
        name = f"ik_producing_{uuid.uuid4().hex[:12]}"
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        names.append(name)
        url = make_url(pg_admin_url).set(drivername="postgresql+psycopg", database=name)
        return url.render_as_string(hide_password=False)

    yield create
    with admin.connect() as conn:
        for name in names:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def _run_sql_file(url: str, path: Path, *, schema: str | None = None) -> None:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            if schema:
                conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"; SET search_path TO "{schema}"')
            conn.exec_driver_sql(path.read_text(encoding="utf-8"))
    finally:
        engine.dispose()


@dataclass(frozen=True)
class Seen:
    """The world, and the kit's reading of it, taken before any test changes the ledger."""

    world: Any
    evidence: incidentkit.Evidence
    as_of: pd.Timestamp
    report: orphans.OrphanReport

    def run(self, scenario: str) -> pd.Series:
        """The ledger row of a scenario's session."""
        session_id = self.world.sessions[scenario].id
        rows = self.evidence.runs.loc[self.evidence.runs["session_id"].eq(session_id)]
        assert len(rows) == 1, rows
        return rows.iloc[0]

    def invocation(self, scenario: str) -> str:
        """The scenario's one invocation, as ADK's ``get_session`` reads it."""
        ids = {event.invocation_id for event in self.world.sessions[scenario].events}
        assert len(ids) == 1, ids
        return ids.pop()  # type: ignore[no-any-return]


@pytest.fixture(
    scope="module",
    params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)],
)
def seen(
    request: pytest.FixtureRequest, pw: ModuleType, tmp_path_factory: pytest.TempPathFactory
) -> Seen:
    """The world built once per ledger database, and what the kit makes of it."""
    folder = tmp_path_factory.mktemp(f"producing-{request.param}")
    if request.param == "sqlite":
        url = f"sqlite:///{folder / 'ledger.db'}"
        engine = sa.create_engine(url)
        pw.ik.Ledger(engine, owner="setup").create_tables()
        engine.dispose()
    else:
        url = request.getfixturevalue("pg_databases")()
        _run_sql_file(url, PRODUCING / "schema.sql")
    world = pw.build_producing_world(folder, url)
    evidence = incidentkit.open_evidence(world.manifest, environ=world.environ).load_all()
    # The evidence's own end, so the judgement holds under any default as_of rule: the local
    # runs began after the dead workers' leases ran out.
    as_of = max(
        evidence.runs["updated_at"].max(),
        evidence.events["ts"].max(),
        evidence.diagnostics["ts"].max(),
    )
    incident, flow_settings = orphans.setup(evidence, app_name=pw.APP, as_of=as_of)
    return Seen(world, evidence, as_of, orphans.triage(incident, flow_settings))


# --- the kit reads everything the plugin and ADK wrote ------------------------------------------


@pytest.mark.slow
def test_the_kit_reads_every_row_and_line(seen: Seen) -> None:
    ev = seen.evidence
    assert ev.rejects.empty, "the kit rejected what the plugin wrote:\n" + ev.rejects.to_string()
    assert ev.warnings.empty, ev.warnings.to_string()
    sessions = seen.world.sessions
    assert len(ev.runs) == len(sessions)
    assert set(ev.events["session_id"]) == {s.id for s in sessions.values()}
    assert len(ev.events) == sum(len(s.events) for s in sessions.values())


def test_each_run_is_claimed_and_finished(seen: Seen, pw: ModuleType) -> None:
    expected = {
        "done": "DONE",
        "failed": "FAILED",
        "paused": "PAUSED",
        "model_failed": "FAILED",
        "crash_tool": "RUNNING",
        "crash_model": "RUNNING",
    }
    assert set(expected) == set(pw.SCENARIOS)
    for scenario, status in expected.items():
        run = seen.run(scenario)
        assert run["status"] == status, scenario
        assert run["invocation_id"] == seen.invocation(scenario), scenario
        assert run["owner"] == seen.world.owner(scenario), scenario
        assert run["app_name"] == pw.APP and run["user_id"] == pw.USER, scenario
        assert run["attempts"] == 0, scenario
        message = seen.world.sessions[scenario].events[0].content.parts[0].text
        assert run["request"]["parts"][0]["text"] == message, scenario
        # the row is written before ADK stores the user message
        assert run["started_at"].timestamp() <= seen.world.sessions[scenario].events[0].timestamp
        if status == "RUNNING":  # a dead worker: renewed while alive, never finished
            assert run["started_at"] < run["updated_at"] < run["lease_until"], scenario
            assert run["lease_until"] < seen.as_of, scenario
        else:  # finished: the lease is dropped
            assert pd.isna(run["lease_until"]), scenario
            assert run["updated_at"] > run["started_at"], scenario
    assert {type(e) for e in seen.world.errors.values()} == {
        type(None),
        LookupError,
        ConnectionResetError,
    }


def test_the_journal_holds_intent_and_done_by_business_key(seen: Seen) -> None:
    journal = seen.evidence.journal.set_index("key")
    assert sorted(journal.index) == ["send-invoice:INV-1", "send-invoice:INV-77"]
    sent = journal.loc["send-invoice:INV-1"]
    assert sent["status"] == "DONE"
    assert sent["result"] == {"invoice_id": "INV-1", "status": "sent"}
    assert sent["invocation_id"] == seen.invocation("done")
    # W4: the billing system has the invoice, the journal only the intent
    crashed = journal.loc["send-invoice:INV-77"]
    assert crashed["status"] == "INTENT" and crashed["result"] is None
    assert crashed["invocation_id"] == seen.invocation("crash_tool")
    call_ids = [
        part.function_call.id
        for event in seen.world.sessions["crash_tool"].events
        for part in (event.content.parts if event.content else [])
        if part.function_call
    ]
    assert crashed["function_call_id"] in call_ids
    assert (seen.world.outbox / "INV-77.json").is_file()


def _kinds(seen: Seen, scenario: str) -> list[str]:
    lines = seen.evidence.diagnostics
    return list(lines.loc[lines["invocation_id"].eq(seen.invocation(scenario)), "kind"])


def test_the_diagnostics_lines_name_every_run(seen: Seen, pw: ModuleType) -> None:
    assert _kinds(seen, "done") == ["run.start", "run.many_llm_calls", "run.end"]
    assert _kinds(seen, "failed") == ["run.start", "tool.error", "run.end", "run.error"]
    assert _kinds(seen, "paused") == ["run.start", "run.end"]
    assert _kinds(seen, "model_failed") == ["run.start", "model.error", "run.end", "run.error"]
    # a run.start with no run.end: the workers that died
    assert _kinds(seen, "crash_tool") == ["run.start"]
    assert _kinds(seen, "crash_model") == ["run.start"]

    lines = seen.evidence.diagnostics
    assert set(lines["kind"]) <= set(KINDS)
    for scenario, session in seen.world.sessions.items():
        mine = lines.loc[lines["invocation_id"].eq(seen.invocation(scenario))]
        assert set(mine["session_id"]) == {session.id}, scenario
        assert set(mine["app_name"]) == {pw.APP} and set(mine["user_id"]) == {pw.USER}
    ends = lines.loc[lines["kind"].eq("run.end")].set_index("invocation_id")
    for scenario, outcome, calls in (
        ("done", "ok", 2),
        ("paused", "ok", 1),
        ("failed", "error", 1),
        ("model_failed", "error", 1),
    ):
        end = ends.loc[seen.invocation(scenario)]
        assert (end["outcome"], end["llm_calls"]) == (outcome, calls), scenario
        assert end["ms"] >= 0
    tool_error = lines.loc[lines["kind"].eq("tool.error")].iloc[0]
    assert tool_error["tool"] == "lookup_customer"
    (response,) = [
        part.function_call.id
        for event in seen.world.sessions["failed"].events
        for part in (event.content.parts if event.content else [])
        if part.function_call
    ]
    assert tool_error["call_id"] == response
    # the traceback, second line of its message included, stays with its record
    assert "LookupError: no customer C-404" in tool_error["message"]
    assert "the CRM answered 404" in tool_error["message"]
    model_error = lines.loc[lines["kind"].eq("model.error")].iloc[0]
    assert model_error["agent"] == pw.AGENT
    assert "ConnectionResetError" in model_error["message"]


# --- the orphans flow on what the plugin wrote ---------------------------------------------------


def test_the_dead_workers_runs_are_orphans_of_the_right_class(seen: Seen) -> None:
    report = seen.report
    found = report.orphans.set_index("run_id")
    tool, model = seen.run("crash_tool"), seen.run("crash_model")
    assert sorted(found.index) == sorted([tool["run_id"], model["run_id"]])
    # killed after billing sent the invoice, before the journal's DONE: W4
    assert found.loc[tool["run_id"], "orphan_class"] == "TOOL_UNANSWERED"
    assert found.loc[tool["run_id"], "journal_verdict"] == "INTENT_ONLY"
    assert found.loc[tool["run_id"], "action_kind"] == "ASK_DOWNSTREAM"
    assert found.loc[tool["run_id"], "invocation_source"] == "ledger"
    # killed during the model call: W2
    assert found.loc[model["run_id"], "orphan_class"] == "MODEL_INFLIGHT"
    assert found.loc[model["run_id"], "action_kind"] == "REDRIVE"
    assert report.live_leases.empty and report.crash_loops.empty
    calls = report.calls.loc[report.calls["run_id"].eq(tool["run_id"])]
    assert list(calls["business_key"]) == ["send-invoice:INV-77"]
    assert list(calls["journal_status"]) == ["INTENT"]


def test_the_paused_run_waits(seen: Seen) -> None:
    paused = seen.run("paused")
    in_flight = seen.report.in_flight.set_index("run_id")
    assert list(in_flight.index) == [paused["run_id"]]
    assert in_flight.loc[paused["run_id"], "orphan_class"] == "PAUSED"
    assert in_flight.loc[paused["run_id"], "action_kind"] == "WAIT"
    disagreements = seen.report.status_disagreements
    finished = {seen.run(name)["run_id"] for name in ("done", "paused")}
    assert not finished & set(disagreements["run_id"]), disagreements.to_string()


def test_a_run_that_failed_is_not_actually_done(seen: Seen) -> None:
    failed = {seen.run(name)["run_id"] for name in ("failed", "model_failed")}
    disagreements = seen.report.status_disagreements
    assert not failed & set(disagreements["run_id"]), disagreements.to_string()


def test_the_sweeper_claims_each_expired_run_once(seen: Seen, plugin: ModuleType) -> None:
    engine = sa.create_engine(seen.world.ledger_url, poolclass=sa.pool.NullPool)
    try:
        sweeper = plugin.Ledger(engine, owner="sweeper-1")
        claimed = sweeper.claim_expired(now=seen.as_of.to_pydatetime())
        assert sorted(row["run_id"] for row in claimed) == sorted(
            seen.run(name)["run_id"] for name in ("crash_tool", "crash_model")
        )
        assert {(row["owner"], row["attempts"], row["status"]) for row in claimed} == {
            ("sweeper-1", 1, "RUNNING")
        }
        # a second sweeper at the same moment finds nothing left to claim
        assert (
            plugin.Ledger(engine, owner="sweeper-2").claim_expired(now=seen.as_of.to_pydatetime())
            == []
        )
        # the dead worker's heartbeat, had it come back, renews nothing it lost
        assert (
            plugin.Ledger(engine, owner="worker-2").renew([seen.run("crash_tool")["run_id"]]) == 0
        )
    finally:
        engine.dispose()


# --- the DDL -------------------------------------------------------------------------------------


def _columns(conn: sa.Connection, schema: str) -> dict[str, Any]:
    """Each table's columns (name, type as PostgreSQL spells it, nullable) and primary key."""
    inspector = sa.inspect(conn)
    return {
        table: (
            [
                (col["name"], col["type"].compile(dialect=conn.dialect), col["nullable"])
                for col in inspector.get_columns(table, schema=schema)
            ],
            inspector.get_pk_constraint(table, schema=schema)["constrained_columns"],
        )
        for table in ("agent_run", "tool_journal")
    }


@pytest.mark.postgres
def test_schema_sql_creates_the_tables_the_kit_reads(pg_url: str, plugin: ModuleType) -> None:
    """schema.sql, the kit's own metadata (incidentkit/store.py) and the plugin's metadata
    give the same columns, types, NOT NULLs and keys on PostgreSQL."""
    _run_sql_file(pg_url, PRODUCING / "schema.sql", schema="ddl")
    engine = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            for schema, metadata in (("kit", store.kit_metadata), ("plugin", plugin.metadata)):
                conn.execute(sa.schema.CreateSchema(schema))
                tables = [metadata.tables["agent_run"], metadata.tables["tool_journal"]]
                metadata.create_all(
                    conn.execution_options(schema_translate_map={None: schema}), tables=tables
                )
            ddl = _columns(conn, "ddl")
            assert ddl == _columns(conn, "kit")
            assert ddl == _columns(conn, "plugin")
            # the DDL refuses a status the kit would reject
            with pytest.raises(sa.exc.IntegrityError), conn.begin_nested():
                conn.exec_driver_sql(
                    "INSERT INTO ddl.tool_journal (key, invocation_id, status) "
                    "VALUES ('k', 'e-1', 'SENT')"
                )
    finally:
        engine.dispose()


# --- the diagnostics lines ---------------------------------------------------------------------


def _read_lines(
    write: Callable[[logging.Logger], None], plugin: ModuleType
) -> incidentkit.Evidence:
    """Lines ``write`` logs through the plugin's handler, read back by the kit."""
    with tempfile.TemporaryDirectory(prefix="ik-diagnostics-") as name:
        folder = Path(name)
        logger = logging.Logger("agent.diagnostics")  # not registered: nothing else sees it
        handler = plugin.diagnostics_handler(str(folder / "diagnostics.log"))
        logger.addHandler(handler)
        try:
            write(logger)
        finally:
            handler.close()
        (folder / "evidence.toml").write_text('[diagnostics]\npath = "diagnostics.log"\n')
        return incidentkit.open_evidence(folder).load_all()


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.text(min_size=1, max_size=12), min_size=4, max_size=4))
def test_a_token_reads_back_as_written(values: list[str]) -> None:
    """Whatever an id holds (spaces, newlines, '=', '%', 'null'), it stays one token of its
    own key: the kit reads exactly the token the plugin wrote, never missing, never split."""
    plugin = _world_module().ik
    tokens = [plugin.token(v) for v in values]

    def write(logger: logging.Logger) -> None:
        logger.error("run.start inv=%s app=%s user=%s session=%s", *tokens)

    ev = _read_lines(write, plugin)
    assert ev.rejects.empty, ev.rejects.to_string()
    (line,) = ev.diagnostics.itertuples()
    assert line.kind == "run.start"
    assert [line.invocation_id, line.app_name, line.user_id, line.session_id] == tokens
    assert all(re.fullmatch(r"\S+", t) for t in tokens)


def test_none_is_written_as_no_value(plugin: ModuleType) -> None:
    ev = _read_lines(
        lambda log: log.info("tool.error inv=%s tool=%s call=%s", "e-1", "t", plugin.token(None)),
        plugin,
    )
    (line,) = ev.diagnostics.itertuples()
    assert (line.tool, pd.isna(line.call_id)) == ("t", True)


def test_an_exception_of_many_lines_stays_one_record(plugin: ModuleType) -> None:
    class Rejected(Exception):  # noqa: N818 - no "Error" in its name: not a stack line
        pass

    def write(logger: logging.Logger) -> None:
        try:
            try:
                raise KeyError("first\n\nsecond")
            except KeyError as err:
                raise Rejected("outer\nline two") from err
        except Rejected as err:
            logger.error("run.error inv=%s", "e-1", exc_info=err)
        logger.info("run.end inv=%s outcome=error ms=1 llmCalls=0", "e-1")

    ev = _read_lines(write, plugin)
    assert ev.rejects.empty, ev.rejects.to_string()
    assert list(ev.diagnostics["kind"]) == ["run.error", "run.end"]
    message = ev.diagnostics["message"].iloc[0]
    assert "line two" in message and "second" in message and "direct cause" in message


def test_an_error_nobody_awaited_is_an_undeliverable_line(plugin: ModuleType) -> None:
    """A task whose exception is never retrieved: asyncio reports it to the loop's handler
    when the task is collected, and the plugin's handler logs it as rx.undeliverable."""

    async def fails() -> None:
        raise ValueError("lost after the caller left")

    def write(logger: logging.Logger) -> None:
        loop = asyncio.new_event_loop()
        try:
            plugin.install_undeliverable_handler(loop, logger)

            async def main() -> None:
                task = loop.create_task(fails())
                await asyncio.sleep(0)  # it runs and fails; nobody awaits it
                del task
                gc.collect()

            loop.run_until_complete(main())
        finally:
            loop.close()

    ev = _read_lines(write, plugin)
    assert ev.rejects.empty, ev.rejects.to_string()
    assert list(ev.diagnostics["kind"]) == ["rx.undeliverable"]
    assert "ValueError: lost after the caller left" in ev.diagnostics["message"].iloc[0]


# --- the ADK Java plugin (documented source, not built here) ----------------------------------

_JAVA_KEYS = {"inv", "app", "user", "session", "agent", "tool", "call", "outcome", "ms"}


def test_the_java_plugin_logs_and_stores_what_the_kit_reads() -> None:
    """IncidentkitPlugin.java logs one line per kind the kit knows, naming only keys the kit
    reads, and its SQL names only tables and columns of schema.sql."""
    source = (PRODUCING / "IncidentkitPlugin.java").read_text(encoding="utf-8")
    formats = re.findall(r'log\.(?:info|warn|error)\(\s*"([^"]*)"', source)
    assert sorted(f.split(" ", 1)[0] for f in formats) == sorted(KINDS)
    for fmt in formats:
        assert set(re.findall(r"(\w+)=\{\}", fmt)) <= _JAVA_KEYS | {"llmCalls", "calls"}, fmt
    literals = " ".join(re.findall(r'"([^"]*)"', source))
    sql = " ".join(part for part in literals.split('"') if not part.startswith(KINDS))
    names = set(re.findall(r"\b[a-z]+(?:_[a-z]+)+\b", sql)) - {"make_interval", "many_llm_calls"}
    tables = (store.agent_run, store.tool_journal)
    known = {t.name for t in tables} | {c.name for t in tables for c in t.columns}
    assert names <= known, names - known
    assert {"lease_until", "attempts", "function_call_id"} <= set(re.findall(r"\w+", sql))
