"""Loop signatures in the event log, per invocation, each with the rows that prove it.

- ``transfer_ping_pong``: ``transferToAgent`` alternates between two agents (two agents whose
  descriptions claim the same task hand the conversation back and forth);
- ``repeated_identical_call``: one tool called with identical arguments again and again (a tool
  answers "try again later" and the model obliges);
- ``loop_agent_exit_never_written``: a loop agent's sub-agents cycle, nobody escalates, and the
  state key its exit depends on is written by no event.

The calls that carry a ping-pong's transfers (``transfer_to_agent``) are not also counted as a
repeated identical call.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from incidentkit.flows._frames import as_columns, empty_view, in_session_order, per_group
from incidentkit.flows._markers import turns as turns_of
from incidentkit.frames import INT, OBJ, STR, SpanKind

TRANSFER_TOOL = "transfer_to_agent"
MIN_TRANSFERS = 4
"""Transfers in an alternating run that make a ping-pong: A→B→A→B (two are a hand-off back)."""
MIN_REPEATS = 3
MIN_ITERATIONS = 3
_HINT = re.compile(
    r"error|try again|retry|unavailable|timed? ?out|rate.?limit|failed|too many|exceeded", re.I
)


class Signature(enum.StrEnum):
    """The kinds of loop the event log shows."""

    TRANSFER_PING_PONG = "transfer_ping_pong"
    REPEATED_IDENTICAL_CALL = "repeated_identical_call"
    LOOP_AGENT_EXIT_NEVER_WRITTEN = "loop_agent_exit_never_written"


PING_PONG_COLUMNS: Mapping[str, str] = {
    "invocation_id": STR,
    "agents": OBJ,
    "transfers": INT,
    "event_ids": OBJ,
}


def ping_pongs(events: pd.DataFrame, *, min_transfers: int = MIN_TRANSFERS) -> pd.DataFrame:
    """Invocations whose transfers alternate between two agents ``min_transfers`` times or more
    in a row: the two agents (sorted), the length of the longest alternating run, its events."""
    moves = events.loc[events["transfer_to_agent"].notna() & events["invocation_id"].notna()]
    moves = in_session_order(moves)
    to = moves["transfer_to_agent"]
    by = moves.groupby("invocation_id", sort=False)["transfer_to_agent"]
    back, before = by.shift(1), by.shift(2)
    alternates = to.eq(before) & to.ne(back)
    # a run of alternation: a new run starts wherever the previous transfer did not alternate
    start = ~alternates | ~alternates.groupby(moves["invocation_id"], sort=False).shift(
        1, fill_value=False
    )
    run = start.cumsum()
    streak = alternates.groupby(run).transform("sum") + 2  # the first two transfers open it
    keyed = moves.assign(run=run.where(alternates), _streak=streak.where(alternates))
    long = keyed.loc[keyed["_streak"].ge(min_transfers)]
    if long.empty:
        return empty_view(PING_PONG_COLUMNS)
    best = long.sort_values(["_streak"], ascending=False, kind="stable").drop_duplicates(
        "invocation_id"
    )
    chosen = keyed["run"].isin(best["run"])
    # the run's events: its alternating transfers and the two that opened it
    opened = chosen | chosen.groupby(moves["invocation_id"], sort=False).shift(-1, fill_value=False)
    opened |= chosen.groupby(moves["invocation_id"], sort=False).shift(-2, fill_value=False)
    run_moves = moves.loc[opened]
    ids = per_group(run_moves["event_id"], run_moves["invocation_id"])
    agents = per_group(run_moves["transfer_to_agent"], run_moves["invocation_id"]).map(
        lambda names: tuple(sorted(set(names)))
    )
    out = pd.DataFrame(
        {
            "invocation_id": best["invocation_id"].to_numpy(),
            "transfers": best["_streak"].astype(INT).to_numpy(),
        }
    )
    out["agents"] = out["invocation_id"].map(agents)
    out["event_ids"] = out["invocation_id"].map(ids)
    return as_columns(out.sort_values("invocation_id"), PING_PONG_COLUMNS)


REPEAT_COLUMNS: Mapping[str, str] = {
    "invocation_id": STR,
    "agent": STR,
    "tool": STR,
    "args": OBJ,
    "repeats": INT,
    "error_string": STR,
    "call_ids": OBJ,
}


_MESSAGE_KEYS = ("error", "message", "error_message", "errorMessage", "detail", "result")
"""Where a tool's answer keeps its words (ADK Python wraps a bare return value as ``result``)."""


def _text(response: object) -> str:
    """A tool's answer as text: its message when it has one, else its JSON."""
    if isinstance(response, str):
        return response
    if isinstance(response, Mapping):
        for key in _MESSAGE_KEYS:
            value = response.get(key)
            if isinstance(value, str) and value.strip():
                return value
    try:
        return json.dumps(response, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(response)


def _pairs(frame: pd.DataFrame) -> pd.Series:
    """The key that pairs a call with its answer: its call id, else (the BigQuery Agent
    Analytics table keeps none) its invocation, tool and rank among that tool's calls (or
    answers) without an id there, in session order."""
    bare = in_session_order(frame.loc[frame["call_id"].isna()])
    rank = bare.groupby(["invocation_id", "name"], sort=False, dropna=False).cumcount()
    by_order = (
        "order\x1f"
        + bare["invocation_id"].astype(str)
        + "\x1f"
        + bare["name"].astype(str)
        + "\x1f"
        + rank.astype(str)
    )
    by_id = "id\x1f" + frame["call_id"].astype(str)
    keys: pd.Series = by_id.where(frame["call_id"].notna(), by_order.reindex(frame.index))
    return keys.astype(object)


def repeated_calls(
    calls: pd.DataFrame, responses: pd.DataFrame, *, min_repeats: int = MIN_REPEATS
) -> pd.DataFrame:
    """The same tool with identical arguments (``args_key``) ``min_repeats`` times or more in
    one invocation; ``error_string`` is the tool's most common answer to them when it reads as
    an error or a retry hint, else missing; ``agent`` is the agent that made the first of them.
    Transfers are not counted."""
    own = calls.loc[calls["invocation_id"].notna() & calls["name"].ne(TRANSFER_TOOL)]
    keys = ["invocation_id", "name", "args_key"]
    sizes = own.groupby(keys, sort=False)["call_id"].transform("size")
    repeated = own.loc[sizes.ge(min_repeats)].sort_values(
        ["invocation_id", "session_id", "seq"], kind="stable"
    )
    if repeated.empty:
        return empty_view(REPEAT_COLUMNS)
    answered = responses.assign(_pair=_pairs(responses)).drop_duplicates("_pair")
    answers = repeated.assign(_pair=_pairs(own).loc[repeated.index])[["_pair", *keys]].merge(
        answered[["_pair", "response"]], on="_pair", how="left"
    )
    replied = answers.dropna(subset=["response"])
    said = pd.Series([_text(r) for r in replied["response"]], index=replied.index, dtype=object)
    texts = replied.assign(_text=said.astype(str))  # the repeats' answers only
    hints = texts.loc[texts["_text"].str.contains(_HINT)]
    common = hints.groupby(keys, sort=False)["_text"].agg(lambda t: t.mode().iloc[0])
    grouped = repeated.groupby(keys, sort=False)
    out = grouped.agg(
        agent=("author", "first"),
        args=("args", "first"),
        repeats=("call_id", "size"),
        call_ids=("call_id", tuple),
    ).reset_index()
    out["error_string"] = pd.Series(
        [common.get(tuple(k)) for k in out[keys].itertuples(index=False)], dtype=object
    )
    out = out.rename(columns={"name": "tool"})
    return as_columns(out.sort_values(["invocation_id", "tool"]), REPEAT_COLUMNS)


LOOP_COLUMNS: Mapping[str, str] = {
    "invocation_id": STR,
    "loop_agent": STR,
    "agents": OBJ,
    "iterations": INT,
    "exit_key": STR,
    "keys_written": OBJ,
    "event_ids": OBJ,
}
PERIODS = (2, 3, 4)
"""Sub-agents per loop tried, fewest first: a loop agent usually runs two or three."""


def _turns(events: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The agents' turns per invocation in order: consecutive events of one author are one
    turn (a model call, its tool's answer, the next call). The user's events and ADK's markers
    are left out (a resumable workflow agent's checkpoints between its sub-agents' turns are
    no turn of its own).

    Returns the turns (invocation_id, author, branch: the first one given, transfers: how many
    of its events transfer) and each event's turn position (invocation_id, event_id, turn)."""
    own = turns_of(events)
    own = own.loc[own["invocation_id"].notna() & own["author"].ne("user")]
    own = in_session_order(own)
    new_turn = own["author"].ne(own.groupby("invocation_id", sort=False)["author"].shift(1))
    turn = pd.Series(new_turn.cumsum().to_numpy() - 1, index=own.index)
    firsts = own.loc[new_turn]
    turns = pd.DataFrame(
        {
            "invocation_id": firsts["invocation_id"].to_numpy(dtype=object),
            "author": firsts["author"].to_numpy(dtype=object),
            "branch": own["branch"].groupby(turn).first().to_numpy(dtype=object),
            "transfers": own["transfer_to_agent"].notna().groupby(turn).sum().to_numpy(),
        }
    )
    positions = pd.DataFrame(
        {"invocation_id": own["invocation_id"], "event_id": own["event_id"], "turn": turn}
    )
    return turns, positions


def _cycles(
    turns: pd.DataFrame, period: int, min_iterations: int
) -> tuple[pd.DataFrame, np.ndarray]:
    """The longest stretch per invocation in which each turn's author is the one ``period``
    turns before (``period`` agents taking turns) of ``min_iterations`` rounds or more: the
    invocation and its rounds begun, and which turns the stretch holds (its first round too)."""
    by = turns.groupby("invocation_id", sort=False)["author"]
    repeats = turns["author"].eq(by.shift(period))
    run = (~repeats).cumsum()  # a stretch: the turn that breaks the last one, then repeats
    length = repeats.groupby(run).transform("sum")
    rounds = -(-(length + period) // period)  # rounds begun: the last may have been cut short
    keyed = turns.assign(run=run, rounds=rounds.where(repeats, 0), length=length.where(repeats, 0))
    best = keyed.loc[keyed["rounds"].ge(min_iterations)].sort_values(
        "length", ascending=False, kind="stable"
    )  # the longest stretch (the first of equals): rounds begun can tie where repeats do not
    best = best.drop_duplicates("invocation_id")
    chosen = run.isin(best["run"]).to_numpy()
    starts = np.flatnonzero(chosen & run.ne(run.shift(1)).to_numpy())
    member = chosen.copy()
    for back in range(1, period):  # the first round: the turns the first repeat answers
        member[starts - back] = True
    found = pd.DataFrame(
        {
            "invocation_id": best["invocation_id"].to_numpy(dtype=object),
            "iterations": best["rounds"].to_numpy(dtype="int64"),
        }
    )
    return found, member


def _loop_agents(spans: pd.DataFrame) -> pd.Series:
    """Per (invocation, sub-agent), the agent whose ``invoke_agent`` span is the parent of the
    sub-agent's: the workflow agent that runs it."""
    agents = spans.loc[spans["kind"].eq(SpanKind.INVOKE_AGENT) & spans["agent_name"].notna()]
    parents = agents[["span_id", "agent_name"]].rename(
        columns={"span_id": "parent_span_id", "agent_name": "parent"}
    )
    nested = agents.merge(parents, on="parent_span_id").drop_duplicates(
        ["invocation_id", "agent_name"]
    )
    index = pd.MultiIndex.from_frame(nested[["invocation_id", "agent_name"]])
    return pd.Series(nested["parent"].to_numpy(dtype=object), index=index, dtype=object)


def _branch_parent(branch: object, agents: tuple[str, ...]) -> str | None:
    """The workflow agent a branch names for ``agents``: ADK Java extends a branch with each
    agent (``par.review_loop.writer``), ADK Python only under a parallel agent
    (``par.review_loop``)."""
    if not isinstance(branch, str) or not branch:
        return None
    parts = branch.split(".")
    if parts[-1] in agents:
        return parts[-2] if len(parts) > 1 else None
    return parts[-1]


def silent_loops(
    events: pd.DataFrame,
    state_writes: pd.DataFrame,
    *,
    spans: pd.DataFrame | None = None,
    exit_keys: Iterable[str] = (),
    min_iterations: int = MIN_ITERATIONS,
) -> pd.DataFrame:
    """Invocations in which two to four agents take turns ``min_iterations`` rounds or more,
    with no transfer among them, no ``escalate``, and no write of an exit key: a loop agent
    whose exit condition nobody satisfies.

    The cycle comes from the authors of the stored events (ADK runs a loop agent's sub-agents
    on the parent's branch, so the events rarely name the loop agent); the loop agent is the
    parent of the sub-agents' ``invoke_agent`` spans, else the workflow agent the branch names
    (under a parallel agent), else unknown. ``exit_key`` is the
    first of ``exit_keys`` none of the invocation's events wrote, missing when no exit key is
    known; an exit key that was written means the loop could end: not this signature.
    """
    turns, positions = _turns(events)
    found: list[pd.DataFrame] = []
    member = np.zeros(len(turns), dtype=bool)
    for period in PERIODS:  # fewest agents first: a-b-a-b is a cycle of two, not of four
        cycles, held = _cycles(turns, period, min_iterations)
        taken = pd.concat(found)["invocation_id"] if found else pd.Series(dtype=object)
        fresh = ~turns["invocation_id"].isin(taken).to_numpy()
        member |= held & fresh
        found.append(cycles.loc[~cycles["invocation_id"].isin(taken)])
    runs = pd.concat(found, ignore_index=True)
    if runs.empty:
        return empty_view(LOOP_COLUMNS)
    cycle = turns.loc[member]
    by = cycle.groupby("invocation_id", sort=False)
    agents = cycle.drop_duplicates(["invocation_id", "author"])
    held_events = positions.loc[positions["turn"].isin(np.flatnonzero(member))]
    cycling = runs.assign(
        agents=runs["invocation_id"].map(per_group(agents["author"], agents["invocation_id"])),
        transfers=runs["invocation_id"].map(by["transfers"].sum()),
        branch=runs["invocation_id"].map(by["branch"].first()),
        event_ids=runs["invocation_id"].map(
            per_group(held_events["event_id"], held_events["invocation_id"])
        ),
    )
    escalated = events.loc[events["escalate"], "invocation_id"]
    cycling = cycling.loc[cycling["transfers"].eq(0) & ~cycling["invocation_id"].isin(escalated)]
    if cycling.empty:
        return empty_view(LOOP_COLUMNS)
    parents = _loop_agents(spans) if spans is not None and len(spans) else pd.Series(dtype=object)
    by_span = [
        next((parents[(inv, a)] for a in agents if (inv, a) in parents.index), None)
        for inv, agents in zip(cycling["invocation_id"], cycling["agents"], strict=True)
    ]
    by_branch = [
        _branch_parent(branch, agents)
        for branch, agents in zip(cycling["branch"], cycling["agents"], strict=True)
    ]
    cycling["loop_agent"] = [
        s if s is not None else b for s, b in zip(by_span, by_branch, strict=True)
    ]
    mine = state_writes.loc[state_writes["invocation_id"].isin(cycling["invocation_id"])]
    written = per_group(mine["key"], mine["invocation_id"]).map(lambda k: tuple(sorted(set(k))))
    keys = list(dict.fromkeys(exit_keys))
    cycling["keys_written"] = [written.get(inv, ()) for inv in cycling["invocation_id"]]
    cycling["exit_key"] = [
        next((k for k in keys if k not in wrote), None) for wrote in cycling["keys_written"]
    ]
    if keys:  # an exit key that was written: the loop could end; not this signature
        cycling = cycling.loc[cycling["exit_key"].notna()]
    return as_columns(cycling.sort_values("invocation_id"), LOOP_COLUMNS)
