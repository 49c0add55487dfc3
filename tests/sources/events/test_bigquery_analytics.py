"""The BigQuery Agent Analytics table (``bq extract`` exports) into the canonical frames.

The rows are written here in the shapes ``BigQueryAgentAnalyticsPlugin`` (google-adk 2.13)
logs them, one behaviour per test; ``tests/adk/test_adk2_analytics.py`` reads the rows the real
plugin wrote beside the ADK store of the same run.
"""

from __future__ import annotations

import json
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import incidentkit as ik
from incidentkit.cli import main
from incidentkit.errors import IncidentkitError, ManifestError, SourceError
from incidentkit.manifest import SourceSpec
from incidentkit.sources import events
from incidentkit.sources.events import bigquery_analytics

T0 = datetime(2026, 12, 6, 19, 38, 32, tzinfo=UTC)
APP, USER, SESSION, INV = "shop", "u-1", "s-1", "e-1"
JSON_COLUMNS = ("content", "attributes", "latency_ms")
FRAMES = ("events", "calls", "responses", "state_writes")


def row(n: int, event_type: str, **fields: Any) -> dict[str, Any]:
    """One row as the plugin logs it (the nested export: JSON columns as objects), ``n``
    milliseconds after T0."""
    attributes = {
        "adk": {"schema_version": "1", "app_name": APP},
        "root_agent_name": "support",
        "session_metadata": {"session_id": SESSION, "app_name": APP, "user_id": USER},
    }
    state = fields.pop("state", None)
    if state is not None:
        attributes["session_metadata"]["state"] = state  # type: ignore[index]
    source = fields.pop("source", None)
    if source is not None:
        attributes["adk"]["source_event_id"] = source  # type: ignore[index]
    attributes |= fields.pop("attributes", {})
    return {
        "timestamp": T0 + timedelta(milliseconds=n),
        "event_id": f"row-{n}",
        "event_type": event_type,
        "agent": fields.pop("agent", "support"),
        "session_id": fields.pop("session_id", SESSION),
        "invocation_id": fields.pop("invocation_id", INV),
        "user_id": USER,
        "trace_id": "t" * 32,
        "span_id": "s" * 16,
        "parent_span_id": None,
        "content": fields.pop("content", None),
        "content_parts": fields.pop("content_parts", []),
        "attributes": attributes,
        "latency_ms": fields.pop("latency_ms", None),
        "status": fields.pop("status", "OK"),
        "error_message": fields.pop("error_message", None),
        "is_truncated": fields.pop("is_truncated", False),
    }


def text_part(text: str) -> dict[str, Any]:
    return {
        "mime_type": "text/plain",
        "uri": None,
        "object_ref": None,
        "text": text,
        "part_index": 0,
        "part_attributes": "{}",
        "storage_mode": "INLINE",
    }


def response(n: int, text: str, **fields: Any) -> dict[str, Any]:
    usage = {"prompt_token_count": 10, "candidates_token_count": 5, "total_token_count": 15}
    return row(
        n,
        "LLM_RESPONSE",
        content={"response": text, "usage": {"prompt": 10, "completion": 5, "total": 15}},
        latency_ms={"total_ms": 2, "time_to_first_token_ms": 2},
        attributes={"usage_metadata": usage, "cache_type": "none", "finish_reason": "STOP"},
        **fields,
    )


def invocation() -> list[dict[str, Any]]:
    """A user asks, the model calls a tool that writes state (one key redacted), the model
    answers, the resumable agent checkpoints; the invocation completes."""
    return [
        row(0, "USER_MESSAGE_RECEIVED", content={"text_summary": "Where is A-42?"},
            content_parts=[text_part("Where is A-42?")]),
        row(5, "INVOCATION_STARTING", state={"ticket": "T-7", "temp:req": "[REDACTED]"}),
        row(6, "AGENT_STARTING", content="Answer order questions."),
        row(7, "LLM_REQUEST", content={"prompt": [{"role": "user", "content": "Where?"}]}),
        response(9, "call: lookup_order"),
        row(10, "TOOL_STARTING", content={"tool": "lookup_order", "args": {"order_id": "A-42"},
                                          "tool_origin": "LOCAL"}),
        row(12, "TOOL_COMPLETED", content={"tool": "lookup_order", "result": "shipped",
                                           "tool_origin": "LOCAL"}, latency_ms={"total_ms": 1}),
        row(13, "STATE_DELTA", source="ev-resp",
            attributes={"state_delta": {"status": "shipped", "api_key": "[REDACTED]"}}),
        row(14, "LLM_REQUEST"),
        response(16, "text: 'A-42 has shipped.'"),
        row(17, "AGENT_RESPONSE", source="ev-answer",
            content={"response": "text: 'A-42 has shipped.'"},
            attributes={"source_event_author": "support"}),
        row(18, "AGENT_STATE_CHECKPOINT", source="ev-end",
            content={"agent_state": None, "end_of_agent": True}),
        row(19, "AGENT_COMPLETED", latency_ms={"total_ms": 13}),
        row(20, "INVOCATION_COMPLETED", latency_ms={"total_ms": 15}),
    ]  # fmt: skip


def limit_hit() -> list[dict[str, Any]]:
    """An invocation ADK stops at max_llm_calls: the refused call's LLM_REQUEST, error rows."""
    inv = {"invocation_id": "e-2", "session_id": "s-2"}
    message = "Max number of llm calls limit of `1` exceeded"
    trace = f"Traceback (most recent call last):\n  ...\nLlmCallsLimitExceededError: {message}\n"
    return [
        row(100, "USER_MESSAGE_RECEIVED", content={"text_summary": "Pay"}, **inv),
        row(101, "INVOCATION_STARTING", **inv),
        row(102, "LLM_REQUEST", **inv),
        response(103, "call: pay", **inv),
        row(104, "TOOL_STARTING", content={"tool": "pay", "args": {}}, **inv),
        row(105, "TOOL_ERROR", content={"tool": "pay", "args": {}}, status="ERROR",
            error_message="card declined", latency_ms={"total_ms": 1}, **inv),
        row(106, "LLM_REQUEST", **inv),
        row(107, "AGENT_ERROR", status="ERROR", error_message=message,
            content={"error_traceback": trace}, **inv),
        row(108, "NODE_ERROR", status="ERROR", error_message=message, source="ev-limit",
            content={"error_code": "LlmCallsLimitExceededError"}, **inv),
        row(109, "INVOCATION_ERROR", status="ERROR", error_message=message,
            content={"error_traceback": trace}, latency_ms={"total_ms": 9}, **inv),
    ]  # fmt: skip


# -- writing the rows as bq extract does -----------------------------------------------------------


def extract_line(record: dict[str, Any]) -> str:
    """``bq extract --destination_format NEWLINE_DELIMITED_JSON``: JSON columns as text,
    TIMESTAMP as ``YYYY-MM-DD HH:MM:SS.ffffff UTC``, NULLs left out."""
    out: dict[str, Any] = {}
    for name, value in record.items():
        if value is None:
            continue
        if name == "timestamp" and isinstance(value, datetime):
            value = value.strftime("%Y-%m-%d %H:%M:%S.%f UTC")
        elif name in JSON_COLUMNS:
            value = json.dumps(value)
        elif name == "content_parts" and isinstance(value, list):
            value = [
                {k: v for k, v in part.items() if v is not None} if isinstance(part, dict) else part
                for part in value
            ]
        out[name] = value
    return json.dumps(out)


def nested_line(record: dict[str, Any]) -> str:
    stamp = record["timestamp"]
    return json.dumps(
        record | {"timestamp": stamp.isoformat()} if isinstance(stamp, datetime) else record
    )


PART = pa.struct(
    [
        ("mime_type", pa.string()),
        ("uri", pa.string()),
        ("object_ref", pa.struct([("uri", pa.string()), ("version", pa.string())])),
        ("text", pa.string()),
        ("part_index", pa.int64()),
        ("part_attributes", pa.string()),
        ("storage_mode", pa.string()),
    ]
)
SCHEMA = pa.schema(
    [
        ("timestamp", pa.timestamp("us", tz="UTC")),
        *((name, pa.string()) for name in bigquery_analytics.COLUMNS[1:10]),
        ("content", pa.string()),
        ("content_parts", pa.list_(PART)),
        ("attributes", pa.string()),
        ("latency_ms", pa.string()),
        ("status", pa.string()),
        ("error_message", pa.string()),
        ("is_truncated", pa.bool_()),
    ]
)


def write(folder: Path, rows: list[dict[str, Any]], variant: str = "extract", **toml: str) -> Path:
    """The rows saved as ``variant`` (extract, nested, parquet) under ``folder``, with an
    evidence.toml naming them in [events] and in any section of ``toml`` (section: format)."""
    folder.mkdir(parents=True, exist_ok=True)
    if variant == "parquet":
        name = "agent_events.parquet"
        records = [
            r | {c: None if r[c] is None else json.dumps(r[c]) for c in JSON_COLUMNS} for r in rows
        ]
        pq.write_table(pa.Table.from_pylist(records, schema=SCHEMA), folder / name)
    else:
        name = "agent_events.jsonl"
        line = extract_line if variant == "extract" else nested_line
        (folder / name).write_text("".join(line(r) + "\n" for r in rows), encoding="utf-8")
    sections = [f'[events]\npath = "{name}"\n']
    sections += [
        f'[{section}]\npath = "{name}"\n' + (f'format = "{fmt}"\n' if fmt else "")
        for section, fmt in toml.items()
    ]
    (folder / "evidence.toml").write_text("\n".join(sections), encoding="utf-8")
    return folder


def frames(folder: Path) -> dict[str, pd.DataFrame]:
    evidence = ik.open_evidence(folder)
    return {name: evidence.frame(name) for name in FRAMES}


# -- the events frames ---------------------------------------------------------------------------


def test_rows_become_the_events_adk_stored(tmp_path: Path) -> None:
    got = frames(write(tmp_path, invocation()))
    ev = got["events"]
    assert ev["author"].tolist() == ["user", "support", "support", "support", "support"]
    assert ev["kind"].tolist() == ["turn", "turn", "turn", "turn", "checkpoint"]
    assert ev["text"].tolist()[0] == "Where is A-42?" and ev["text"].iloc[3] == "A-42 has shipped."
    # the stored ids where a row names them; the plugin's row id otherwise
    assert ev["event_id"].tolist() == ["row-0", "row-9", "ev-resp", "ev-answer", "ev-end"]
    assert ev["final_response"].tolist() == [True, False, False, True, False]
    assert ev["total_tokens"].tolist()[1::2] == [15, 15]
    assert (ev[["app_name", "user_id", "session_id"]].drop_duplicates().values.tolist()) == [
        [APP, USER, SESSION]
    ]
    assert set(ev["source_format"]) == {"bigquery-agent-analytics"}
    (call,) = got["calls"].itertuples()
    assert (call.name, call.args, call.event_id, pd.isna(call.call_id)) == (
        "lookup_order",
        {"order_id": "A-42"},
        "row-9",
        True,
    )
    (answer,) = got["responses"].itertuples()
    assert (answer.name, answer.response, answer.event_id) == (
        "lookup_order",
        {"result": "shipped"},  # a result that is no object, wrapped as ADK stores it
        "ev-resp",
    )


def test_redacted_values_are_no_writes_and_the_user_delta_comes_from_the_state(
    tmp_path: Path,
) -> None:
    evidence = ik.open_evidence(write(tmp_path, invocation()))
    writes = evidence.frame("state_writes")
    assert writes[["event_id", "key", "value"]].values.tolist() == [
        ["row-0", "ticket", "T-7"],  # the user message's delta, from the state around it
        ["ev-resp", "status", "shipped"],
    ]
    warned = evidence.source("events").warnings
    hidden = warned.loc[warned["reason"].eq(bigquery_analytics.HIDDEN)]
    assert hidden[["location", "raw"]].values.tolist() == [
        ["agent_events.jsonl:2", "temp:req"],  # the state INVOCATION_STARTING logged
        ["agent_events.jsonl:8", "api_key"],
    ]


@pytest.mark.parametrize("variant", ["nested", "parquet"])
def test_every_export_gives_the_same_frames(tmp_path: Path, variant: str) -> None:
    rows = invocation() + limit_hit()
    extract = frames(write(tmp_path / "extract", rows))
    other = frames(write(tmp_path / variant, rows, variant))
    for name in FRAMES:
        pd.testing.assert_frame_equal(other[name], extract[name])


def test_the_order_of_the_rows_does_not_matter(tmp_path: Path) -> None:
    rows = invocation() + limit_hit()
    shuffled = rows[::-1]  # bq extract writes rows in no order
    a, b = frames(write(tmp_path / "a", rows)), frames(write(tmp_path / "b", shuffled))
    for name in FRAMES:
        pd.testing.assert_frame_equal(a[name], b[name])


def test_a_limit_hit_is_an_error_event_and_no_model_call(tmp_path: Path) -> None:
    ev = frames(write(tmp_path, limit_hit()))["events"]
    assert ev["author"].tolist() == ["user", "support", "support"]
    error = ev.iloc[-1]
    assert (error["event_id"], error["kind"], error["error_code"]) == (
        "ev-limit",
        "error",
        "LlmCallsLimitExceededError",
    )
    # the raised tool error is no answer: the call stays unanswered, as ADK stored it
    assert frames(write(tmp_path / "b", limit_hit()))["responses"].empty


def test_markers_that_reach_the_table_are_named(tmp_path: Path) -> None:
    start, end = T0.timestamp(), T0.timestamp() + 0.009
    compaction = row(
        15,
        "EVENT_COMPACTION",
        source="ev-summary",
        content={"start_timestamp": start, "end_timestamp": end, "compacted_content": "Sum."},
    )
    rows = invocation()
    ev = frames(write(tmp_path, [*rows[:9], compaction, *rows[9:]]))["events"]
    (marker,) = ev.loc[ev["event_id"].eq("ev-summary")].itertuples()
    assert (marker.kind, marker.final_response) == ("compaction", False)
    assert (marker.compaction_start, marker.compaction_end) == (
        pd.Timestamp(T0),
        pd.Timestamp(T0) + pd.Timedelta(milliseconds=9),
    )
    assert ev["compacted_by"].notna().sum() >= 2  # the turns it summarises


def test_streamed_chunks_are_not_model_calls(tmp_path: Path) -> None:
    chunk = row(8, "LLM_RESPONSE", content={"response": "text: 'A-4'"})
    got = frames(write(tmp_path, [*invocation()[:4], chunk, *invocation()[4:]]))
    assert got["events"]["author"].ne("user").sum() == 4  # two model calls, one answer, end


def test_a_repeated_row_is_read_once(tmp_path: Path) -> None:
    rows = invocation()
    evidence = ik.open_evidence(write(tmp_path, [*rows, rows[4]]))  # a retried write
    assert len(evidence.frame("events")) == 5
    warned = evidence.source("events").warnings
    assert warned.loc[warned["reason"].eq(bigquery_analytics.DUPLICATE), "location"].tolist() == [
        "agent_events.jsonl:15"
    ]


def test_what_the_table_lost_is_warned(tmp_path: Path) -> None:
    rows = invocation()[:-1]  # no INVOCATION_COMPLETED: open, or dropped by the plugin
    rows[4]["is_truncated"] = True
    warned = ik.open_evidence(write(tmp_path, rows)).source("events").warnings
    reasons = dict(zip(warned["reason"], warned["location"], strict=False))
    assert reasons[bigquery_analytics.OPEN] == "agent_events.jsonl:2"
    assert reasons[bigquery_analytics.TRUNCATED] == "agent_events.jsonl:5"


def test_the_window_keeps_its_events(tmp_path: Path) -> None:
    folder = write(tmp_path, invocation() + limit_hit())
    toml = folder / "evidence.toml"
    start, end = (T0 + timedelta(milliseconds=50)).isoformat(), "2026-12-07T00:00:00Z"
    window = f'window = {{ start = "{start}", end = "{end}" }}\n'
    toml.write_text(window + toml.read_text(), encoding="utf-8")
    assert set(frames(folder)["events"]["invocation_id"]) == {"e-2"}


# -- the diagnostics frame -----------------------------------------------------------------------


def test_the_rows_give_the_run_times_and_errors(tmp_path: Path) -> None:
    folder = write(tmp_path, invocation() + limit_hit(), diagnostics="bigquery-agent-analytics")
    lines = ik.open_evidence(folder).frame("diagnostics")
    shown = lines[["kind", "invocation_id", "outcome", "ms", "llm_calls"]].astype(object)
    assert shown.where(shown.notna(), None).values.tolist() == [
        ["run.start", "e-1", None, None, None],
        ["run.end", "e-1", "ok", 15, 2],
        ["run.start", "e-2", None, None, None],
        ["tool.error", "e-2", None, 1, None],
        ["run.end", "e-2", "error", 9, 1],
        ["run.error", "e-2", None, 9, None],
    ]
    failed = lines.loc[lines["kind"].eq("run.error")].iloc[0]
    assert failed["level"] == "ERROR" and failed["message"].splitlines() == [
        "INVOCATION_ERROR: Max number of llm calls limit of `1` exceeded",
        "LlmCallsLimitExceededError: Max number of llm calls limit of `1` exceeded",
    ]
    assert lines.loc[lines["kind"].eq("tool.error"), "tool"].tolist() == ["pay"]


def test_the_diagnostics_format_is_detected(tmp_path: Path) -> None:
    folder = write(tmp_path, invocation(), diagnostics="")
    assert len(ik.open_evidence(folder).frame("diagnostics")) == 2


# -- formats: given, detected, refused -------------------------------------------------------------


def test_the_manifest_names_the_format_in_events_and_diagnostics(tmp_path: Path) -> None:
    folder = write(tmp_path, invocation(), diagnostics="bigquery-agent-analytics")
    toml = folder / "evidence.toml"
    toml.write_text(
        toml.read_text().replace("[events]\n", '[events]\nformat = "bigquery-agent-analytics"\n'),
        encoding="utf-8",
    )
    assert len(ik.open_evidence(folder).frame("events")) == 5
    (folder / "evidence.toml").write_text(
        '[spans]\npath = "agent_events.jsonl"\nformat = "bigquery-agent-analytics"\n'
    )
    with pytest.raises(ManifestError, match=r"\[spans\] format is not one the kit reads"):
        ik.open_evidence(folder)


def test_other_json_lines_are_not_taken_for_the_table(tmp_path: Path) -> None:
    clicks = [{"event_type": "click", "timestamp": "2026-12-06T19:38:32Z", "page": "/"}]
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps(r) + "\n" for r in clicks), encoding="utf-8")
    assert not bigquery_analytics.detect(other)
    table = write(tmp_path / "t", invocation()) / "agent_events.jsonl"
    assert bigquery_analytics.detect(table)
    adk = {"id": "e1", "invocationId": "i1", "author": "user", "timestamp": 1764385800000}
    java = tmp_path / "java.jsonl"
    java.write_text(json.dumps(adk) + "\n", encoding="utf-8")
    assert not bigquery_analytics.detect(java)
    assert events.looks_like(SourceSpec(section="events", paths=(java,))) == "adk-java-json"


def test_parquet_read_as_event_json_says_what_it_looks_like(tmp_path: Path) -> None:
    folder = write(tmp_path, invocation(), "parquet")
    toml = folder / "evidence.toml"
    toml.write_text(toml.read_text() + 'format = "adk-java-json"\n', encoding="utf-8")
    with pytest.raises(SourceError, match=r"this file is Parquet \(it looks like the BigQuery"):
        ik.open_evidence(folder).frame("events")


def test_inspect_names_the_format_it_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", str(write(tmp_path, invocation(), "parquet"))]) == 0
    out = capsys.readouterr().out
    assert "events       bigquery-agent-analytics (detected)" in out


# -- hostile rows ----------------------------------------------------------------------------------


def test_unreadable_rows_are_rejects_with_their_place(tmp_path: Path) -> None:
    rows = invocation()
    rows[5]["content"]["args"] = ["A-42"]
    lines = [extract_line(r) for r in rows]
    lines[1] = lines[1].replace('"INVOCATION_STARTING"', "7")
    lines[3] = lines[3].replace(" UTC", "")  # no offset
    lines[4] = lines[4].replace('"content": "{', '"content": "{{')  # not JSON text
    lines[6] = "[1, 2]"
    folder = write(tmp_path, [])
    (folder / "agent_events.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    rejected = ik.open_evidence(folder).rejects
    assert rejected[["location", "reason"]].values.tolist() == [
        ["agent_events.jsonl:7", "expected a JSON object, got list"],
        ["agent_events.jsonl:2", "event_type is not text: 7"],
        ["agent_events.jsonl:4", "timestamp without a UTC offset (set timezone in the manifest)"],
        [
            "agent_events.jsonl:5",
            "content is not JSON text: malformed JSON (Expecting property name enclosed in "
            "double quotes at column 2)",
        ],
        ["agent_events.jsonl:6", "TOOL_STARTING content.args is not an object"],
    ]


def test_a_parquet_row_is_rejected_at_its_row(tmp_path: Path) -> None:
    rows = invocation()
    rows[2]["session_id"] = None
    rejected = ik.open_evidence(write(tmp_path, rows, "parquet")).rejects
    assert rejected[["location", "reason"]].values.tolist() == [
        ["agent_events.parquet:row 3", "session_id is missing"]
    ]


PROPERTY = settings(
    max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
ROWS = invocation() + limit_hit()
COLUMNS = [c for c in bigquery_analytics.COLUMNS if c != "timestamp"]
FIELDS = (
    *("content.tool", "content.args", "content.result", "content.response", "content.to_agent"),
    *("content.end_of_agent", "content.error_code", "content.text_summary"),
    *("attributes.state_delta", "attributes.adk", "attributes.session_metadata"),
    *("attributes.usage_metadata", "attributes.finish_reason", "latency_ms.total_ms"),
)
"""Fields inside the JSON columns that the frames read."""


@pytest.mark.slow
@PROPERTY
@given(
    st.lists(
        st.tuples(
            st.integers(0, len(ROWS) - 1),
            st.sampled_from(["timestamp", *COLUMNS, *FIELDS]),
            values,
        ),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from(["extract", "nested", "parquet"]),
)
def test_mutated_rows_are_read_or_rejected_with_their_place(
    mutations: list[tuple[int, str, Any]], variant: str
) -> None:
    rows = json.loads(json.dumps(ROWS, default=str))  # a deep copy, times as text
    for row_ in rows:
        row_["timestamp"] = datetime.fromisoformat(row_["timestamp"])
    for at, column, value in mutations:
        outer, _, inner = column.partition(".")
        if inner and isinstance(rows[at].get(outer), dict):
            rows[at][outer][inner] = value
        elif not inner:
            rows[at][column] = value
    with tempfile.TemporaryDirectory() as tmp:
        try:
            folder = write(Path(tmp), rows, variant, diagnostics="bigquery-agent-analytics")
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            return  # a value no Parquet column of the plugin's schema holds: not an export
        try:
            evidence = ik.open_evidence(folder)
            got = {name: evidence.frame(name) for name in (*FRAMES, "diagnostics")}
        except IncidentkitError:
            return
        rejects = evidence.rejects
        where = r"agent_events\.(jsonl:\d+|parquet:row \d+)"
        assert rejects["location"].str.fullmatch(where).all()
        assert rejects["reason"].str.len().gt(0).all()
        assert len(got["events"]) <= len(rows)


def test_a_parquet_time_past_2262_is_a_reject_not_an_overflow(tmp_path: Path) -> None:
    """A Parquet TIMESTAMP holds microseconds up to year 294247; pandas' nanoseconds end in
    2262. Such a row is a reject naming the range (Hypothesis found the OutOfBoundsDatetime)."""
    rows = json.loads(json.dumps(ROWS, default=str))
    for row_ in rows:
        row_["timestamp"] = datetime.fromisoformat(row_["timestamp"])
    whole = ik.open_evidence(write(tmp_path / "whole", rows, "parquet")).frame("events")
    rows[0]["timestamp"] = 9223372036854776.0  # seconds: Arrow stores it as microseconds
    evidence = ik.open_evidence(write(tmp_path / "far", rows, "parquet"))
    events = evidence.frame("events")
    assert set(whole["event_id"]) - set(events["event_id"]) == {rows[0]["event_id"]}
    rejects = evidence.rejects
    far = rejects.loc[rejects["reason"].str.startswith("timestamp out of range")]
    assert list(far["location"].unique()) == ["agent_events.parquet:row 1"]
