"""The events loader on files: ADK Java JSON lines and session documents, ADK Python JSON."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from incidentkit.errors import SchemaError, SourceError
from incidentkit.frames import build, conform
from incidentkit.manifest import Filters, SourceSpec, Window
from incidentkit.sources import events
from incidentkit.sources.events import adk_events
from incidentkit.sources.loaded import Loaded

DATA = Path(__file__).resolve().parents[2] / "data" / "events"
FRAMES = ("events", "calls", "responses", "state_writes")
MS = 1_750_000_000_000  # the fixtures' epoch-millisecond origin


def load(*names: str, fmt: str | None = None, filters: Filters | None = None) -> Loaded:
    spec = SourceSpec("events", paths=tuple(DATA / n for n in names), format=fmt)
    return events.load(spec, filters or Filters())


def clean(*names: str, **kwargs: Any) -> dict[str, pd.DataFrame]:
    loaded = load(*names, **kwargs)
    assert loaded.rejects.empty, loaded.rejects.to_dict("records")
    return dict(loaded.frames)


def at_ms(offset_ms: int) -> pd.Timestamp:
    return pd.Timestamp(MS + offset_ms, unit="ms", tz="UTC").as_unit("ns")


def expected_events(rows: list[dict[str, Any]]) -> pd.DataFrame:
    return build("events", [{"source_format": "adk-java-json", **row} for row in rows])


def java_event(
    eid: str,
    user: str,
    session: str,
    inv: str,
    seq: int,
    off: int,
    author: str,
    final: bool,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "event_id": eid,
        "app_name": "billing",
        "user_id": user,
        "session_id": session,
        "invocation_id": inv,
        "seq": seq,
        "ts": at_ms(off),
        "author": author,
        "final_response": final,
        "kind": "turn",
        **extra,
    }


def test_java_lines_give_one_event_row_per_line_in_session_order() -> None:
    got = clean("java_events.jsonl")["events"]
    s1 = ("u1", "s1", "e-inv1")
    s2 = ("u2", "s2", "e-inv2")
    want = expected_events(
        [
            java_event("s1-user", *s1, 0, 0, "user", True, text="Send invoice INV-77"),
            java_event(
                "s1-call",
                *s1,
                1,
                1000,
                "billing_agent",
                False,
                prompt_tokens=10,
                output_tokens=5,
                total_tokens=15,
            ),
            java_event("s1-response", *s1, 2, 2000, "billing_agent", False),
            java_event(
                "s1-draft",
                *s1,
                3,
                3000,
                "draft_agent",
                True,
                branch="root.draft_agent",
                text="Draft ready.",
            ),
            java_event(
                "s1-transfer", *s1, 4, 4000, "root", False, transfer_to_agent="notify_agent"
            ),
            java_event(
                "s1-approval",
                *s1,
                5,
                5000,
                "notify_agent",
                True,
                long_running_tool_ids=("adk-lr1",),
            ),
            java_event("s2-user", *s2, 0, 100_000, "user", True, text="Status?"),
            java_event(
                "s2-partial", *s2, 1, 101_000, "status_agent", False, partial=True, text="Checking"
            ),
            java_event(
                "s2-error",
                *s2,
                2,
                102_000,
                "status_agent",
                True,
                error_code="MAX_TOKENS",
                error_message="boom",
                turn_complete=True,
                escalate=True,
                kind="error",  # an error code and no content
            ),
        ]
    )
    pd.testing.assert_frame_equal(got, want)


def test_java_lines_give_calls_responses_and_state_writes() -> None:
    got = clean("java_events.jsonl")
    calls = conform(
        "calls",
        pd.DataFrame(
            {
                "event_id": ["s1-call", "s1-transfer", "s1-approval"],
                "session_id": "s1",
                "invocation_id": "e-inv1",
                "seq": [1, 4, 5],
                "ts": [at_ms(1000), at_ms(4000), at_ms(5000)],
                "author": ["billing_agent", "root", "notify_agent"],
                "call_id": ["adk-c1", "adk-t1", "adk-lr1"],
                "name": ["send_invoice", "transfer_to_agent", "request_approval"],
                "args": [
                    {"invoice": "INV-77", "amount": 120},
                    {"agent_name": "notify_agent"},
                    {"invoice": "INV-77"},
                ],
                "args_key": [
                    '{"amount":120,"invoice":"INV-77"}',
                    '{"agent_name":"notify_agent"}',
                    '{"invoice":"INV-77"}',
                ],
                "long_running": [False, False, True],
            }
        ),
    )
    pd.testing.assert_frame_equal(got["calls"], calls)
    responses = conform(
        "responses",
        pd.DataFrame(
            {
                "event_id": ["s1-response"],
                "session_id": "s1",
                "invocation_id": "e-inv1",
                "seq": [2],
                "ts": [at_ms(2000)],
                "author": ["billing_agent"],
                "call_id": ["adk-c1"],
                "name": ["send_invoice"],
                "response": [{"status": "sent"}],
            }
        ),
    )
    pd.testing.assert_frame_equal(got["responses"], responses)
    # Keys are sorted within an event (PostgreSQL jsonb does not keep their order).
    writes = conform(
        "state_writes",
        pd.DataFrame(
            {
                "event_id": ["s1-response"] * 5 + ["s2-partial", "s2-error"],
                "session_id": ["s1"] * 5 + ["s2", "s2"],
                "invocation_id": ["e-inv1"] * 5 + ["e-inv2", "e-inv2"],
                "seq": [2] * 5 + [1, 2],
                "ts": [at_ms(2000)] * 5 + [at_ms(101_000), at_ms(102_000)],
                "author": ["billing_agent"] * 5 + ["status_agent", "status_agent"],
                "key": [
                    "app:flag",
                    "invoice_status",
                    "stale_key",
                    "temp:draft",
                    "user:tier",
                    "draft_note",
                    "user:last_error",
                ],
                "scope": ["app", "session", "session", "temp", "user", "session", "user"],
                "value": [True, "sent", None, "x", "gold", "half", None],
                "removed": [False, False, True, False, False, False, True],
                "partial": [False] * 5 + [True, False],
            }
        ),
    )
    pd.testing.assert_frame_equal(got["state_writes"], writes)
    assert [len(got[name]) for name in FRAMES] == [9, 3, 1, 7]


def test_a_java_session_document_loads_like_its_lines() -> None:
    document = clean("java_session.json")
    lines = clean("java_events.jsonl", filters=Filters(session_ids=("s1",)))
    for name in FRAMES:
        pd.testing.assert_frame_equal(document[name], lines[name])
    assert len(document["events"]) == 6


def test_a_list_of_sessions_rejects_an_event_at_its_place_in_the_document() -> None:
    loaded = load("java_sessions.json")
    got = loaded.frames["events"]
    assert list(got["event_id"]) == ["s7-user", "s8-reply"]
    assert list(got["session_id"]) == ["s7", "s8"]
    assert list(got["seq"]) == [0, 0]
    assert loaded.rejects[["location", "reason"]].to_dict("records") == [
        {"location": "java_sessions.json:[1].events[0]", "reason": "author is missing"}
    ]


REJECTS = {
    1: r"^malformed JSON",
    2: r"^expected a JSON object, got list$",
    3: r"^id is missing$",
    4: r"^invocationId is missing$",
    5: r"^author is missing$",
    6: r"^timestamp is not a number: '2025-06-15T15:06:40Z'$",
    7: r"^content is not an object$",
    8: r"^content.parts is not a list$",
    9: r"^content.parts\[0\] is not an object$",
    11: r"^partial is not true/false: 'yes'$",
    12: r"^actions.stateDelta is not an object$",
    13: r"^content.parts\[1\].functionCall is not an object$",
    14: r"^longRunningToolIds is not a list of ids$",
    15: r"^timestamp is missing$",
}


def test_every_unreadable_line_is_rejected_with_its_line_and_reason() -> None:
    loaded = load("rejects.jsonl")
    rejects = loaded.rejects
    assert list(rejects["location"]) == [f"rejects.jsonl:{n}" for n in REJECTS]
    for (_, pattern), reason in zip(REJECTS.items(), rejects["reason"], strict=True):
        assert pd.Series([reason]).str.match(pattern).all(), (pattern, reason)
    assert set(rejects["source"]) == {"events"}
    lines = (DATA / "rejects.jsonl").read_text(encoding="utf-8").splitlines()
    assert rejects["raw"].iloc[0] == lines[0]
    # Line 10 names no session: read, with empty keys and a warning, not rejected.
    assert list(loaded.frames["events"]["event_id"]) == ["no-session", "ok"]
    assert list(loaded.frames["events"]["session_id"]) == ["", "r1"]
    assert loaded.warnings[["location", "reason"]].to_dict("records") == [
        {
            "location": "rejects.jsonl:10",
            "reason": "1 events name no session (first at rejects.jsonl:10): give app_name, "
            "user_id and session_id in [events] for a one-session dump, or add the ledger",
        }
    ]
    assert list(loaded.frames["state_writes"]["key"]) == ["k"]


def test_a_truncated_last_line_is_rejected_and_the_rest_loads() -> None:
    loaded = load("truncated.jsonl")
    assert list(loaded.frames["events"]["event_id"]) == ["whole"]
    assert loaded.rejects[["location", "reason"]].to_dict("records") == [
        {
            "location": "truncated.jsonl:2",
            "reason": "truncated line: the file ends in the middle of a record",
        }
    ]


def test_a_repeated_event_id_keeps_the_first_and_names_it() -> None:
    loaded = load("duplicates.jsonl")
    got = loaded.frames["events"]
    assert list(got["event_id"]) == ["dup", "other"]
    assert got["text"].iloc[0] == "first"
    assert pd.isna(got["text"].iloc[1])
    assert loaded.frames["state_writes"].empty  # the rejected copy's delta is not loaded
    assert loaded.rejects[["location", "reason"]].to_dict("records") == [
        {
            "location": "duplicates.jsonl:3",
            "reason": "duplicate event id dup, first seen at duplicates.jsonl:1",
        }
    ]


def test_seconds_in_a_java_source_are_rejected_as_mixed_units() -> None:
    loaded = load("mixed_units.jsonl")
    assert list(loaded.frames["events"]["event_id"]) == ["millis"]
    assert list(loaded.rejects["location"]) == ["mixed_units.jsonl:2"]
    assert loaded.rejects["reason"].iloc[0] == (
        "timestamp 1750000001.5 looks like epoch seconds, but this ADK Java source stores "
        "epoch milliseconds (mixed units)"
    )


def test_milliseconds_in_a_python_source_are_rejected_as_mixed_units() -> None:
    loaded = load("java_session.json", fmt="adk-session-json")
    assert loaded.frames["events"].empty
    assert len(loaded.rejects) == 6
    assert (
        loaded.rejects["reason"]
        .str.contains(
            "looks like epoch milliseconds, but this ADK Python source stores epoch seconds"
        )
        .all()
    )


def test_an_empty_file_is_a_source_error_naming_it() -> None:
    with pytest.raises(SourceError, match=r"events: the file is empty: '.*empty\.jsonl'"):
        load("empty.jsonl")


def test_a_missing_file_is_a_source_error() -> None:
    with pytest.raises(SourceError, match=r"events: file not found: '.*nowhere\.jsonl'"):
        load("nowhere.jsonl")


@pytest.mark.parametrize("fmt", ["sql", "adk-python-db"])
def test_a_database_format_on_files_is_a_source_error(fmt: str) -> None:
    with pytest.raises(SourceError, match=f"format {fmt} reads a database"):
        load("java_events.jsonl", fmt=fmt)


def test_a_json_list_of_sessions_with_a_stray_item_is_a_schema_error(tmp_path: Path) -> None:
    path = tmp_path / "events.json"
    session = {"id": "s", "appName": "a", "userId": "u", "events": []}
    path.write_text(json.dumps([session, 3]), encoding="utf-8")
    spec = SourceSpec("events", paths=(path,))
    with pytest.raises(SchemaError, match=r"not an ADK session document.*events\.json:\[1\]"):
        events.load(spec, Filters())


def test_seq_orders_by_time_then_source_order() -> None:
    got = clean("ties.jsonl")["events"]
    assert list(got["event_id"]) == ["first", "c", "a", "b"]
    assert list(got["seq"]) == [0, 1, 2, 3]


FINAL = {
    "user-text": True,
    "call": False,
    "response": False,
    "sub-agent-text": True,
    "long-running": True,
    "empty-long-running": False,
    "skip-summarization": True,
    "partial-text": False,
    "trailing-code-result": False,
    "code-result-then-text": True,
    "error-with-response": False,  # ADK Java has no error-code clause
}


def test_final_response_follows_adks_rule() -> None:
    got = clean("final_response.jsonl")["events"]
    assert dict(zip(got["event_id"], got["final_response"], strict=True)) == FINAL
    assert got.set_index("event_id").loc["empty-long-running", "long_running_tool_ids"] == ()


def test_python_error_events_without_calls_are_final() -> None:
    got = clean("python_error_response.json")["events"]
    assert list(got["final_response"]) == [True]
    assert list(got["source_format"]) == ["adk-session-json"]


def test_saved_python_session_is_detected_and_read_in_seconds() -> None:
    got = clean("python_session.json")
    ev = got["events"]
    assert list(ev["event_id"]) == ["p-user", "p-call", "p-response", "p-final", "p-limit"]
    assert set(ev["source_format"]) == {"adk-session-json"}
    assert list(ev["ts"]) == list(
        pd.to_datetime(
            [1796013660.5, 1796013661.0794885, 1796013661.086337, 1796013662.25, 1796013670.0],
            unit="s",
            utc=True,
        )
        .as_unit("ns")
        .round("us")  # float seconds carry binary noise below the microsecond
    )
    assert list(ev["final_response"]) == [True, False, False, True, True]
    limit = ev.set_index("event_id").loc["p-limit"]
    assert limit["error_message"] == "Max number of llm calls limit of `1` exceeded"
    assert list(got["calls"]["long_running"]) == [False]
    assert list(got["state_writes"]["key"]) == ["ticket", "order_status", "user:tier"]
    assert [len(got[name]) for name in FRAMES] == [5, 1, 1, 3]


def test_a_vertex_transfer_agent_and_null_delta_are_read() -> None:
    got = clean("vertex_transfer.jsonl")
    assert list(got["events"]["transfer_to_agent"]) == ["billing_agent"]
    writes = got["state_writes"]
    assert list(writes["removed"]) == [True]
    assert writes["value"].iloc[0] is None


@pytest.mark.parametrize(
    ("filters", "ids"),
    [
        (
            Filters(window=Window(at_ms(1000), at_ms(3000))),
            ["s1-call", "s1-response"],
        ),
        (Filters(session_ids=("s2",)), ["s2-user", "s2-partial", "s2-error"]),
        (Filters(invocation_ids=("e-inv2",)), ["s2-user", "s2-partial", "s2-error"]),
        (Filters(app_name="other"), []),
    ],
)
def test_filters_apply_to_files_after_parsing(filters: Filters, ids: list[str]) -> None:
    got = clean("java_events.jsonl", filters=filters)
    assert list(got["events"]["event_id"]) == ids
    assert set(got["state_writes"]["event_id"]) <= set(ids)
    assert set(got["calls"]["event_id"]) <= set(ids)


def test_seq_is_numbered_after_filtering() -> None:
    got = clean("java_events.jsonl", filters=Filters(window=Window(at_ms(1000), at_ms(3000))))
    assert list(got["events"]["seq"]) == [0, 1]
    assert list(got["calls"]["seq"]) == [0]


def test_several_files_load_as_one_source() -> None:
    got = clean("java_events.jsonl", "final_response.jsonl")
    assert len(got["events"]) == 9 + len(FINAL)
    assert list(got["events"]["session_id"].unique()) == ["f1", "s1", "s2"]


def test_chunked_decoding_gives_the_same_frames(monkeypatch: pytest.MonkeyPatch) -> None:
    whole = load("java_events.jsonl", "duplicates.jsonl", "final_response.jsonl")
    monkeypatch.setattr(adk_events, "CHUNK", 2)
    chunked = load("java_events.jsonl", "duplicates.jsonl", "final_response.jsonl")
    for name in FRAMES:
        pd.testing.assert_frame_equal(chunked.frames[name], whole.frames[name])
    pd.testing.assert_frame_equal(chunked.rejects, whole.rejects)
    assert list(whole.rejects["location"]) == ["duplicates.jsonl:3"]


def test_a_file_read_a_chunk_at_a_time_keeps_every_reject(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    names = ("rejects.jsonl", "duplicates.jsonl", "truncated.jsonl")
    whole = load(*names)
    monkeypatch.setattr(adk_events, "CHUNK", 1)
    chunked = load(*names)
    for name in FRAMES:
        pd.testing.assert_frame_equal(chunked.frames[name], whole.frames[name])
    # Rejects come file by file and chunk by chunk now: the same rows, in that order.
    assert sorted(map(tuple, chunked.rejects.to_numpy().tolist())) == sorted(
        map(tuple, whole.rejects.to_numpy().tolist())
    )
    assert list(chunked.rejects["location"]) == [
        *(f"rejects.jsonl:{n}" for n in range(1, 16) if n != 10),
        "truncated.jsonl:2",
        "duplicates.jsonl:3",
    ]


BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_events.py"


def _bench(*args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCH), *args, "--repeat", "1"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return done.stdout


def _bench_cases(out: str, cases: tuple[str, ...]) -> None:
    """Every case read all 400 events, and the kit's line gives its rate and memory."""
    for case in cases:
        assert re.search(rf"^{case} .*\s400\s+[\d.]+\s+[\d,]+\s+[\d.]+\s+\d+ MB$", out, re.M), out
    assert re.search(r"^kit: [\d,]+ events/s \(target 200,000\), [\d,]+ MB peak", out, re.M), out


@pytest.mark.slow
def test_the_benchmark_runs_on_a_small_input() -> None:
    _bench_cases(_bench("400"), ("decode", "general", "kit"))


@pytest.mark.slow
def test_the_benchmark_writes_and_loads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    out = _bench("--file", str(path), "400")
    assert len(path.read_text(encoding="utf-8").splitlines()) == 400
    _bench_cases(out, ("decode", "kit"))


@pytest.mark.slow
def test_the_benchmark_loads_a_postgres_table(pg_admin_url: str) -> None:
    out = _bench(
        "--postgres", "400", env={**os.environ, "INCIDENTKIT_TEST_DATABASE_URL": pg_admin_url}
    )
    _bench_cases(out, ("copy", "kit"))
