"""truth.json agrees with what each committed pack holds, counted without the kit's loaders."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from simpacks import (
    FIXTURES,
    PACKS,
    calls,
    delta,
    dump,
    events,
    journal,
    ledger,
    log,
    parts,
    responses,
    spans,
    truth,
    ts_ms,
)


@pytest.mark.parametrize("name", PACKS)
def test_counts_match_the_files(name: str) -> None:
    pack = FIXTURES / name
    expected = truth(pack)["counts"]
    stored = events(pack)
    threads = sum(len(dump(pack / f)[1]) for f in truth(pack)["files"] if f.startswith("threads/"))
    found = {
        "runs": len(ledger(pack)),
        "events": len(stored),
        "calls": sum(len(calls(e)) for e in stored),
        "responses": sum(len(responses(e)) for e in stored),
        "state_writes": sum(len(delta(e)) for e in stored),
        "journal": len(journal(pack)),
        "spans": len(spans(pack)),
        "diagnostics": len(log(pack)),
        "threads": threads,
    }
    assert found == expected


@pytest.mark.parametrize("name", PACKS)
def test_every_record_lies_in_the_window(name: str) -> None:
    pack = FIXTURES / name
    doc = truth(pack)
    start, end = doc["window"]["start"], doc["window"]["end"]
    stamps = [r.ts for r in log(pack)] + [row["started_at"] for row in ledger(pack)]
    stamps += [row["created_at"] for row in journal(pack)]
    assert all(start <= s < end for s in stamps)
    low, high = (int(pd.Timestamp(t).value // 1_000_000) for t in (start, end))
    assert all(low <= ts_ms(e) < high for e in events(pack))
    assert all(low * 10**6 <= int(s["startTimeUnixNano"]) < high * 10**6 for s in spans(pack))


@pytest.mark.parametrize("name", PACKS)
def test_event_times_increase_within_each_session(name: str) -> None:
    seen: dict[str, set[int]] = {}
    for event in events(FIXTURES / name):
        stamps = seen.setdefault(event["sessionId"], set())
        assert ts_ms(event) not in stamps, "two events of one session share a timestamp"
        stamps.add(ts_ms(event))


@pytest.mark.parametrize("name", PACKS)
def test_ids_have_adk_shapes(name: str) -> None:
    stored = events(FIXTURES / name)
    assert all(str(e.get("invocationId") or e["invocation_id"]).startswith("e-") for e in stored)
    assert all(c["id"].startswith("adk-") for e in stored for c in calls(e))
    for span in spans(FIXTURES / name):
        assert len(span["traceId"]) == 32 and len(span["spanId"]) == 16
        assert int(span["traceId"], 16) and int(span["spanId"], 16)
        assert isinstance(span["startTimeUnixNano"], str)


@pytest.mark.parametrize("name", PACKS)
def test_span_lines_are_collector_requests_one_trace_each(name: str) -> None:
    """Each line: one resource (service.name), one scope gcp.vertex.agent, all spans of a trace."""
    traces: list[str] = []
    sizes = []
    with (FIXTURES / name / "spans.otlp.jsonl").open() as handle:
        for line in handle:
            (resource,) = json.loads(line)["resourceSpans"]
            assert [a["key"] for a in resource["resource"]["attributes"]] == ["service.name"]
            (scope,) = resource["scopeSpans"]
            assert scope["scope"] == {"name": "gcp.vertex.agent"}
            ids = {s["traceId"] for s in scope["spans"]}
            assert len(ids) == 1
            traces += ids
            sizes.append(len(scope["spans"]))
    assert len(traces) == len(set(traces))
    assert max(sizes) > 1


def test_python_packs_store_no_partial_event_and_no_temp_key() -> None:
    for name in ("crash_recovery-adk-python", "vanished_state-adk-python"):
        stored = events(FIXTURES / name)
        assert not any(e.get("partial") for e in stored)
        assert not any(k.startswith("temp:") for e in stored for k in delta(e))
        assert all(isinstance(e["timestamp"], float) for e in stored)
        assert all(abs(ts_ms(e) - _column_ms(e["column_ts"])) == 0 for e in stored)


def _column_ms(text: str) -> int:
    return int(pd.Timestamp(text, tz="UTC").value // 1_000_000)


def test_java_packs_carry_the_removal_sentinel_and_temp_keys() -> None:
    stored = events(FIXTURES / "vanished_state")
    values = [v for e in stored for v in delta(e).values()]
    assert "__ADK_SENTINEL_REMOVED__" in values
    assert any(k.startswith("temp:") for e in stored for k in delta(e))
    assert any(e.get("partial") is True for e in stored)
    assert all(isinstance(e["timestamp"], int) for e in stored)
    assert all(parts(e) or e.get("errorCode") for e in stored)
