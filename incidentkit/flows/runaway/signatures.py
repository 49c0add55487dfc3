"""Loop signatures in the event log, per invocation, each with the rows that prove it (seed 003).

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

import pandas as pd

from incidentkit.flows._frames import as_columns, per_group
from incidentkit.frames import INT, OBJ, STR

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
    moves = moves.sort_values(["invocation_id", "session_id", "seq"], kind="stable")
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
    keyed = moves.assign(_run=run.where(alternates), _streak=streak.where(alternates))
    long = keyed.loc[keyed["_streak"].ge(min_transfers)]
    if long.empty:
        return as_columns(pd.DataFrame(columns=list(PING_PONG_COLUMNS)), PING_PONG_COLUMNS)
    best = long.sort_values(["_streak"], ascending=False, kind="stable").drop_duplicates(
        "invocation_id"
    )
    chosen = keyed["_run"].isin(best["_run"])
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
    "tool": STR,
    "args": OBJ,
    "repeats": INT,
    "error_string": STR,
    "call_ids": OBJ,
}


def _text(response: object) -> str:
    if isinstance(response, str):
        return response
    try:
        return json.dumps(response, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(response)


def repeated_calls(
    calls: pd.DataFrame, responses: pd.DataFrame, *, min_repeats: int = MIN_REPEATS
) -> pd.DataFrame:
    """The same tool with identical arguments (``args_key``) ``min_repeats`` times or more in
    one invocation; ``error_string`` is the tool's most common answer to them when it reads as
    an error or a retry hint, else missing. Transfers are not counted."""
    own = calls.loc[calls["invocation_id"].notna() & calls["name"].ne(TRANSFER_TOOL)]
    keys = ["invocation_id", "name", "args_key"]
    sizes = own.groupby(keys, sort=False)["call_id"].transform("size")
    repeated = own.loc[sizes.ge(min_repeats)].sort_values(
        ["invocation_id", "session_id", "seq"], kind="stable"
    )
    if repeated.empty:
        return as_columns(pd.DataFrame(columns=list(REPEAT_COLUMNS)), REPEAT_COLUMNS)
    answers = repeated[["call_id", *keys]].merge(
        responses[["call_id", "response"]].drop_duplicates("call_id"), on="call_id", how="left"
    )
    answered = answers.dropna(subset=["response"])
    texts = answered.assign(_text=[_text(r) for r in answered["response"]])  # the repeats only
    hints = texts.loc[texts["_text"].str.contains(_HINT)]
    common = hints.groupby(keys, sort=False)["_text"].agg(lambda t: t.mode().iloc[0])
    grouped = repeated.groupby(keys, sort=False)
    out = grouped.agg(
        args=("args", "first"), repeats=("call_id", "size"), call_ids=("call_id", tuple)
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
}


def silent_loops(
    events: pd.DataFrame,
    state_writes: pd.DataFrame,
    *,
    exit_keys: Iterable[str] = (),
    min_iterations: int = MIN_ITERATIONS,
) -> pd.DataFrame:
    """Loop agents whose sub-agents cycled ``min_iterations`` times or more in one invocation
    with no ``escalate`` and no write of an exit key.

    The loop agent is the parent in the events' ``branch`` (``review_loop.writer_agent``) of
    two or more sub-agents that take turns; an iteration is a return to its first sub-agent.
    ``exit_key`` is the first of ``exit_keys`` none of the invocation's events wrote, missing
    when no exit key is known (then the loop is reported on its cycle and the missing
    escalate alone).
    """
    own = events.loc[
        events["invocation_id"].notna() & events["branch"].str.contains(".", regex=False)
    ]
    if own.empty:
        return as_columns(pd.DataFrame(columns=list(LOOP_COLUMNS)), LOOP_COLUMNS)
    parent = own["branch"].str.rsplit(".", n=1).str[0]
    child = own["branch"].str.rsplit(".", n=1).str[1]
    keyed = own.assign(_loop=parent, _agent=child).sort_values(
        ["invocation_id", "session_id", "seq"], kind="stable"
    )
    group = keyed.groupby(["invocation_id", "_loop"], sort=False)
    first_agent = group["_agent"].transform("first")
    previous = group["_agent"].shift(1)
    returns = keyed["_agent"].eq(first_agent) & previous.notna() & previous.ne(first_agent)
    summary = (
        keyed.assign(_return=returns)
        .groupby(["invocation_id", "_loop"], sort=False)
        .agg(
            iterations=("_return", "sum"),
            agents=("_agent", lambda names: tuple(dict.fromkeys(names))),
            escalated=("escalate", "any"),
        )
    )
    summary["iterations"] += 1  # the first pass is an iteration too
    cycling = summary.loc[
        summary["iterations"].ge(min_iterations)
        & ~summary["escalated"]
        & summary["agents"].map(len).ge(2)
    ].reset_index()
    if cycling.empty:
        return as_columns(pd.DataFrame(columns=list(LOOP_COLUMNS)), LOOP_COLUMNS)
    mine = state_writes.loc[state_writes["invocation_id"].isin(cycling["invocation_id"])]
    written = per_group(mine["key"], mine["invocation_id"]).map(lambda k: tuple(sorted(set(k))))
    keys = list(dict.fromkeys(exit_keys))
    cycling["keys_written"] = [written.get(inv, ()) for inv in cycling["invocation_id"]]
    cycling["exit_key"] = [
        next((k for k in keys if k not in wrote), None) for wrote in cycling["keys_written"]
    ]
    if keys:  # an exit key that was written: the loop could end; not this signature
        cycling = cycling.loc[cycling["exit_key"].notna()]
    out = cycling.rename(columns={"_loop": "loop_agent"})
    return as_columns(out.sort_values(["invocation_id", "loop_agent"]), LOOP_COLUMNS)
