"""The ``adk web`` span store, written by the real google-adk: ADK's own ``SqliteSpanExporter``
records the conformance world's run (``adk_world``: real ``Runner``, scripted ``BaseLlm``,
``SqliteSessionService``) through a tracer provider, beside the OTLP/JSON lines the same spans
give. The kit must load the store into what ADK emitted and into the OTLP frame wherever both
formats carry the fact, select the same spans under every filter, never change the file, and
say what a session store given as spans is.
"""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd
import pytest

import incidentkit
from incidentkit.cli import main
from incidentkit.errors import SourceError
from incidentkit.manifest import Filters, SourceSpec, Window
from incidentkit.snapshot import take
from incidentkit.sources import spans
from incidentkit.sources.spans import PAYLOAD_KEYS, REDACTED

pytestmark = pytest.mark.adk

STORE_ONLY = ("status", "status_message")
"""Frame columns the store cannot fill as OTLP does: it keeps no span status."""
EVENT_ONLY = ("exception.type", "exception.message")
"""Attributes the OTLP frame takes from a span's exception event; the store keeps no events."""


@dataclass(frozen=True)
class Run:
    world: Any
    store: Path
    sessions: Path

    @property
    def folder(self) -> Path:
        return Path(self.world.folder)


_SWITCH: list[Any] = []


def _switch() -> Any:
    """A span processor, installed once on the process's tracer provider, that hands finished
    spans to its ``target`` while one is set (OpenTelemetry cannot remove a processor)."""
    if not _SWITCH:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

        from . import adk_world

        class Switch(SpanProcessor):
            target: SpanProcessor | None = None

            def on_end(self, span: ReadableSpan) -> None:
                if self.target is not None:
                    self.target.on_end(span)

        adk_world.span_exporter()  # installs the global SDK provider ADK's tracer uses
        switch = Switch()
        trace.get_tracer_provider().add_span_processor(switch)  # type: ignore[attr-defined]
        _SWITCH.append(switch)
    return _SWITCH[0]


@pytest.fixture(scope="module", params=["2", "1"], ids=["semconv", "legacy"])
def run(
    request: pytest.FixtureRequest, w: ModuleType, tmp_path_factory: pytest.TempPathFactory
) -> Run:
    """The conformance world under one telemetry schema, its spans also in ADK's SQLite store
    (``w``: the extra is installed, else the test fails with the command to install it)."""
    from google.adk.telemetry.sqlite_span_exporter import SqliteSpanExporter
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from . import adk_world

    switch = _switch()
    folder = tmp_path_factory.mktemp(f"adk-web-{request.param}")
    store, sessions = folder / "spans.db", folder / "session.db"
    exporter = SqliteSpanExporter(db_path=str(store))
    switch.target = SimpleSpanProcessor(exporter)
    try:
        world = adk_world.build_world(str(sessions), folder, telemetry_schema=request.param)
    finally:
        switch.target = None
        exporter.shutdown()
    (folder / "evidence.toml").write_text(
        '[events]\npath = "session.db"\n\n[spans]\npath = "spans.db"\n', encoding="utf-8"
    )
    return Run(world, store, sessions)


def _load(path: Path, filters: Filters | None = None, **spec: Any) -> pd.DataFrame:
    loaded = spans.load(SourceSpec("spans", paths=(path,), **spec), filters or Filters())
    assert loaded.rejects.empty, loaded.rejects.to_string()
    return loaded.frames["spans"].sort_values("span_id").reset_index(drop=True)


def _store_frame(run: Run, filters: Filters | None = None) -> pd.DataFrame:
    return _load(run.store, filters)


def _otlp_frame(run: Run, filters: Filters | None = None) -> pd.DataFrame:
    return _load(run.world.spans_file, filters)


def _comparable(frame: pd.DataFrame) -> pd.DataFrame:
    """What both formats carry: every column but the status, attributes but the exception's."""
    attributes = frame["attributes"].map(
        lambda a: {k: v for k, v in a.items() if k not in EVENT_ONLY}
    )
    return frame.drop(columns=list(STORE_ONLY)).assign(attributes=attributes)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_store_holds_every_span_adk_emitted(run: Run) -> None:
    with sqlite3.connect(f"file:{run.store}?mode=ro", uri=True) as conn:
        stored = conn.execute("SELECT count(*) FROM spans").fetchone()[0]
    assert stored == len(run.world.spans) > 0
    got = _store_frame(run)
    want = {f"{span.context.span_id:016x}": span for span in run.world.spans}
    assert sorted(got["span_id"]) == sorted(want)
    for row in got.itertuples():
        span = want[row.span_id]
        assert row.trace_id == f"{span.context.trace_id:032x}"
        parent = None if span.parent is None else f"{span.parent.span_id:016x}"
        assert (None if pd.isna(row.parent_span_id) else row.parent_span_id) == parent
        assert row.name == span.name
        assert row.start == pd.Timestamp(span.start_time, unit="ns", tz="UTC")
        assert row.end == pd.Timestamp(span.end_time, unit="ns", tz="UTC")
        for key, value in (span.attributes or {}).items():
            expected = REDACTED if key in PAYLOAD_KEYS else value
            assert row.attributes[key] == (
                list(expected) if isinstance(expected, tuple) else expected
            )


def test_kinds_ids_and_tokens_are_what_adk_did(run: Run) -> None:
    got = _store_frame(run)
    world = run.world
    events = world.events
    roots = got[got["parent_span_id"].isna()]
    # Each run_async call is one trace whose root is the invocation span.
    assert set(roots["kind"]) == {"invocation"}
    assert got.groupby("trace_id")["kind"].apply(lambda k: (k == "invocation").sum()).eq(1).all()
    assert len(roots) == len({event.invocation_id for event in events})
    agents = got[got["kind"].eq("invoke_agent")]
    assert set(agents["agent_name"]) == {"triage_agent", "billing_agent"}
    # Every tool run joins to the function call ADK stored, by ADK's own id.
    tools = got[got["kind"].eq("execute_tool") & got["name"].ne("execute_tool (merged)")]
    calls = {call.id: call.name for event in events for call in event.get_function_calls()}
    assert dict(zip(tools["tool_call_id"], tools["tool_name"], strict=True)) == calls
    # One model call span per call ADK made (the refused one too, on the legacy schema).
    models = got[got["kind"].eq("call_llm")]
    answered = [event for event in events if event.author != "user" and event.usage_metadata]
    assert len(models) >= len(answered) > 0
    usage = models.dropna(subset=["input_tokens"])
    assert len(usage) == len(answered)
    assert usage["input_tokens"].eq(10).all() and usage["output_tokens"].eq(5).all()
    # Ids spread over each trace: one invocation and one session per trace, ADK's own.
    assert got["invocation_id"].notna().all() and got["session_id"].notna().all()
    assert set(got["invocation_id"]) == {event.invocation_id for event in events}
    assert set(got["session_id"]) == {session.id for session in world.sessions}
    assert got.groupby("trace_id")["invocation_id"].nunique().eq(1).all()


def test_the_same_run_as_otlp_json_gives_the_same_frame(run: Run) -> None:
    store, otlp = _store_frame(run), _otlp_frame(run)
    pd.testing.assert_frame_equal(_comparable(store), _comparable(otlp))
    # The status the store can tell: ERROR where the span has an error.type attribute.
    failed = store["attributes"].map(lambda a: "error.type" in a)
    assert store.loc[failed, "status"].eq("ERROR").all()
    assert otlp.loc[failed, "status"].eq("ERROR").all()
    assert store.loc[~failed, "status"].isna().all()
    assert store["status_message"].isna().all()


def test_filters_select_the_spans_a_whole_read_keeps(run: Run) -> None:
    events = sorted(run.world.events, key=lambda e: e.timestamp)
    invocations = list(dict.fromkeys(event.invocation_id for event in events))
    second = next(e.timestamp for e in events if e.invocation_id == invocations[1])
    cut = pd.Timestamp(second, unit="s", tz="UTC") - pd.Timedelta(milliseconds=1)
    sessions = [session.id for session in run.world.sessions]
    chosen = [
        Filters(window=Window(cut, cut + pd.Timedelta(hours=1))),
        Filters(window=Window(cut - pd.Timedelta(hours=1), cut)),
        Filters(session_ids=(sessions[1],)),
        Filters(invocation_ids=(invocations[0], invocations[-1])),
        Filters(window=Window(cut, cut + pd.Timedelta(hours=1)), session_ids=(sessions[0],)),
    ]
    for filters in chosen:
        store, otlp = _store_frame(run, filters), _otlp_frame(run, filters)
        assert len(store) > 0, filters
        pd.testing.assert_frame_equal(_comparable(store), _comparable(otlp))


def test_every_way_of_naming_the_store_reads_it_unchanged(run: Run, tmp_path: Path) -> None:
    before = _sha256(run.store)
    beside = sorted(p.name for p in run.folder.iterdir())
    whole = _store_frame(run)
    for section in (
        f'url = "sqlite:///{run.store}"',
        f'path = "{run.store}"\nformat = "adk-web-sqlite"',
        'url = "env:IK_SPANS_DB"',
    ):
        manifest = tmp_path / "evidence.toml"
        manifest.write_text(f"allow_outside = true\n\n[spans]\n{section}\n", encoding="utf-8")
        evidence = incidentkit.open_evidence(
            manifest, environ={"IK_SPANS_DB": f"sqlite:///{run.store}"}
        )
        got = evidence.spans.sort_values("span_id").reset_index(drop=True)
        pd.testing.assert_frame_equal(got, whole, obj=section)
    payload = next(
        (span, key)
        for span in run.world.spans
        for key in (span.attributes or {})
        if key in PAYLOAD_KEYS
    )
    span, key = payload
    read = spans.span_payloads(run.store, [f"{span.context.span_id:016x}"], keys=[key])
    assert read["key"].tolist() == [key]
    assert read["value"].iloc[0] == spans._decoded(span.attributes[key])
    assert _sha256(run.store) == before
    assert sorted(p.name for p in run.folder.iterdir()) == beside  # no -wal, -shm, journal


def test_a_snapshot_of_the_store_reads_back(run: Run, tmp_path: Path) -> None:
    before = _sha256(run.store)
    source = incidentkit.open_evidence(run.folder)
    assert main(["snapshot", str(run.folder), "--out", str(tmp_path / "cli"), "--quiet"]) == 0
    taken = take(run.folder, tmp_path / "api").folder
    for folder in (tmp_path / "cli", taken):
        frozen = incidentkit.open_evidence(folder)
        pd.testing.assert_frame_equal(frozen.spans, source.spans)
        assert frozen.rejects.empty
    assert _sha256(run.store) == before


def test_bad_rows_beside_adks_are_rejects_and_the_rest_loads(run: Run, tmp_path: Path) -> None:
    copy = tmp_path / "spans.db"
    copy.write_bytes(run.store.read_bytes())
    with sqlite3.connect(copy) as conn:
        rows = conn.execute("SELECT max(rowid) FROM spans").fetchone()[0]
        conn.execute(
            "INSERT INTO spans SELECT 'ffffffffffffff01', trace_id, span_id, name, "
            "start_time_unix_nano, end_time_unix_nano, session_id, invocation_id, '{broken' "
            "FROM spans LIMIT 1"
        )
        conn.execute(
            "INSERT INTO spans SELECT 'ffffffffffffff02', trace_id, span_id, name, "
            "end_time_unix_nano, start_time_unix_nano - 1, session_id, invocation_id, "
            "attributes_json FROM spans LIMIT 1"
        )
    loaded = spans.load(SourceSpec("spans", paths=(copy,)), Filters())
    got = loaded.frames["spans"].sort_values("span_id").reset_index(drop=True)
    pd.testing.assert_frame_equal(got, _store_frame(run))
    reasons = loaded.rejects.set_index("location")["reason"].to_dict()
    assert reasons == {
        f"spans.db:rowid {rows + 1}": "row cannot be read: attributes_json is malformed JSON "
        "(Expecting property name enclosed in double quotes at column 2)",
        f"spans.db:rowid {rows + 2}": "span ends before it starts",
    }


def test_a_session_store_given_as_spans_says_what_it_is(run: Run, tmp_path: Path) -> None:
    for spec in (
        SourceSpec("spans", paths=(run.sessions,), sqlite_path=run.sessions),
        SourceSpec("spans", paths=(run.sessions,), format="adk-web-sqlite"),
    ):
        with pytest.raises(SourceError, match="ADK session store") as raised:
            spans.load(spec, Filters())
        assert "events" in raised.value.fix and "SqliteSpanExporter" in raised.value.fix
