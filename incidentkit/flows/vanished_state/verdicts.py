"""A verdict per state key of one session (the four causes of vanished state, and the controls).

- ``TEMP_PREFIX``: a ``temp:`` key lives for one invocation; ADK never makes it durable.
- ``NEVER_DURABLE``: in no applied delta and not in the stored state. Cause ``partial_only``
  when only partial (streamed) events carried it, which ADK never appends; else
  ``direct_mutation``: code changed ``session.state`` itself, which writes no delta.
- ``OVERWRITTEN``: a later write by another invocation, agent or tool replaced the value.
- ``RACED``: writes from two invocations of the session whose time ranges overlap; the later
  won and the other's value was lost.
- ``REMOVED``: the last applied write deleted it.
- ``PRESENT``: written and never changed, or set at session creation: the bug is on the read
  side.

Every verdict names the writes that prove it (``written_by``, ``changed_by``, ``raced_with``).
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from incidentkit.flows._text import json_text
from incidentkit.flows.vanished_state.state import SessionRef
from incidentkit.flows.vanished_state.suspects import answer_texts, key_words, names_key


class KeyVerdict(enum.StrEnum):
    """What became of one state key."""

    TEMP_PREFIX = "TEMP_PREFIX"
    NEVER_DURABLE = "NEVER_DURABLE"
    OVERWRITTEN = "OVERWRITTEN"
    RACED = "RACED"
    REMOVED = "REMOVED"
    PRESENT = "PRESENT"


class Cause(enum.StrEnum):
    """Why a key never became durable, or how a present one got there without a delta."""

    DIRECT_MUTATION = "direct_mutation"
    PARTIAL_ONLY = "partial_only"
    SET_AT_CREATION = "set_at_creation"


VERDICT_COLUMNS = [
    *("key", "verdict", "cause", "why", "value", "written_by", "changed_by", "raced_with"),
    *("fix", "brief", "suspects"),
]
"""``brief``: the verdict with its proof in a line (the report's first screen); ``suspects``:
for a key no delta names, the tool answers of the session that mention it and wrote no delta
(where a direct mutation most likely happened)."""
FIXES: Mapping[tuple[KeyVerdict, Cause | None], str] = {
    (KeyVerdict.TEMP_PREFIX, None): "Drop the temp: prefix if the value must outlive the "
    "invocation (temp: is for scratch data within one turn).",
    (KeyVerdict.NEVER_DURABLE, Cause.DIRECT_MUTATION): "Write state through tool_context.state "
    "/ callback_context.state (or EventActions.stateDelta), never session.state directly.",
    (KeyVerdict.NEVER_DURABLE, Cause.PARTIAL_ONLY): "Write the key on the final event (after "
    "the stream ends), not on partial ones: ADK appends only non-partial events.",
    (KeyVerdict.OVERWRITTEN, None): "Give each writer its own key, or have the later writer "
    "merge instead of replacing.",
    (KeyVerdict.RACED, None): "Serialize invocations per session at the API layer (a "
    "per-session lock or queue across replicas), and make the client idempotent.",
    (KeyVerdict.REMOVED, None): "Check why the remover deleted it; if it was wrong, stop that "
    "write.",
    (KeyVerdict.PRESENT, None): "The state holds it: look at the read side (the key name and "
    "prefix the reader uses, the instruction's {key} template, a stale session copy).",
}
"""The fix of each verdict (and cause, where the causes differ)."""


def fix_of(verdict: KeyVerdict, cause: Cause | None) -> str:
    """The fix of ``verdict`` with ``cause`` (the verdict's own when the cause has none)."""
    return FIXES.get((verdict, cause)) or FIXES[(verdict, None)]


@dataclass(frozen=True)
class Context:
    """What the verdicts of one session are judged against."""

    ref: SessionRef
    writes: pd.DataFrame
    """:func:`.state.visible_writes` (every stored write the session sees, in ADK's order)."""
    stored: pd.DataFrame
    """:func:`.state.stored_state` of the session."""
    store_keeps_state: bool
    keeps_partials: bool
    """Whether the event log holds partial events (a log written by a plugin); an ADK
    session store never does."""
    ranges: pd.DataFrame
    """:func:`.overlaps.invocation_ranges` of the session's invocations."""
    responses: pd.DataFrame
    """The session's function responses, for the suspects of a direct mutation."""


def keys_to_judge(ctx: Context, asked: Iterable[str]) -> list[str]:
    """The keys asked for, else every key the session's deltas or stored state name."""
    chosen = [k for k in asked if k]
    if chosen:
        return list(dict.fromkeys(chosen))
    return list(dict.fromkeys([*ctx.writes["key"], *ctx.stored["key"]]))


def judge(ctx: Context, keys: Iterable[str]) -> pd.DataFrame:
    """One row per key (:data:`VERDICT_COLUMNS`), in the order given."""
    by_key = {str(key): group for key, group in ctx.writes.groupby("key", sort=False)}
    stored: dict[str, Mapping[str, Any]] = {
        str(row["key"]): {str(k): v for k, v in row.items()}
        for row in ctx.stored.to_dict("records")
    }
    rows = [_judge_one(ctx, key, by_key.get(key), stored) for key in keys]
    frame = pd.DataFrame(rows, columns=VERDICT_COLUMNS)
    objects = ("value", "written_by", "changed_by", "raced_with", "suspects")
    return frame.astype({c: object for c in objects})


def who(write: Mapping[str, Any] | pd.Series | None) -> dict[str, Any] | None:
    """A write as the findings name it: invocation, author, tool, event, time, session."""
    if write is None:
        return None
    out = {
        "invocation_id": write["invocation_id"],
        "author": write["author"],
        "event_id": write["event_id"],
        "ts": write["ts"],
    }
    if pd.notna(write["tool"]):
        out["tool"] = write["tool"]
    out["session_id"] = write["session_id"]
    return out


def _writer(write: pd.Series) -> str:
    tool = f" (tool {write['tool']})" if pd.notna(write["tool"]) else ""
    return f"{write['author']}{tool} in invocation {write['invocation_id']}"


def _at(write: pd.Series) -> str:
    """When a write happened and the event that proves it: ``14:05:03.931Z (event 6d1...)``."""
    stamp: pd.Timestamp = write["ts"]
    return stamp.strftime("%H:%M:%S.%f")[:-3] + f"Z (event {write['event_id']})"


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _row(
    key: str,
    verdict: KeyVerdict,
    why: str,
    brief: str,
    *,
    cause: Cause | None = None,
    value: Any = None,
    written_by: pd.Series | None = None,
    changed_by: pd.Series | None = None,
    raced_with: pd.Series | None = None,
    suspects: tuple[dict[str, Any], ...] = (),
) -> tuple[Any, ...]:
    label = verdict.value + ("" if cause is None else f" ({cause.value})")
    return (
        key,
        verdict.value,
        None if cause is None else cause.value,
        why,
        value,
        who(written_by),
        who(changed_by),
        who(raced_with),
        fix_of(verdict, cause),
        f"{key} {label}: {brief}",
        suspects,
    )


def _judge_one(
    ctx: Context, key: str, writes: pd.DataFrame | None, stored: Mapping[str, Mapping[str, Any]]
) -> tuple[Any, ...]:
    writes = writes if writes is not None else ctx.writes.iloc[0:0]
    held = key in stored and stored[key]["value"] is not None
    if key.startswith("temp:"):
        last = writes.iloc[-1] if len(writes) else None
        shown = "" if last is None else f"; {_writer(last)} wrote it at {_at(last)}"
        return _row(
            key,
            KeyVerdict.TEMP_PREFIX,
            "temp: keys live for one invocation and are never applied to the session state "
            f"(ADK Python also trims them from the stored delta, ADK Java keeps them there){shown}",
            "a temp: key never outlives its invocation"
            + ("" if last is None else f" (written at {_at(last)})"),
            value=None if last is None else last["value"],
            written_by=last,
        )
    applied = writes.loc[~writes["partial"]]
    if applied.empty:
        return _not_applied(ctx, key, writes, stored, held)
    last = applied.iloc[-1]
    if last["removed"]:
        before = applied.iloc[:-1].loc[~applied.iloc[:-1]["removed"]]
        setter = before.iloc[-1] if len(before) else None
        was = "" if setter is None else f" (set by {_writer(setter)} at {_at(setter)})"
        return _row(
            key,
            KeyVerdict.REMOVED,
            f"{_writer(last)} removed it at {_at(last)}{was}",
            f"removed by {last['author']} at {_at(last)}",
            written_by=setter,
            changed_by=last,
        )
    lost = _raced(ctx, applied, last)
    if lost is not None:
        return _row(
            key,
            KeyVerdict.RACED,
            f"invocations {lost['invocation_id']} and {last['invocation_id']} ran at the same "
            f"time on this session; {_writer(lost)} wrote {json_text(lost['value'])} at "
            f"{_at(lost)}, then {_writer(last)} wrote {json_text(last['value'])} at {_at(last)} "
            "from the same starting state: the later write won and the first one's change was "
            "lost",
            f"invocations {lost['invocation_id']} and {last['invocation_id']} overlapped; "
            f"{_short(lost['value'])} was lost to {_short(last['value'])} at {_at(last)}",
            value=last["value"],
            written_by=last,
            raced_with=lost,
        )
    earlier = _replaced(applied, last)
    if earlier is not None:
        return _row(
            key,
            KeyVerdict.OVERWRITTEN,
            f"{_writer(earlier)} wrote {json_text(earlier['value'])} at {_at(earlier)}; "
            f"{_writer(last)} replaced it with {json_text(last['value'])} at {_at(last)}",
            f"{_short(earlier['value'])} replaced by {_short(last['value'])} by "
            f"{last['author']} at {_at(last)}",
            value=last["value"],
            written_by=earlier,
            changed_by=last,
        )
    return _row(
        key,
        KeyVerdict.PRESENT,
        f"{_writer(last)} wrote it at {_at(last)} and nothing changed it since: the state holds "
        f"{json_text(last['value'])}, so the bug is on the read side",
        f"written at {_at(last)} and never changed: look at the read side",
        value=last["value"],
        written_by=last,
    )


def _not_applied(
    ctx: Context,
    key: str,
    writes: pd.DataFrame,
    stored: Mapping[str, Mapping[str, Any]],
    held: bool,
) -> tuple[Any, ...]:
    if held:
        return _row(
            key,
            KeyVerdict.PRESENT,
            f"the stored state ({stored[key]['source']}) holds it and no event delta wrote "
            "it: it was set when the session was created (create_session state), so the bug "
            "is on the read side",
            "set at create_session (no delta) and held: look at the read side",
            cause=Cause.SET_AT_CREATION,
            value=stored[key]["value"],
        )
    if len(writes):  # only partial events carried it
        last = writes.iloc[-1]
        return _row(
            key,
            KeyVerdict.NEVER_DURABLE,
            f"only partial (streamed) events carried it ({len(writes)}; the last by "
            f"{_writer(last)} at {_at(last)}); ADK never appends a partial event, so its "
            "delta was never applied",
            f"only the partial event at {_at(last)} carried it, and ADK never appends one",
            cause=Cause.PARTIAL_ONLY,
            value=last["value"],
            written_by=last,
        )
    names = [str(k) for k in (*ctx.writes["key"], *stored) if k != key]
    similar = sorted(set(difflib.get_close_matches(key, names, n=3, cutoff=0.6)))
    suspects = suspected_writers(key, ctx.responses, ctx.writes["event_id"])
    facts = ["no stored event delta names it"]
    facts.append("the stored state does not hold it" if ctx.store_keeps_state else "")
    said = " and ".join(fact for fact in facts if fact)
    if ctx.keeps_partials:
        how = (
            "The event log keeps partial events and none carries it either, so it was not a "
            "streamed-only write: code changed session.state directly, which writes no delta"
        )
    else:
        how = (
            "Most likely code changed session.state directly, which writes no delta. The event "
            "log alone cannot tell that from a write carried only by partial (streamed) events, "
            "which a session store never keeps: a log of streamed events (an on_event plugin), "
            "the RunConfig's streaming mode (no streaming, no partials) or the code that writes "
            "the key would"
        )
    if not ctx.store_keeps_state:
        how += (
            "; this evidence holds no stored state, so a key given to create_session would "
            "look the same"
        )
    pointed = ""
    if suspects:
        named = ", ".join(f"{s['tool']} at {_at(pd.Series(s))}" for s in suspects)
        pointed = f" Tool answers that mention it and wrote no delta: {named}."
    near = f" Keys with similar names that are set: {', '.join(similar)}." if similar else ""
    brief = "nothing in the evidence writes it" + (
        ""
        if ctx.keeps_partials
        else " (a direct mutation, or streamed events only: a store cannot tell)"
    )
    if suspects:
        first = suspects[0]
        brief += f"; {first['tool']} answered at {_at(pd.Series(first))} without a delta"
    if similar:
        brief += f"; similar keys set: {', '.join(similar)} (check the name the reader uses)"
    return _row(
        key,
        KeyVerdict.NEVER_DURABLE,
        f"{said}. {how}.{pointed}{near}",
        brief,
        cause=Cause.DIRECT_MUTATION,
        suspects=suspects,
    )


SUSPECTS = 3


def suspected_writers(
    key: str, responses: pd.DataFrame, delta_events: pd.Series
) -> tuple[dict[str, Any], ...]:
    """Tool answers that mention ``key`` (its name, or a word of it in the tool's name) on an
    event that carries no delta: where a direct ``session.state`` mutation most likely ran
    (:func:`.suspects.names_key`, the rule the triage card also uses). Those whose tool name
    shares a word with the key come first; at most :data:`SUSPECTS`."""
    if responses.empty or not key_words(key):
        return ()
    quiet = responses.loc[~responses["event_id"].isin(delta_events)]
    by_name, by_text = names_key(
        key, quiet["name"].fillna("").astype("str").str.lower(), answer_texts(quiet)
    )
    hits = quiet.assign(rank=(~by_name).astype(int)).loc[by_name | by_text]
    ordered = hits.sort_values(["rank", "ts"], kind="stable").head(SUSPECTS)
    return tuple(
        {
            "invocation_id": row["invocation_id"],
            "author": row["author"],
            "event_id": row["event_id"],
            "ts": row["ts"],
            "tool": row["name"],
            "session_id": row["session_id"],
        }
        for row in ordered.to_dict("records")
    )


def _raced(ctx: Context, applied: pd.DataFrame, last: pd.Series) -> pd.Series | None:
    """The latest write from another invocation of the session that overlaps ``last``'s and
    wrote another value: the write the race lost."""
    spans: dict[str, tuple[Any, Any]] = {
        str(inv): (start, end)
        for inv, start, end in zip(
            ctx.ranges["invocation_id"], ctx.ranges["start"], ctx.ranges["end"], strict=True
        )
    }
    mine = spans.get(str(last["invocation_id"]))
    if mine is None:
        return None
    others = applied.iloc[:-1]
    others = others.loc[
        others["invocation_id"].ne(last["invocation_id"])
        & others["session_id"].eq(last["session_id"])
    ]
    for _, write in others.iloc[::-1].iterrows():
        theirs = spans.get(str(write["invocation_id"]))
        if theirs is None or write["value"] == last["value"]:
            continue
        if theirs[0] < mine[1] and mine[0] < theirs[1]:
            return write
    return None


WRITER = ("invocation_id", "author", "tool")
"""What makes two writes the same writer's."""


def _writer_of(write: pd.Series) -> list[Any]:
    return [None if pd.isna(write[col]) else write[col] for col in WRITER]


def _replaced(applied: pd.DataFrame, last: pd.Series) -> pd.Series | None:
    """The latest earlier write with another value by another writer (invocation, agent or
    tool): what ``last`` overwrote."""
    for _, write in applied.iloc[:-1].iloc[::-1].iterrows():
        if write["removed"] or write["value"] == last["value"]:
            continue
        return None if _writer_of(write) == _writer_of(last) else write
    return None
