"""ADK Python's SQLite span store (``SqliteSpanExporter``, format ``adk-web-sqlite``), from
stores written here with the exporter's own table: rows into spans, unreadable rows into
rejects naming the file and rowid, filters that select whole traces, what other SQLite files
are told to be, and the file left as it was. ``tests/adk/test_adk_web_spans.py`` reads a store
the real exporter wrote during a real ADK run.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from incidentkit.errors import ManifestError, SchemaError, SourceError
from incidentkit.manifest import Filters, SourceSpec, Window, load_manifest
from incidentkit.sources import spans
from incidentkit.sources.loaded import Loaded

EXPORTER_TABLE = """
CREATE TABLE spans (
  span_id TEXT PRIMARY KEY, trace_id TEXT NOT NULL, parent_span_id TEXT, name TEXT NOT NULL,
  start_time_unix_nano INTEGER, end_time_unix_nano INTEGER, session_id TEXT,
  invocation_id TEXT, attributes_json TEXT
)"""
"""``google.adk.telemetry.sqlite_span_exporter._CREATE_SPANS_TABLE`` (google-adk 2.13)."""
T1, T2 = "a" * 32, "b" * 32
S = 1_750_000_000_000_000_000  # 2025-06-15T15:06:40Z in nanoseconds
INV1, INV2, SESSION = "e-1", "e-2", "sess-1"


def span(
    span_id: str,
    trace_id: str = T1,
    parent: str | None = None,
    name: str = "invoke_agent support",
    start: Any = S,
    end: Any = S + 1_000_000,
    attributes: Any = None,
) -> tuple[Any, ...]:
    """A row as the exporter writes it (its session and invocation columns from the
    attributes); ``attributes`` is JSON-dumped unless it is already text or bytes."""
    attrs = {} if attributes is None else attributes
    text = attrs if isinstance(attrs, str | bytes) else json.dumps(attrs)
    mapping = attrs if isinstance(attrs, dict) else {}
    session = mapping.get("gcp.vertex.agent.session_id") or mapping.get("gen_ai.conversation.id")
    invocation = mapping.get("gcp.vertex.agent.invocation_id")
    return (span_id, trace_id, parent, name, start, end, session, invocation, text)


def store(path: Path, *rows: tuple[Any, ...], table: str = EXPORTER_TABLE) -> Path:
    with sqlite3.connect(path) as conn:
        conn.execute(table)
        conn.executemany("INSERT INTO spans VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    sqlite3.connect(path).close()
    return path


def load(path: Path, filters: Filters | None = None, **spec: Any) -> Loaded:
    return spans.load(SourceSpec("spans", paths=(path,), **spec), filters or Filters())


def good_rows() -> list[tuple[Any, ...]]:
    """One invocation: root (session only), agent, model call with tokens, failed tool."""
    return [
        span(
            "0000000000000001",
            name="invoke_workflow support",
            end=S + 50_000_000,
            attributes={
                "gen_ai.operation.name": "invoke_workflow",
                "gen_ai.conversation.id": SESSION,
            },
        ),
        span(
            "0000000000000002",
            parent="0000000000000001",
            start=S + 1_000_000,
            end=S + 40_000_000,
            attributes={"gen_ai.agent.name": "support", "gen_ai.conversation.id": SESSION},
        ),
        span(
            "0000000000000003",
            parent="0000000000000002",
            name="generate_content gemini",
            start=S + 2_000_000,
            end=S + 12_000_000,
            attributes={
                "gen_ai.operation.name": "generate_content",
                "gcp.vertex.agent.invocation_id": INV1,
                "gen_ai.usage.input_tokens": 120,
                "gen_ai.usage.output_tokens": 7,
                "gen_ai.response.finish_reasons": ["stop"],
                "gen_ai.input.messages": '[{"role": "user"}]',
                "gen_ai.request.temperature": math.nan,
            },
        ),
        span(
            "0000000000000004",
            parent="0000000000000002",
            name="execute_tool lookup",
            start=S + 13_000_000,
            end=S + 20_000_000,
            attributes={
                "gen_ai.tool.name": "lookup",
                "gen_ai.tool.call.id": "adk-1",
                "error.type": "ToolError",
                "gcp.vertex.agent.tool_call_args": '{"order": "A-1"}',
            },
        ),
    ]


def other_trace(start: int = S + 3_600_000_000_000) -> list[tuple[Any, ...]]:
    """A second invocation an hour later, of another session."""
    return [
        span(
            "0000000000000011",
            trace_id=T2,
            name="invocation",
            start=start,
            end=start + 9_000_000,
            attributes={"gcp.vertex.agent.session_id": "sess-2"},
        ),
        span(
            "0000000000000012",
            trace_id=T2,
            parent="0000000000000011",
            name="call_llm",
            start=start + 1_000_000,
            end=start + 8_000_000,
            attributes={"gcp.vertex.agent.invocation_id": INV2},
        ),
    ]


def test_rows_become_the_spans_frame(tmp_path: Path) -> None:
    loaded = load(store(tmp_path / "spans.db", *good_rows()))
    assert loaded.rejects.empty
    got = loaded.frames["spans"]
    assert got["span_id"].tolist() == [f"000000000000000{i}" for i in (1, 2, 3, 4)]
    assert got["trace_id"].eq(T1).all()
    assert got["kind"].tolist() == ["invocation", "invoke_agent", "call_llm", "execute_tool"]
    assert got["parent_span_id"].isna().tolist() == [True, False, False, False]
    assert got["start"].iloc[0] == pd.Timestamp("2025-06-15T15:06:40Z")
    assert got["duration_ms"].tolist() == [50.0, 39.0, 10.0, 7.0]
    # The store keeps no status: ERROR where error.type says the span failed, else missing.
    assert got["status"].isna().tolist() == [True, True, True, False]
    assert got["status"].iloc[3] == "ERROR" and got["status_message"].isna().all()
    assert got["invocation_id"].eq(INV1).all() and got["session_id"].eq(SESSION).all()
    assert got["agent_name"].iloc[1] == "support"
    assert (got["tool_name"].iloc[3], got["tool_call_id"].iloc[3]) == ("lookup", "adk-1")
    assert got["input_tokens"].iloc[2] == 120 and got["output_tokens"].iloc[2] == 7
    model = got["attributes"].iloc[2]
    assert model["gen_ai.response.finish_reasons"] == ["stop"]
    assert model["gen_ai.input.messages"] == spans.REDACTED
    assert math.isnan(model["gen_ai.request.temperature"])  # Python's json writes NaN
    assert got["attributes"].iloc[3]["gcp.vertex.agent.tool_call_args"] == spans.REDACTED
    payloads = spans.span_payloads(tmp_path / "spans.db", ["0000000000000004"])
    assert payloads["value"].tolist() == [{"order": "A-1"}]


BAD_ROWS = {
    "attributes_json is malformed JSON": span("00000000000000a1", attributes="{not json"),
    "attributes_json is not a JSON object but list": span("00000000000000a2", attributes="[1]"),
    "attributes_json is not UTF-8 text": span("00000000000000a3", attributes=b'{"k": "\xff"}'),
    "attributes_json is not a JSON object but int": span("00000000000000a4", attributes=12),
    "start or end time is not an integer": span("00000000000000a5", start="soon"),
    "span ends before it starts": span("00000000000000a6", end=S - 1),
    "bad span id 'xyz'": span("xyz"),
    "bad parent span id 'nothex'": span("00000000000000a8", parent="nothex"),
    "span lacks its start time": span("00000000000000a9", start=None),
    "attribute gen_ai.tool.name is not text": span(
        "00000000000000aa", attributes={"gen_ai.tool.name": ["a", "b"]}
    ),
    "span name is not text": span("00000000000000ab", name=b"blob"),
}


def test_unreadable_rows_are_rejects_naming_the_file_and_rowid(tmp_path: Path) -> None:
    path = store(tmp_path / "spans.db", *good_rows(), *BAD_ROWS.values())
    with sqlite3.connect(path) as conn:  # text that is not UTF-8, stored as TEXT
        conn.execute(
            "INSERT INTO spans VALUES ('00000000000000ac', ?, NULL, CAST(? AS TEXT), ?, ?, "
            "NULL, NULL, '{}')",
            (T1, b"bad \xff name", S, S + 1),
        )
    loaded = load(path)
    assert loaded.frames["spans"]["span_id"].tolist() == [row[0] for row in good_rows()]
    reasons = loaded.rejects.set_index("location")["reason"]
    rowids = range(len(good_rows()) + 1, len(good_rows()) + len(BAD_ROWS) + 2)
    assert sorted(reasons.index) == sorted(f"spans.db:rowid {n}" for n in rowids)
    expected = [*BAD_ROWS, "name is not UTF-8 text"]
    for n, reason in zip(rowids, expected, strict=True):
        assert reason in reasons[f"spans.db:rowid {n}"], (n, reasons[f"spans.db:rowid {n}"])
    assert loaded.rejects["raw"].notna().all() and loaded.rejects["source"].eq("spans").all()


def test_filters_read_whole_traces_then_cut_like_a_file(tmp_path: Path) -> None:
    hour = S + 3_600_000_000_000
    broken = span("00000000000000ff", trace_id=T2, start=hour, end=hour - 1)  # a T2 row
    path = store(tmp_path / "spans.db", *good_rows(), *other_trace(), broken)
    # The window holds only the model call, which names the invocation; the session it gets
    # from the root, outside the window: the trace is read whole, then cut.
    window = Window(at(S + 1_500_000), at(S + 2_500_000))
    cut = load(path, Filters(window=window))
    assert cut.frames["spans"]["span_id"].tolist() == ["0000000000000003"]
    assert cut.frames["spans"]["session_id"].tolist() == [SESSION]
    assert cut.rejects.empty  # trace T2 was not read
    by_session = load(path, Filters(session_ids=(SESSION,)))
    assert by_session.frames["spans"]["trace_id"].eq(T1).all() and by_session.rejects.empty
    assert len(by_session.frames["spans"]) == 4
    by_invocation = load(path, Filters(invocation_ids=(INV2,)))
    got = by_invocation.frames["spans"]["span_id"].tolist()
    assert got == ["0000000000000011", "0000000000000012"]
    assert by_invocation.rejects["location"].tolist() == ["spans.db:rowid 7"]  # T2 was read
    assert load(path, Filters(session_ids=("sess-9",))).frames["spans"].empty
    # A time SQL cannot compare reads its trace: the row is placed (here: rejected) after.
    unknown = store(
        tmp_path / "unknown.db", *good_rows(), span("00000000000000fe", T2, start="soon")
    )
    later = load(unknown, Filters(window=Window(at(hour), at(hour + 10**9))))
    assert later.frames["spans"].empty
    assert later.rejects["location"].tolist() == ["unknown.db:rowid 5"]


def at(ns: int) -> pd.Timestamp:
    return pd.Timestamp(ns, unit="ns", tz="UTC")


def test_other_sqlite_files_are_told_for_what_they_are(tmp_path: Path) -> None:
    sessions = tmp_path / "session.db"
    with sqlite3.connect(sessions) as conn:  # SqliteSessionService's tables
        for table in ("app_states", "user_states", "sessions", "events"):
            conn.execute(f"CREATE TABLE {table} (id TEXT)")
    with pytest.raises(SourceError, match="this is an ADK session store") as raised:
        load(sessions)
    assert "read it under [events]" in str(raised.value)
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE traces (id TEXT)")
    with pytest.raises(SchemaError, match="has no spans table") as raised:
        load(other)
    assert raised.value.value == ["traces"]
    foreign = store(
        tmp_path / "foreign.db",
        table="CREATE TABLE spans (id, name, trace_id, start_time, end_time, a, b, c, d)",
    )
    with pytest.raises(SchemaError, match="lacks the columns of ADK's SqliteSpanExporter"):
        load(foreign)
    with pytest.raises(SourceError, match="table spans is empty"):
        load(store(tmp_path / "empty.db"))


def test_the_format_and_the_file_must_agree(tmp_path: Path) -> None:
    path = store(tmp_path / "spans.db", *good_rows())
    with pytest.raises(SchemaError, match=r"format otlp-json does not read this file \(a SQLite"):
        load(path, format="otlp-json")
    lines = tmp_path / "spans.jsonl"
    lines.write_text('{"resourceSpans": []}\n', encoding="utf-8")
    with pytest.raises(SchemaError, match="format adk-web-sqlite does not read this file"):
        load(lines, format="adk-web-sqlite")
    renamed = tmp_path / "traces.bin"  # detected by its header, whatever its name
    renamed.write_bytes(path.read_bytes())
    assert len(load(renamed).frames["spans"]) == 4
    assert len(load(path, format="adk-web-sqlite").frames["spans"]) == 4


def test_the_manifest_names_the_store_by_path_url_or_format(tmp_path: Path) -> None:
    store(tmp_path / "spans.db", *good_rows())
    whole = load(tmp_path / "spans.db").frames["spans"]
    for section in (
        'path = "spans.db"',
        'url = "sqlite:///spans.db"',
        'paths = ["spans.db"]\nformat = "adk-web-sqlite"',
        'url = "env:IK_SPANS"',
    ):
        (tmp_path / "evidence.toml").write_text(f"[spans]\n{section}\n", encoding="utf-8")
        spec = load_manifest(tmp_path).sources["spans"]
        got = spans.load(spec, Filters(), environ={"IK_SPANS": "sqlite:///spans.db"})
        pd.testing.assert_frame_equal(got.frames["spans"], whole, obj=section)
    (tmp_path / "evidence.toml").write_text(
        '[spans]\npath = "spans.db"\nformat = "adk-web"\n', encoding="utf-8"
    )
    with pytest.raises(ManifestError, match="adk-web-sqlite"):
        load_manifest(tmp_path)
    server = SourceSpec("spans", url_ref="env:IK_SPANS")
    with pytest.raises(SourceError, match="spans are read from files or from a SQLite span store"):
        spans.load(server, Filters(), environ={"IK_SPANS": "postgresql+psycopg://u@h:5432/db"})


def test_reading_changes_nothing_in_the_folder(tmp_path: Path) -> None:
    path = store(
        tmp_path / "spans.db", *good_rows(), *other_trace(), BAD_ROWS["span ends before it starts"]
    )
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    load(path)
    load(path, Filters(session_ids=(SESSION,)))
    spans.span_payloads(path, ["0000000000000003"])
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spans.db"]
