"""Properties of the runaway flow's loop signatures: on any event log, each vectorised signature
says what a plain per-invocation walk over the same rows says.

The oracles here are written the obvious way (a loop over each invocation's rows in order);
the flow's versions work on whole columns. Hypothesis draws small alphabets of agents and tools
so that alternations, repeats and cycles (and their near misses) are common.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from incidentkit.flows.runaway.signatures import (
    MIN_ITERATIONS,
    MIN_REPEATS,
    MIN_TRANSFERS,
    PERIODS,
    ping_pongs,
    repeated_calls,
    silent_loops,
)
from incidentkit.frames import build

AGENTS = st.sampled_from(["a", "b", "c"])
T0 = pd.Timestamp("2026-11-29T16:00:00Z")
PROPERTY = settings(max_examples=150, deadline=None)


def _events(invocations: list[list[dict[str, Any]]]) -> pd.DataFrame:
    rows = [
        {
            "event_id": f"e{k}-{i}",
            "session_id": f"s{k}",
            "invocation_id": f"inv{k}",
            "seq": i,
            "ts": T0 + pd.Timedelta(seconds=i),
            **row,
        }
        for k, rows in enumerate(invocations)
        for i, row in enumerate(rows)
    ]
    return build("events", rows)


def _longest_alternation(targets: list[str]) -> tuple[int, tuple[str, ...]]:
    """The longest run of transfers alternating between two agents, and those agents."""
    best, agents, streak = 0, (), 0
    for i in range(2, len(targets)):
        alternates = targets[i] == targets[i - 2] and targets[i] != targets[i - 1]
        streak = streak + 1 if alternates else 0
        if streak and streak + 2 > best:
            best, agents = streak + 2, tuple(sorted({targets[i], targets[i - 1]}))
    return best, agents


@PROPERTY
@given(st.lists(st.lists(AGENTS, max_size=12), min_size=1, max_size=4))
def test_a_ping_pong_is_the_longest_alternation_of_four_or_more(hops: list[list[str]]) -> None:
    log = _events([[{"author": "x", "transfer_to_agent": t} for t in seq] for seq in hops])
    found = {row["invocation_id"]: row for row in ping_pongs(log).to_dict("records")}
    expected = {}
    for k, targets in enumerate(hops):
        length, agents = _longest_alternation(targets)
        if length >= MIN_TRANSFERS:
            expected[f"inv{k}"] = (length, agents)
    assert {inv: (row["transfers"], row["agents"]) for inv, row in found.items()} == expected
    for inv, row in found.items():  # the proving events are transfers of that invocation
        mine = log.loc[log["invocation_id"].eq(inv)]
        assert set(row["event_ids"]) <= set(mine["event_id"])
        assert len(row["event_ids"]) == row["transfers"]


CALLS = st.tuples(
    st.sampled_from(["check_stock", "lookup", "transfer_to_agent"]),
    st.fixed_dictionaries({"sku": st.sampled_from(["k1", "k2"])}),
)


@pytest.mark.slow
@PROPERTY
@given(st.lists(st.lists(CALLS, max_size=10), min_size=1, max_size=3))
def test_a_repeat_is_any_tool_and_arguments_seen_three_times(
    invocations: list[list[tuple[str, dict[str, str]]]],
) -> None:
    rows = [
        {
            "event_id": f"e{k}-{i}",
            "session_id": f"s{k}",
            "invocation_id": f"inv{k}",
            "seq": i,
            "call_id": f"c{k}-{i}",
            "name": name,
            "args": args,
            "args_key": json.dumps(args, sort_keys=True),
        }
        for k, calls in enumerate(invocations)
        for i, (name, args) in enumerate(calls)
    ]
    calls = build("calls", rows)
    answer = {"status": "error", "message": "busy, try again later"}
    answers = build("responses", [{"call_id": row["call_id"], "response": answer} for row in rows])
    found = repeated_calls(calls, answers)
    seen = Counter(
        (row["invocation_id"], row["name"], row["args_key"])
        for row in rows
        if row["name"] != "transfer_to_agent"
    )
    expected = {key: n for key, n in seen.items() if n >= MIN_REPEATS}
    got = {
        (row["invocation_id"], row["tool"], json.dumps(row["args"], sort_keys=True)): row["repeats"]
        for row in found.to_dict("records")
    }
    assert got == expected
    assert found["error_string"].eq(answer["message"]).all()  # the answer's words, not its JSON


def _turns(authors: list[str]) -> list[str]:
    return [a for i, a in enumerate(authors) if i == 0 or a != authors[i - 1]]


def _cycle(authors: list[str]) -> tuple[int, tuple[str, ...]] | None:
    """The first period (fewest agents) whose longest repeating stretch runs three rounds or
    more: its rounds begun and its agents in order of appearance."""
    turns = _turns(authors)
    for period in PERIODS:
        best: tuple[int, int] | None = None  # (repeats, index of the stretch's last turn)
        streak = 0
        for i in range(period, len(turns)):
            streak = streak + 1 if turns[i] == turns[i - period] else 0
            if streak and (best is None or streak > best[0]):
                best = (streak, i)
        if best is None:
            continue
        repeats, last = best
        rounds = math.ceil((repeats + period) / period)
        if rounds >= MIN_ITERATIONS:
            stretch = turns[last - repeats - period + 1 : last + 1]
            return rounds, tuple(dict.fromkeys(stretch))
    return None


@pytest.mark.slow
@PROPERTY
@given(st.lists(st.lists(AGENTS, max_size=14), min_size=1, max_size=4))
def test_a_silent_loop_is_the_shortest_cycle_of_three_rounds(authors: list[list[str]]) -> None:
    log = _events([[{"author": a} for a in seq] for seq in authors])
    loops = silent_loops(log, build("state_writes", []))
    found = {row["invocation_id"]: row for row in loops.to_dict("records")}
    expected = {}
    for k, seq in enumerate(authors):
        cycle = _cycle(seq)
        if cycle is not None and len(cycle[1]) >= 2:
            expected[f"inv{k}"] = cycle
    got = {inv: (row["iterations"], row["agents"]) for inv, row in found.items()}
    assert got == expected
