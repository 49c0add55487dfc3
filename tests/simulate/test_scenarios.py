"""Each committed pack shows what its truth.json claims, read straight from the evidence."""

from __future__ import annotations

import tomllib
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from simpacks import (
    FIXTURES,
    Thread,
    attrs,
    calls,
    delta,
    dump,
    events,
    inv_id,
    journal,
    ledger,
    log,
    responses,
    spans,
    truth,
    ts_ms,
)


def _ms(text: str) -> int:
    return int(pd.Timestamp(text).value // 1_000_000)


def _final(event: dict[str, Any]) -> bool:
    """ADK Java's Event.finalResponse()."""
    if event.get("longRunningToolIds") or event.get("long_running_tool_ids"):
        return True
    return not calls(event) and not responses(event) and not event.get("partial")


def _classify(row: dict[str, str], sessions: dict[str, list[dict[str, Any]]], terminal: str) -> str:
    """Seed 000's classifier, one run at a time (the test's own reading of the seed)."""
    mine_session = sorted(sessions.get(row["session_id"], []), key=ts_ms)
    if not mine_session:
        return "NOT_STARTED"
    inv = row["invocation_id"] or next(
        (
            inv_id(e)
            for e in mine_session
            if e["author"] == "user" and ts_ms(e) >= _ms(row["started_at"])
        ),
        None,
    )
    if inv is None:
        return "NOT_STARTED"
    mine = [e for e in mine_session if inv_id(e) == inv]
    last = mine[-1]
    if last.get("longRunningToolIds") or last.get("long_running_tool_ids"):
        return "PAUSED"
    if _final(last) and last["author"] == terminal:
        return "ACTUALLY_DONE"
    answered = {r["id"] for e in mine for r in responses(e)}
    unanswered = [c for e in mine for c in calls(e) if c["id"] not in answered]
    return "TOOL_UNANSWERED" if unanswered else "MODEL_INFLIGHT"


@pytest.mark.parametrize("name", ["crash_recovery", "crash_recovery-adk-python"])
def test_crash_recovery_orphans_classify_as_the_truth_says(name: str) -> None:
    pack = FIXTURES / name
    expected = truth(pack)["expected"]
    as_of = _ms(expected["as_of"])
    rows = {row["run_id"]: row for row in ledger(pack)}
    expired = {
        r["run_id"]
        for r in rows.values()
        if r["status"] == "RUNNING" and _ms(r["lease_until"]) < as_of
    }
    assert {o["run_id"] for o in expected["orphans"]} == expired
    sessions: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in events(pack):
        sessions[event["sessionId"]].append(event)
    entries = expected["orphans"] + [e for e in expected["non_terminal"] if "name" in e]
    for entry in entries:
        got = _classify(rows[entry["run_id"]], sessions, expected["terminal_agent"])
        assert got == entry["orphan_class"], entry["name"]
    keys = {row["key"]: row["status"] for row in journal(pack)}
    template = expected["key_templates"]["sendInvoice"]
    verdicts = {"INTENT": "INTENT_ONLY", "DONE": "DONE"}
    for entry in entries:
        for call in entry["unanswered_calls"]:
            if call["tool"] == "sendInvoice":
                key = template.format(**call["args"])
                assert verdicts.get(keys.get(key, ""), "NO_ENTRY") == call["journal_verdict"]
    loops = [r["run_id"] for r in rows.values() if int(r["attempts"]) >= expected["attempts_cap"]]
    assert loops == expected["crash_loops"]


def test_crash_recovery_duplicate_invoice_is_visible_only_by_call_id() -> None:
    pack = FIXTURES / "crash_recovery"
    dup = truth(pack)["expected"]["duplicate_effects"][0]
    entries = {row["key"]: row for row in journal(pack)}
    assert dup["business_key"] not in entries
    for key, call_id in zip(dup["journal_keys"], dup["call_ids"], strict=True):
        assert entries[key]["function_call_id"] == call_id
    sent = [c for e in events(pack) for c in calls(e) if c["id"] in dup["call_ids"]]
    assert [c["args"] for c in sent] == [{"invoiceId": dup["invoice"]}] * 2
    assert truth(pack)["expected"]["billing"]["invoices_sent"][dup["invoice"]] == 2


def test_latency_cliff_figures_come_from_the_log_and_the_dumps() -> None:
    pack = FIXTURES / "latency_cliff"
    expected = truth(pack)["expected"]
    starts = {r.field("inv"): r for r in log(pack) if r.message.startswith("run.start")}
    ends = {r.field("inv"): r for r in log(pack) if r.message.startswith("run.end")}
    support = {inv: r for inv, r in starts.items() if r.field("app") == "support"}
    cliff = expected["cliff"]
    ms = {
        b: [
            float(ends[i].field("ms") or 0)
            for i, r in support.items()
            if i in ends and (r.ts < cliff) == b
        ]
        for b in (True, False)
    }
    assert np.percentile(ms[True], 95) == pytest.approx(expected["p95_before_ms"])
    assert np.percentile(ms[False], 95) == pytest.approx(expected["p95_after_ms"])
    assert 3_000 < expected["p95_before_ms"] < 5_500 and 55_000 < expected["p95_after_ms"] < 63_000
    opened = sorted(i for i, r in support.items() if r.ts >= cliff and i not in ends)
    assert opened == expected["open_invocations"]
    assert 0.03 < len(opened) / sum(r.ts >= cliff for r in support.values()) < 0.05
    last = {}
    for event in sorted(events(pack), key=ts_ms):
        last[inv_id(event)] = event
    for inv in opened:
        assert [c["name"] for c in calls(last[inv])] == ["order_lookup"]
    threads = expected["threads"]
    stuck = []
    for entry in threads["dumps"]:
        header, listed = dump(pack / entry["file"])
        local = pd.Timestamp(entry["taken_at"]).tz_convert(threads["jvm_zone"])
        assert header == local.strftime("%Y-%m-%d %H:%M:%S")
        stuck.append(
            {
                t.name
                for t in listed
                if threads["stuck_tool_frame"] in t.frames
                and t.frames[0] == threads["stuck_top_frame"]
            }
        )
    assert stuck[0] == stuck[1] == set(threads["stuck_threads"])
    assert len(stuck[0]) == threads["stuck_count"] == 64


def _dumps(pack: Path) -> list[dict[str, Thread]]:
    return [
        {t.name: t for t in dump(pack / entry["file"])[1]}
        for entry in truth(pack)["expected"]["threads"]["dumps"]
    ]


def test_latency_cliff_listener_blocks_by_design_and_is_not_the_stall() -> None:
    pack = FIXTURES / "latency_cliff"
    threads = truth(pack)["expected"]["threads"]
    taken = _dumps(pack)
    idle = threads["idle_by_design"]
    assert idle and all(entry["reason"] for entry in idle)
    for entry in idle:
        seen = [d[entry["thread"]] for d in taken]
        assert all((t.state, t.frames) == (seen[0].state, seen[0].frames) for t in seen)
        assert seen[0].state == threads["stuck_state"]
        assert seen[0].frames[0] == threads["stuck_top_frame"]  # the same socket read on top
        assert entry["app_frame"] in seen[0].frames
        assert not any("OrderLookup" in f for f in seen[0].frames)
        assert entry["thread"] not in threads["stuck_threads"]
    # Same state and frames in every dump, in a socket read: the stall and the listeners only.
    same = {
        name
        for name, t in taken[0].items()
        if t.frames[:1] == [threads["stuck_top_frame"]]
        and all(name in d and (d[name].state, d[name].frames) == (t.state, t.frames) for d in taken)
    }
    assert same == set(threads["stuck_threads"]) | {e["thread"] for e in idle}
    client = threads["client_class"]
    assert threads["stuck_app_frame"] == threads["stuck_tool_frame"]
    assert threads["stuck_app_frame"].startswith(client + ".")
    for name in threads["stuck_threads"]:
        app = [f for f in taken[0][name].frames if "java.base@" not in f]
        assert app[0] == threads["stuck_app_frame"]


def test_latency_cliff_kb_threads_read_in_one_dump_only_while_a_call_is_open() -> None:
    pack = FIXTURES / "latency_cliff"
    expected = truth(pack)["expected"]
    threads = expected["threads"]
    taken = _dumps(pack)
    top = threads["stuck_top_frame"]
    assert threads["not_stuck"]
    for name in threads["not_stuck"]:
        seen = [d[name] for d in taken]
        reading = [t.frames[0] == top for t in seen]
        assert any(reading) and not all(reading), name
        assert len({(t.state, tuple(t.frames)) for t in seen}) > 1
        assert all(not any("OrderLookup" in f for f in t.frames) for t in seen)
        assert any("KbSearchClient" in f for t in seen for f in t.frames)
    pool = [n for n in taken[0] if n.startswith("kb-exec-")]
    in_read = {n for d in taken for n in pool if d[n].frames[0] == top}
    assert in_read == set(threads["not_stuck"])
    opened: dict[str, int] = {}
    answered: dict[str, int] = {}
    for event in events(pack):
        for call in calls(event):
            if call["name"] == threads["not_stuck_tool"]:
                opened[call["id"]] = ts_ms(event)
        for response in responses(event):
            if response["name"] == threads["not_stuck_tool"]:
                answered[response["id"]] = ts_ms(event)
    assert opened.keys() == answered.keys()  # every kb_search call was answered
    for entry, d in zip(threads["dumps"], taken, strict=True):
        at = _ms(entry["taken_at"])
        busy = sum(1 for n in pool if d[n].state == "RUNNABLE")
        assert busy == sum(1 for c, t in opened.items() if t < at < answered[c])


def test_latency_cliff_jvm_logs_in_its_own_zone() -> None:
    pack = FIXTURES / "latency_cliff"
    zone = truth(pack)["expected"]["threads"]["jvm_zone"]
    assert zone == "Europe/Berlin"
    manifest = tomllib.loads((pack / "evidence.toml").read_text())
    assert manifest["threads"]["timezone"] == zone
    assert "naive_timestamps" not in manifest["threads"]
    records = log(pack)
    for record in records:
        local = pd.Timestamp(record.ts).tz_convert(zone)
        assert record.written == local.isoformat(timespec="milliseconds")
    assert {r.written[-6:] for r in records} == {"+01:00"}
    healthy = FIXTURES / "healthy"
    assert all(r.written == r.ts for r in log(healthy))


def test_runaway_limit_loop_and_retries_are_in_the_evidence() -> None:
    pack = FIXTURES / "runaway"
    expected = truth(pack)["expected"]
    hit = expected["limit_hits"][0]
    records = log(pack)
    warnings = [
        int(r.field("calls") or 0)
        for r in records
        if r.message.startswith("run.many_llm_calls") and r.field("inv") == hit["invocation_id"]
    ]
    assert warnings == list(range(20, 501, 20))
    end = next(
        r
        for r in records
        if r.message.startswith("run.end") and r.field("inv") == hit["invocation_id"]
    )
    assert (end.field("outcome"), end.field("llmCalls")) == ("error", "500")
    error = next(
        r
        for r in records
        if r.message.startswith("run.error") and r.field("inv") == hit["invocation_id"]
    )
    assert hit["error"] in error.extra[0]
    runaway = {
        hit["invocation_id"],
        expected["ping_pong"]["invocation_id"],
        expected["repeated_call"]["invocation_id"],
    }
    healthy = [
        float(r.field("llmCalls") or 0)
        for r in records
        if r.message.startswith("run.end") and r.field("inv") not in runaway
    ]
    assert len(healthy) == expected["llm_calls"]["invocations"]
    p99 = np.percentile(healthy, 99)
    assert p99 == pytest.approx(expected["llm_calls"]["p99"])
    recommended = expected["recommended_max_llm_calls"]
    assert recommended % 5 == 0 and recommended - 5 < 3 * p99 <= recommended  # 27 -> 30
    assert {r.field("app") for r in records if r.message.startswith("run.start")} == {
        expected["app_name"]
    }
    roots = [s for s in spans(pack) if s["name"] == "invocation" and s["status"].get("code") == 2]
    assert len(roots) == 1 + len(expected["errors"]["run_errors"])
    # The loop's trace is tail-sampled in pieces: only the last, with the limit error, is kept.
    loop_trace = {
        s["traceId"]
        for s in spans(pack)
        if attrs(s).get("gcp.vertex.agent.invocation_id") == hit["invocation_id"]
    }
    (trace,) = loop_trace
    kept = [s for s in spans(pack) if s["traceId"] == trace]
    failed = {s["name"] for s in kept if s["status"].get("code") == 2}
    assert {"invocation", "invoke_agent review_loop"} <= failed
    messages = {
        a["value"]["stringValue"]
        for s in kept
        for e in s.get("events", [])
        for a in e["attributes"]
        if a["key"] == "exception.message"
    }
    assert messages == {hit["error"]}
    assert 0 < sum(s["name"] == "call_llm" for s in kept) < hit["llm_calls"]
    assert max(int(s["endTimeUnixNano"]) - int(s["startTimeUnixNano"]) for s in kept) > 120e9
    by_inv: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in events(pack):
        by_inv[inv_id(event)].append(event)
    hops = [
        e["actions"].get("transferToAgent") for e in by_inv[expected["ping_pong"]["invocation_id"]]
    ]
    assert [h for h in hops if h] == expected["ping_pong"]["transfers"]
    repeated = [
        c["args"] for e in by_inv[expected["repeated_call"]["invocation_id"]] for c in calls(e)
    ]
    assert repeated == [expected["repeated_call"]["args"]] * expected["repeated_call"]["repeats"]
    loop_keys = {k for e in by_inv[expected["loop"]["invocation_id"]] for k in delta(e)}
    assert expected["loop"]["exit_key"] not in loop_keys


@pytest.mark.parametrize("name", ["vanished_state", "vanished_state-adk-python"])
def test_vanished_state_writes_are_the_stored_deltas(name: str) -> None:
    pack = FIXTURES / name
    expected = truth(pack)["expected"]
    mine = sorted((e for e in events(pack) if e["sessionId"] == expected["session_id"]), key=ts_ms)
    for key in expected["keys"]:
        found = [
            (inv_id(e), e["author"], bool(e.get("partial"))) for e in mine if key["key"] in delta(e)
        ]
        assert found == [(w["invocation_id"], w["author"], w["partial"]) for w in key["writes"]]
        if key["diagnosis"] in ("never_written", "temp_prefix") and name.endswith("python"):
            assert not found
    raced = next(k for k in expected["keys"] if k["diagnosis"] == "raced")
    first, second = (
        [ts_ms(e) for e in mine if inv_id(e) == inv] for inv in raced["raced_invocations"]
    )
    assert min(second) < max(first) and min(first) < max(second)


def test_healthy_has_nothing_to_find() -> None:
    pack = FIXTURES / "healthy"
    records = log(pack)
    assert {r.level for r in records} == {"INFO"}
    starts = {r.field("inv") for r in records if r.message.startswith("run.start")}
    ends = {
        r.field("inv")
        for r in records
        if r.message.startswith("run.end") and r.field("outcome") == "ok"
    }
    assert starts == ends
    assert {row["status"] for row in ledger(pack)} <= {"DONE", "PAUSED"}
    assert not any(s["status"] for s in spans(pack))
    assert truth(pack)["expected"]["orphans"] == []
