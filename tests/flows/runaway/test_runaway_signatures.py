"""Runaway steps on small frames and the simulated runaway pack: model-call counts per source
and their disagreements, and every loop signature with its near misses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

import incidentkit as ik
from incidentkit.flows.runaway import counts
from incidentkit.flows.runaway.signatures import ping_pongs, repeated_calls, silent_loops
from incidentkit.frames import build

RUNAWAY = Path(__file__).resolve().parents[3] / "fixtures" / "runaway"
T0 = pd.Timestamp("2026-11-29T16:00:00Z")


def events(*rows: dict[str, Any]) -> pd.DataFrame:
    return build(
        "events",
        [
            {
                "event_id": f"ev{i}",
                "session_id": "s",
                "invocation_id": "e-1",
                "seq": i,
                "ts": T0 + pd.Timedelta(seconds=i),
                "author": "agent",
                **row,
            }
            for i, row in enumerate(rows)
        ],
    )


def test_a_ping_pong_needs_four_alternating_transfers() -> None:
    pong = events(*({"transfer_to_agent": a} for a in ["b", "a", "b", "a", "b"]))
    [row] = ping_pongs(pong).to_dict("records")
    assert (row["agents"], row["transfers"]) == (("a", "b"), 5)
    assert row["event_ids"] == ("ev0", "ev1", "ev2", "ev3", "ev4")
    back = events({"transfer_to_agent": "b"}, {"transfer_to_agent": "a"})  # a hand-off back
    assert ping_pongs(back).empty
    onward = events(*({"transfer_to_agent": a} for a in ["b", "c", "d", "e"]))  # a chain
    assert ping_pongs(onward).empty
    broken = events(*({"transfer_to_agent": a} for a in ["b", "a", "b", "c", "b", "c"]))
    assert ping_pongs(broken)["agents"].tolist() == [("b", "c")]  # the longest run wins


def calls(*rows: tuple[str, dict[str, Any]]) -> pd.DataFrame:
    return build(
        "calls",
        [
            {
                "event_id": f"ev{i}",
                "session_id": "s",
                "invocation_id": "e-1",
                "seq": i,
                "call_id": f"c{i}",
                "name": name,
                "args": args,
                "args_key": json.dumps(args, sort_keys=True),
            }
            for i, (name, args) in enumerate(rows)
        ],
    )


def answers(text: Any, n: int) -> pd.DataFrame:
    return build("responses", [{"call_id": f"c{i}", "response": text} for i in range(n)])


def test_a_repeat_is_one_tool_with_identical_arguments_three_times() -> None:
    same = calls(*[("check_stock", {"sku": "k"})] * 3)
    [row] = repeated_calls(
        same, answers({"status": "error", "message": "try again later"}, 3)
    ).to_dict("records")
    assert (row["tool"], row["args"], row["repeats"]) == ("check_stock", {"sku": "k"}, 3)
    assert "try again later" in row["error_string"]
    fine = repeated_calls(same, answers({"stock": 4}, 3))
    assert fine["error_string"].isna().all()  # repeated, but not on an error
    differ = calls(*[("check_stock", {"sku": s}) for s in "abc"])
    assert repeated_calls(differ, answers("busy", 3)).empty
    polling = calls(*[("job_status", {"job": "j1", "since": t}) for t in range(6)])
    assert repeated_calls(polling, answers("running", 6)).empty
    transfers = calls(*[("transfer_to_agent", {"agent_name": "b"})] * 4)
    assert repeated_calls(transfers, answers({}, 4)).empty  # a ping-pong, not a repeat


def test_a_silent_loop_cycles_without_escalate_or_its_exit_key() -> None:
    cycle = [{"author": a} for a in ["writer", "critic"] * 3]  # ADK stores no loop branch
    loop = events({"author": "user"}, *cycle)
    writes = build("state_writes", [{"event_id": "ev1", "invocation_id": "e-1", "key": "draft"}])
    [row] = silent_loops(loop, writes, exit_keys=["review:approved"]).to_dict("records")
    assert pd.isna(row["loop_agent"])  # no span nesting, no branch: the loop agent is unknown
    assert (row["agents"], row["iterations"]) == (("writer", "critic"), 3)
    assert (row["exit_key"], row["keys_written"]) == ("review:approved", ("draft",))
    assert row["event_ids"] == tuple(f"ev{i}" for i in range(1, 7))
    unknown = silent_loops(loop, writes)
    assert unknown["exit_key"].isna().all() and len(unknown) == 1  # the key is unknown
    exits = build("state_writes", [{"invocation_id": "e-1", "key": "review:approved"}])
    assert silent_loops(loop, exits, exit_keys=["review:approved"]).empty
    escalated = events(*cycle[:-1], {**cycle[-1], "escalate": True})
    assert silent_loops(escalated, writes, exit_keys=["review:approved"]).empty
    assert silent_loops(events(*cycle[:4]), writes).empty  # two iterations are not a loop
    handed = events(
        *({"author": a, "transfer_to_agent": b} for a, b in [("a", "b"), ("b", "a")] * 3)
    )
    assert silent_loops(handed, writes).empty  # agents taking turns by transfer: a ping-pong
    tools = events(*({"author": "agent"} for _ in range(8)))  # one agent's calls: one turn
    assert silent_loops(tools, writes).empty
    three = events(*({"author": a} for a in ["plan", "write", "check"] * 3))
    assert silent_loops(three, writes)["agents"].tolist() == [("plan", "write", "check")]


def test_the_loop_agent_is_named_by_span_nesting_or_a_parallel_branch() -> None:
    cycle = [{"author": a} for a in ["writer", "critic"] * 3]
    spans = build(
        "spans",
        [
            {"span_id": "1", "kind": "invoke_agent", "agent_name": "review_loop"},
            {"span_id": "2", "parent_span_id": "1", "kind": "invoke_agent", "agent_name": "critic"},
        ],
    ).assign(invocation_id="e-1")
    writes = build("state_writes", [])
    nested = silent_loops(events(*cycle), writes, spans=spans)
    assert nested["loop_agent"].tolist() == ["review_loop"]
    java = events(*({**row, "branch": f"fan.review_loop.{row['author']}"} for row in cycle))
    assert silent_loops(java, writes)["loop_agent"].tolist() == ["review_loop"]
    python = events(*({**row, "branch": "fan.review_loop"} for row in cycle))
    assert silent_loops(python, writes)["loop_agent"].tolist() == ["review_loop"]


def test_the_runaway_pack_shows_each_signature_of_its_truth() -> None:
    truth = json.loads((RUNAWAY / "truth.json").read_text())["expected"]
    incident = ik.open_evidence(RUNAWAY)
    [pong] = ping_pongs(incident.events).to_dict("records")
    assert pong["invocation_id"] == truth["ping_pong"]["invocation_id"]
    assert list(pong["agents"]) == sorted(truth["ping_pong"]["agents"])
    assert pong["transfers"] == len(truth["ping_pong"]["transfers"])
    [repeat] = repeated_calls(incident.calls, incident.responses).to_dict("records")
    expected = truth["repeated_call"]
    assert (repeat["invocation_id"], repeat["tool"], repeat["args"]) == (
        expected["invocation_id"],
        expected["tool"],
        expected["args"],
    )
    assert repeat["repeats"] == expected["repeats"]
    assert list(repeat["call_ids"]) == expected["call_ids"]
    assert expected["error_text"] in repeat["error_string"]
    loop = truth["loop"]
    [found] = silent_loops(
        incident.events, incident.state_writes, spans=incident.spans, exit_keys=[loop["exit_key"]]
    ).to_dict("records")
    assert (found["invocation_id"], found["loop_agent"], found["exit_key"]) == (
        loop["invocation_id"],
        loop["agent"],
        loop["exit_key"],
    )
    assert list(found["keys_written"]) == sorted(loop["keys_written"])


def test_model_calls_per_source_and_where_they_disagree() -> None:
    diagnostics = build(
        "diagnostics",
        [
            {"kind": "run.end", "invocation_id": "e-1", "llm_calls": 4, "ts": T0},
            {"kind": "run.many_llm_calls", "invocation_id": "e-2", "llm_calls": 20, "ts": T0},
            {"kind": "run.many_llm_calls", "invocation_id": "e-2", "llm_calls": 40, "ts": T0},
        ],
    )
    plugin = counts.from_diagnostics(diagnostics)
    assert plugin.values.tolist() == [["e-1", 4, True], ["e-2", 40, False]]
    log = events(
        {"author": "user"},
        {"author": "agent"},
        {"author": "agent"},  # a function response, stored under the agent's name
        {"author": "agent", "final_response": True},
    )
    stored = counts.from_events(log, build("responses", [{"event_id": "ev2", "call_id": "c"}]))
    assert stored.values.tolist() == [["e-1", 2, True]]
    spans = build(
        "spans",
        [{"kind": "call_llm", "invocation_id": "e-1"}] * 3
        + [{"kind": "invocation", "invocation_id": "e-1"}],
    )
    traced = counts.from_spans(spans)
    assert traced.values.tolist() == [["e-1", 3, True]]
    differ = counts.disagreements({"diagnostics": plugin, "events": stored, "spans": traced})
    assert differ["detail"].tolist() == [
        "diagnostics counts 4, events 2",
        "diagnostics counts 4, spans 3",
    ]
