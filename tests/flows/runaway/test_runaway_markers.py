"""The runaway flow counts what ADK counts, on small frames: one model call per model request
an agent made (never a compaction, a rewind, a checkpoint, nor an error event no model
answered), a marker's own invocation id is no invocation, a limit is hit only on the
refusal's evidence, the summariser's tokens are the compaction cost (apart), and calls pair
with their answers without call ids (the BigQuery Agent Analytics rows)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from incidentkit.flows.common import Frames
from incidentkit.flows.runaway import counts
from incidentkit.flows.runaway.compaction import compaction_cost
from incidentkit.flows.runaway.findings import runaway_findings
from incidentkit.flows.runaway.signatures import repeated_calls, silent_loops
from incidentkit.flows.runaway.triage import (
    histogram_counted,
    tokens_per_invocation,
    triage_runaway,
)
from incidentkit.frames import build

T0 = pd.Timestamp("2026-12-01T10:00:00Z")
AS_OF = T0 + pd.Timedelta(hours=1)
LIMIT_MESSAGE = "Max number of llm calls limit of `4` exceeded"


def log(*rows: dict[str, Any], invocation: str = "e-1", session: str = "s") -> pd.DataFrame:
    """Events of one invocation, one second apart, an agent's unless ``author`` says."""
    return build(
        "events",
        [
            {
                "event_id": f"{invocation}-{i}",
                "app_name": "app",
                "session_id": session,
                "invocation_id": invocation,
                "seq": i,
                "ts": T0 + pd.Timedelta(seconds=i),
                "author": "agent",
                "kind": "turn",
                **row,
            }
            for i, row in enumerate(rows)
        ],
    )


def model(text: str = "ok", **more: Any) -> dict[str, Any]:
    """A model call's event with usage metadata (10 + 5 tokens)."""
    return {"text": text, "prompt_tokens": 10, "output_tokens": 5, "total_tokens": 15, **more}


CHECKPOINT = {"kind": "checkpoint"}
TIMEOUT = {"kind": "error", "error_code": "TimeoutError", "error_message": "timed out"}
REFUSED = {
    "kind": "error",
    "error_code": "LlmCallsLimitExceededError",
    "error_message": LIMIT_MESSAGE,
    "final_response": True,
}


def test_markers_and_error_events_no_model_answered_are_no_model_calls() -> None:
    events = log(
        {"author": "user", "text": "hi"},
        model(),  # 1: a call
        {"text": None},  # the tool's answer, stored under the agent's name
        TIMEOUT,  # the tool raised: no model call
        model(),  # 2: the retried call
        CHECKPOINT,
        {"author": "root", **CHECKPOINT},  # a workflow agent's checkpoint
        {"kind": "error", "error_code": "SAFETY", "total_tokens": 7},  # 3: a blocked answer
        model("done", final_response=True),  # 4
    )
    responses = build("responses", [{"event_id": "e-1-2", "call_id": "c1", "name": "tool"}])
    made = counts.model_events(events, responses)
    assert events.loc[made, "event_id"].tolist() == ["e-1-1", "e-1-4", "e-1-7", "e-1-8"]
    assert counts.from_events(events, responses).values.tolist() == [["e-1", 4, True]]
    refused = log(*[model() for _ in range(4)], REFUSED)
    assert counts.from_events(refused, build("responses", [])).values.tolist() == [["e-1", 4, True]]


def test_a_frame_without_kinds_holds_turns_only() -> None:
    events = log(model(), model("done", final_response=True)).drop(columns="kind")
    assert counts.model_events(events).tolist() == [True, True]


def test_a_compaction_or_rewind_is_no_invocation_and_its_tokens_are_apart() -> None:
    compaction = {
        "author": "user",
        "kind": "compaction",
        "prompt_tokens": 400,
        "output_tokens": 30,
        "total_tokens": 430,
    }
    events = pd.concat(
        [
            log({"author": "user"}, model(), model("a", final_response=True), invocation="e-1"),
            log({"author": "user"}, model("b", final_response=True), invocation="e-2"),
            log(compaction, invocation="uuid-compaction"),
            log({"author": "user", "kind": "rewind"}, invocation="uuid-rewind"),
        ],
        ignore_index=True,
    )
    events["seq"] = range(len(events))
    covered = events["invocation_id"].isin(["e-1", "e-2"])
    events.loc[covered & events["invocation_id"].eq("e-1"), "compacted_by"] = "uuid-compaction-0"
    spans = build(  # a span naming the compaction's id (ADK names the trigger's; be safe)
        "spans", [{"kind": "call_llm", "invocation_id": "uuid-compaction", "end": T0}]
    )
    frames = Frames(events=events, spans=spans)
    report = triage_runaway(frames, as_of=AS_OF, price_per_1k_tokens=1.0)
    assert sorted(report.counted["invocation_id"]) == ["e-1", "e-2"]
    assert report.counted.set_index("invocation_id")["model_calls"].to_dict() == {
        "e-1": 2,
        "e-2": 1,
    }
    assert report.total_tokens == 45  # three agent calls, not the summary's 430
    assert set(tokens_per_invocation(frames)["invocation_id"]) == {"e-1", "e-2"}
    [row] = report.compactions.to_dict("records")
    assert (row["session_id"], row["compactions"], row["events_covered"]) == ("s", 1, 3)
    assert (row["prompt_tokens"], row["output_tokens"], row["total_tokens"]) == (400, 30, 430)
    assert row["first"] == row["last"] == T0 and row["cost"] == pytest.approx(0.43)
    found = runaway_findings(report)
    assert found.summary["compaction_tokens"] == 430 and found.summary["tokens"] == 45
    [item] = [i for i in found.items if i.id == "runaway/compaction-cost"]
    assert item.severity.value == "INFO" and "430 tokens" in item.title
    assert set(item.rows[0]) == {
        *("session_id", "compactions", "prompt_tokens", "output_tokens", "total_tokens"),
        *("events_covered", "first", "last", "cost"),
    }
    assert "cost" not in runaway_findings(triage_runaway(frames, as_of=AS_OF)).items[-1].rows[0]


def test_compaction_cost_is_per_session_and_empty_without_compactions() -> None:
    first = log({"kind": "compaction", "author": "user", "total_tokens": 100}, session="a")
    second = log(
        {"kind": "compaction", "author": "user", "total_tokens": 300},
        {"kind": "compaction", "author": "user"},  # no usage stored
        session="b",
        invocation="e-2",
    )
    cost = compaction_cost(pd.concat([first, second], ignore_index=True))
    assert cost[["session_id", "compactions", "total_tokens"]].values.tolist() == [
        ["b", 2, 300],
        ["a", 1, 100],
    ]
    assert cost["cost"].isna().all()
    assert compaction_cost(log(model())).empty


def test_a_resumed_invocation_s_lost_spans_are_no_final_count() -> None:
    """The worker that made the first call died with its spans; the resumed run's invocation
    span began after that call was stored: the spans count part of the invocation."""
    events = log(model(), model(), model("done", final_response=True))
    resumed = T0 + pd.Timedelta(seconds=0.5)  # after the first call, before the others
    spans = build(
        "spans",
        [
            {"kind": "invocation", "invocation_id": "e-1", "start": resumed, "end": AS_OF},
            *[{"kind": "call_llm", "invocation_id": "e-1", "start": resumed, "end": AS_OF}] * 2,
        ],
    )
    assert counts.from_spans(spans).values.tolist() == [["e-1", 2, True]]
    assert counts.from_spans(spans, events).values.tolist() == [["e-1", 2, False]]
    report = triage_runaway(Frames(events=events, spans=spans), as_of=AS_OF + pd.Timedelta(1))
    assert report.disagreements.empty and report.counted["model_calls"].tolist() == [3]
    whole = spans.assign(start=T0 - pd.Timedelta(seconds=1))  # one run: the spans miss a call
    report = triage_runaway(Frames(events=events, spans=whole), as_of=AS_OF + pd.Timedelta(1))
    assert report.disagreements["detail"].tolist() == ["events counts 3, spans 2"]


def test_exactly_the_limit_is_no_hit_and_the_refusal_is() -> None:
    allowed = log(*[model() for _ in range(3)], model("done", final_response=True))
    stopped = log(*[model() for _ in range(4)], REFUSED, invocation="e-2", session="t")
    report = triage_runaway(
        Frames(events=pd.concat([allowed, stopped], ignore_index=True)),
        as_of=AS_OF,
        max_llm_calls=4,
    )
    assert report.hits[["invocation_id", "model_calls", "limit"]].values.tolist() == [["e-2", 4, 4]]
    assert report.hits["evidence"].tolist() == ["error event LlmCallsLimitExceededError"]
    assert report.counted.set_index("invocation_id")["hit_limit"].to_dict() == {
        "e-1": False,
        "e-2": True,
    }
    java = triage_runaway(  # ADK Java stores no limit error: the refusal left no end
        Frames(events=log(*[model() for _ in range(4)])), as_of=AS_OF, max_llm_calls=4
    )
    assert java.hits["evidence"].tolist() == [
        "model calls 4 reach the configured limit 4 and the invocation stored no end"
    ]


def test_an_engine_baseline_hits_the_limit_on_the_same_rule() -> None:
    histogram = pd.DataFrame(
        {
            "model_calls": [4, 4, 5, 4],
            "ended": [True, False, True, True],
            "hit_limit": [False, False, False, True],
            "marked": [False, False, False, False],
            "invocations": [2, 1, 1, 1],
        }
    )
    wide = histogram_counted(histogram, configured=4)
    assert wide["hit_limit"].tolist() == [False, False, True, True, True]


def test_checkpoints_between_sub_agents_leave_the_loop_agent_s_cycle_as_it_is() -> None:
    """A resumable app's loop agent writes a checkpoint after each sub-agent: its own
    events are no turn, so the cycle is the two sub-agents', not four turns with the loop."""
    rows: list[dict[str, Any]] = [{"author": "user"}]
    for _ in range(3):
        for agent in ("writer", "critic"):
            rows += [model(author=agent), {"author": agent, **CHECKPOINT}]
            rows.append({"author": "review_loop", **CHECKPOINT})
    [loop] = silent_loops(log(*rows), build("state_writes", [])).to_dict("records")
    assert (loop["agents"], loop["iterations"]) == (("writer", "critic"), 3)


def test_calls_without_ids_pair_with_their_answers_by_tool_and_order() -> None:
    """The BigQuery Agent Analytics rows keep no call ids: the k-th answer of a tool in an
    invocation answers its k-th call, never an answer of another tool."""
    busy = {"status": "error", "message": "Service busy, try again later"}
    base = {"session_id": "s", "invocation_id": "e-1", "author": "agent", "call_id": None}
    calls = build(
        "calls",
        [
            {**base, "event_id": "c0", "seq": 0, "name": "lookup", "args_key": "{}"},
            *[
                {**base, "event_id": f"c{i}", "seq": i, "name": "check", "args_key": '{"s":1}'}
                for i in (2, 4, 6)
            ],
        ],
    )
    responses = build(
        "responses",
        [
            {**base, "event_id": "r1", "seq": 1, "name": "lookup", "response": {"ok": True}},
            *[
                {**base, "event_id": f"r{i}", "seq": i, "name": "check", "response": busy}
                for i in (3, 5, 7)
            ],
        ],
    )
    [row] = repeated_calls(calls, responses).to_dict("records")
    assert (row["tool"], row["repeats"], row["error_string"]) == (
        "check",
        3,
        "Service busy, try again later",
    )
    other = responses.loc[responses["name"].eq("lookup")]  # no answer of check: no hint
    assert repeated_calls(calls, other)["error_string"].isna().all()


def test_the_worst_invocation_s_steps_name_its_markers() -> None:
    events = log(
        {"author": "user"},
        *[model(author="agent") for _ in range(4)],
        {"author": "agent", **CHECKPOINT},
        REFUSED,
    )
    report = triage_runaway(Frames(events=events), as_of=AS_OF, max_llm_calls=4)
    steps = report.sequence
    assert steps["step"].tolist() == ["model"] * 4 + ["checkpoint", "error"]
    assert steps["model_call"].tolist()[:4] == [1, 2, 3, 4]
    assert steps["model_call"].iloc[4:].isna().all()
