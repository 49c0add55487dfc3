"""A verdict per state key of one session (the four causes of vanished state, and the controls).

- ``TEMP_PREFIX``: a ``temp:`` key lives for one invocation; ADK never makes it durable.
- ``NEVER_DURABLE``: in no applied delta and not in the stored state. Cause ``partial_only``
  when only partial (streamed) events carried it, which ADK never appends; else
  ``direct_mutation``: code changed ``session.state`` itself, which writes no delta.
- ``OVERWRITTEN``: a later write by another invocation, agent or tool replaced the value.
- ``RACED``: writes from two invocations of the session whose time ranges overlap; the later
  won and the other's value was lost.
- ``REMOVED``: the last applied write deleted it.
- ``REWOUND``: ``Runner.rewind_async`` rolled it back: a rewind's state delta is its last
  change (its value before the undone invocation restored, or null), cause
  ``creation_state_nulled`` when no event ever wrote it (state given to ``create_session``,
  which ADK's rewind nulls: adk-python #4933). Session keys only: ADK never reverts ``app:``
  or ``user:`` keys, so they keep the verdict of their own writes.
- ``PRESENT``: written and never changed, or set at session creation: the bug is on the read
  side.

A rewind deletes no event: it appends one (author ``user``, an invocation id of its own) whose
delta restores the session keys to what the events before that invocation left
(``sessions/_rewind_utils.py`` ``compute_state_delta_for_rewind``). A session key's writes in
the events a rewind undid (``events.rewound_by``) are no evidence of what it holds; the
rewind's delta is.

Every verdict names the writes that prove it (``written_by``, ``changed_by``, ``raced_with``);
a marker's write is named for what it is ("a rewind (event X) undoing invocation Y"), never by
its stored author ``user``.
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from incidentkit.flows._frames import per_group
from incidentkit.flows._markers import is_kind, turns
from incidentkit.flows._text import json_text
from incidentkit.flows.vanished_state.state import SessionRef
from incidentkit.flows.vanished_state.suspects import answer_texts, key_words, names_key
from incidentkit.frames import EventKind


class KeyVerdict(enum.StrEnum):
    """What became of one state key."""

    TEMP_PREFIX = "TEMP_PREFIX"
    NEVER_DURABLE = "NEVER_DURABLE"
    OVERWRITTEN = "OVERWRITTEN"
    RACED = "RACED"
    REMOVED = "REMOVED"
    REWOUND = "REWOUND"
    PRESENT = "PRESENT"


SETTLED = (KeyVerdict.PRESENT.value, KeyVerdict.REWOUND.value)
"""Verdicts that are no failure to keep state: held, or rolled back by a rewind the app
asked for (still worth reading: the item is a WARNING while a key is REWOUND). The postmortem
counts the others as keys that did not stick."""


class Cause(enum.StrEnum):
    """Why a key never became durable, or how a present one got there without a delta."""

    DIRECT_MUTATION = "direct_mutation"
    PARTIAL_ONLY = "partial_only"
    SET_AT_CREATION = "set_at_creation"
    CREATION_STATE_NULLED = "creation_state_nulled"


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
    (KeyVerdict.REWOUND, None): "The state was rolled back by Runner.rewind_async: restore it, "
    "or re-run the undone invocation, if the rewind was not meant.",
    (KeyVerdict.REWOUND, Cause.CREATION_STATE_NULLED): "The state was rolled back by "
    "Runner.rewind_async, which also nulls state given to create_session (adk-python #4933): "
    "restore it, or re-run the undone invocation, if the rewind was not meant; to keep such a "
    "key through rewinds, write it in an event's state_delta rather than create_session's "
    "state, or set it again after rewind_async.",
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
    rewinds: pd.DataFrame = field(default_factory=lambda: rewinds_of(pd.DataFrame()))
    """:func:`rewinds_of` the events the writes come from."""


REWIND_COLUMNS = ["session_id", "invocation_id", "ts", "rewind_before", "undid"]
""":func:`rewinds_of`'s columns (indexed by the rewind's ``event_id``)."""


def rewinds_of(events: pd.DataFrame) -> pd.DataFrame:
    """One row per rewind event of ``events`` (:data:`REWIND_COLUMNS`, indexed by its
    ``event_id``): ``undid`` the invocations whose events it undid (``rewound_by``), in session
    order, marker invocations left out."""
    if "rewound_by" not in events or "kind" not in events:
        return pd.DataFrame(columns=REWIND_COLUMNS, index=pd.Index([], name="event_id"))
    rewinds = events.loc[is_kind(events, EventKind.REWIND)].drop_duplicates("event_id")
    undone = turns(events).dropna(subset=["rewound_by", "invocation_id"])
    undone = undone.sort_values(["session_id", "seq"], kind="stable")
    undone = undone.drop_duplicates(["rewound_by", "invocation_id"])
    undid = per_group(undone["invocation_id"], undone["rewound_by"])
    out = rewinds.set_index("event_id")[REWIND_COLUMNS[:-1]].copy()
    out["undid"] = pd.Series(
        [undid.get(event, ()) for event in out.index], index=out.index, dtype=object
    )  # one per rewind: a handful
    return out


def keys_to_judge(ctx: Context, asked: Iterable[str]) -> list[str]:
    """The keys asked for, else every key the session's deltas or stored state name."""
    chosen = [k for k in asked if k]
    if chosen:
        return list(dict.fromkeys(chosen))
    return list(dict.fromkeys([*ctx.writes["key"], *ctx.stored["key"]]))


def judge(ctx: Context, keys: Iterable[str]) -> pd.DataFrame:
    """One row per key (:data:`VERDICT_COLUMNS`), in the order given."""
    writes = ctx.writes.copy()
    writes["undid"] = writes["event_id"].map(ctx.rewinds["undid"]).astype(object)
    ctx = replace(ctx, writes=writes)
    by_key = {str(key): group for key, group in writes.groupby("key", sort=False)}
    stored: dict[str, Mapping[str, Any]] = {
        str(row["key"]): {str(k): v for k, v in row.items()}
        for row in ctx.stored.to_dict("records")
    }
    rows = [_judge_one(ctx, key, by_key.get(key), stored) for key in keys]
    frame = pd.DataFrame(rows, columns=VERDICT_COLUMNS)
    objects = ("value", "written_by", "changed_by", "raced_with", "suspects")
    return frame.astype({c: object for c in objects})


def who(write: Mapping[str, Any] | pd.Series | None) -> dict[str, Any] | None:
    """A write as the findings name it: invocation, author, tool, event, time, session. A
    marker's write is named for what it is (``author`` "a rewind (event X) undoing invocation
    Y", never ADK's ``user``), with its ``kind``, and on a rewind ``rewind_before`` and
    ``undid`` (the invocations it undid)."""
    if write is None:
        return None
    kind = _kind(write)
    named = kind in (EventKind.TURN, EventKind.ERROR)
    out = {
        "invocation_id": write["invocation_id"],
        "author": write["author"] if named else _marker(write, with_id=True),
        "event_id": write["event_id"],
        "ts": write["ts"],
    }
    if pd.notna(write["tool"]):
        out["tool"] = write["tool"]
    out["session_id"] = write["session_id"]
    if kind is EventKind.REWIND:
        out.update(kind=kind.value, rewind_before=write["rewind_before"], undid=_undid(write))
    elif kind is not EventKind.TURN:
        out["kind"] = kind.value
    return out


def _kind(write: Mapping[str, Any] | pd.Series) -> EventKind:
    """The kind of the event that carried ``write`` (a turn when not known)."""
    kind = write.get("kind")
    return EventKind(kind) if isinstance(kind, str) and kind in set(EventKind) else EventKind.TURN


def _undid(write: Mapping[str, Any] | pd.Series) -> tuple[str, ...]:
    undid = write.get("undid")
    return tuple(undid) if isinstance(undid, tuple | list) else ()


def _invocations(ids: tuple[str, ...]) -> str:
    """``invocation A``, ``invocations A and B``, ``invocations A, B and C``."""
    if len(ids) <= 1:
        return "invocation " + (ids[0] if ids else "?")
    return "invocations " + ", ".join(ids[:-1]) + " and " + ids[-1]


def _marker(write: Mapping[str, Any] | pd.Series, *, with_id: bool = False) -> str:
    """A marker that wrote state, in words: ``a rewind undoing invocation Y`` (``a rewind
    (event X) undoing ...`` ``with_id``), ``a compaction``, ``a checkpoint of agent A``."""
    kind = _kind(write)
    event = f" (event {write['event_id']})" if with_id else ""
    if kind is EventKind.REWIND:
        undid = _undid(write)
        what = _invocations(undid) if undid else f"nothing (before {write['rewind_before']})"
        return f"a rewind{event} undoing {what}"
    if kind is EventKind.COMPACTION:
        return f"a compaction{event}"
    return f"a {kind.value}{event} of agent {write['author']}"


def _writer(write: pd.Series) -> str:
    if _kind(write) not in (EventKind.TURN, EventKind.ERROR):
        return _marker(write)
    tool = f" (tool {write['tool']})" if pd.notna(write["tool"]) else ""
    return f"{write['author']}{tool} in invocation {write['invocation_id']}"


def _name(write: pd.Series) -> str:
    """Who wrote, in a word or two: the author, or the marker (``a rewind``)."""
    kind = _kind(write)
    named = kind in (EventKind.TURN, EventKind.ERROR)
    return str(write["author"]) if named else f"a {kind.value}"


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
    if key.startswith(SHARED):  # a rewind never reverts them: every write of theirs stands
        row = _settled(ctx, key, writes, applied, stored, held)
        return _kept(ctx, row, applied)
    live = applied.loc[applied["rewound_by"].isna()]
    rolled = _rewound(ctx, key, applied, live)
    if rolled is not None:
        return rolled
    return _settled(ctx, key, writes, live, stored, held)


SHARED = ("app:", "user:")
"""Prefixes of the keys a rewind leaves as they are (``_NON_SESSION_STATE_PREFIXES``)."""
WHY, BRIEF = VERDICT_COLUMNS.index("why"), VERDICT_COLUMNS.index("brief")


def _settled(
    ctx: Context,
    key: str,
    writes: pd.DataFrame,
    applied: pd.DataFrame,
    stored: Mapping[str, Mapping[str, Any]],
    held: bool,
) -> tuple[Any, ...]:
    """The verdict of a key from its ``applied`` writes (no rewind rolled it back)."""
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
            f"removed by {_name(last)} at {_at(last)}",
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
            f"{_name(last)} at {_at(last)}",
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


def _rewound(
    ctx: Context, key: str, applied: pd.DataFrame, live: pd.DataFrame
) -> tuple[Any, ...] | None:
    """REWOUND when a rewind's delta is the last change of session key ``key`` (``live``: its
    ``applied`` writes less those in undone events), or when a rewind undid every write of it
    (set and removed within the undone invocations, the rewind's delta had nothing to name);
    else None."""
    if len(live) and _kind(live.iloc[-1]) is EventKind.REWIND:
        rewind: pd.Series = live.iloc[-1]
        prior = applied.loc[applied.index < rewind.name]
    elif live.empty and len(applied) and applied.iloc[-1]["rewound_by"] in ctx.rewinds.index:
        event = applied.iloc[-1]["rewound_by"]
        facts = {**ctx.rewinds.loc[event], "event_id": event, "author": "user", "tool": None}
        rewind = pd.Series({**facts, "kind": EventKind.REWIND.value, "removed": True})
        prior = None
    else:
        return None
    by, at, before = _writer(rewind), _at(rewind), rewind["rewind_before"]
    undone = applied.loc[applied["rewound_by"].eq(rewind["event_id"])]
    lost = undone.iloc[-1] if len(undone) else None
    undid = ""
    if lost is not None:
        undid = f"; it undid the write of {json_text(lost['value'])} by {_writer(lost)} at "
        undid += _at(lost)
    cause = None
    if prior is None:  # no rewind delta names it: its every write was undone
        why = f"every write of it was in the invocations {by} undid at {at}{undid}; it was not "
        why += "set before them, so the rewind's delta did not need to name it"
        brief = f"every write undone by {by} at {at}"
    elif not rewind["removed"]:
        source = _set_by(prior.loc[prior["rewound_by"].isna()], rewind["value"])
        set_by = "" if source is None else f", set by {_writer(source)} at {_at(source)}"
        why = f"{by} restored it to {json_text(rewind['value'])} at {at}, its value before "
        why += f"invocation {before}{set_by}{undid}"
        brief = f"restored to {_short(rewind['value'])} by {by} at {at}"
    elif prior["kind"].eq(EventKind.REWIND.value).all():  # no event but rewinds wrote it
        cause = Cause.CREATION_STATE_NULLED
        why = (
            f"{by} set it to null at {at}, and no event ever wrote it: it was state given to "
            "create_session, which ADK's rewind nulls (it rebuilds the state before invocation "
            f"{before} from event deltas alone; adk-python issue #4933)"
        )
        brief = (
            f"set at create_session and nulled by {by} at {at} (ADK nulls create_session "
            "state on a rewind: adk-python #4933)"
        )
    else:
        why = f"{by} removed it at {at}: no event before invocation {before} left it set{undid}"
        brief = f"removed by {by} at {at}"
    return _row(
        key,
        KeyVerdict.REWOUND,
        why + ". Runner.rewind_async rolls session keys back to before the invocation it is "
        "given (app:/user: keys are not reverted)",
        brief,
        cause=cause,
        value=None if rewind["removed"] else rewind["value"],
        written_by=lost,
        changed_by=rewind,
    )


def _set_by(writes: pd.DataFrame, value: Any) -> pd.Series | None:
    """The latest of ``writes`` that wrote ``value`` (what a rewind restored)."""
    found = writes.loc[writes["value"].map(lambda held: bool(held == value)) & ~writes["removed"]]
    return found.iloc[-1] if len(found) else None


def _kept(ctx: Context, row: tuple[Any, ...], applied: pd.DataFrame) -> tuple[Any, ...]:
    """``row`` of an ``app:``/``user:`` key, saying so when a rewind undid the invocation of
    one of its writes, which ADK nonetheless keeps."""
    undone = applied.dropna(subset=["rewound_by"])
    if undone.empty:
        return row
    last = undone.iloc[-1]
    event = last["rewound_by"]
    at = ""
    if event in ctx.rewinds.index:
        at = " at " + _at(pd.Series({"ts": ctx.rewinds.loc[event, "ts"], "event_id": event}))
    note = (
        f". A rewind{at} undid invocation {last['invocation_id']}, which wrote it, but ADK "
        "does not revert app:/user: keys on a rewind, so that write stands"
    )
    out = list(row)
    out[WHY] = str(row[WHY]).rstrip(".") + note
    out[BRIEF] = f"{row[BRIEF]}; kept through the rewind{at} (app:/user: keys are not reverted)"
    return tuple(out)


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
