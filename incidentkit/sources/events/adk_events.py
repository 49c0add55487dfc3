"""One normaliser from raw ADK event JSON (Java or Python, camelCase or snake_case) to frames.

Readers hand over :class:`Batch` es: event objects (or their JSON text) and where each came
from. :func:`normalise` checks every record, rejects the unreadable ones with a reason, and
builds the ``events``, ``calls``, ``responses`` and ``state_writes`` frames column by column.
Each event's kind and the relations of ADK 2.x's markers (a compaction, a rewind) come from
:mod:`.event_kinds`, fed the raw ``actions`` fields read here.
JSON text (what a database hands over) is decoded a chunk at a time, and JSON-lines files
arrive as a lazy stream of chunk-sized batches (``json_files.iter_json_line_chunks``), so a million
events never sit in memory as dicts: only the compact columns of the frames are kept whole,
for the duplicate-id check and the final ordering.

What is checked: a missing or mistyped field the frames need (ids, author, timestamp, the
content and parts, a call's or response's ``name``, ...) rejects the event with its location
and a reason, so nothing is lost silently; a misspelled known key (``invocationID``) counts
as that key missing. Token counts are the exception: an unreadable one is missing in its
column and counted in a warning, and the event is kept (:mod:`.tokens`). Keys the kit does
not know are ignored on purpose, at the top level and inside ``actions`` and parts: ADK's own
Jackson mapper reads events with ``FAIL_ON_UNKNOWN_PROPERTIES=false``, and new ADK versions
add fields (``nodeInfo``, ``output``, ``isolationScope`` in 2.x) that must not turn a valid
event into a reject.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from incidentkit.frames import STR, TS, conform, empty, spec_of, text_array, to_numbers
from incidentkit.manifest import Filters
from incidentkit.sources.events import adk_typed, event_kinds
from incidentkit.sources.events.adk_columns import (
    IS_TRUE,
    NOT_NONE,
    Bools,
    Ints,
    Reasons,
    Records,
    check,
    explode,
    fill,
    mask,
    not_of,
    pluck,
)
from incidentkit.sources.events.adk_parts import (
    Parts,
    calls_frame,
    check_calls,
    check_part_shapes,
    function_parts,
    responses_frame,
    state_writes_frame,
    texts,
)
from incidentkit.sources.json_text import parse_json_values
from incidentkit.sources.loaded import RejectSink, all_distinct
from incidentkit.sources.process_memory import bulk_decoding, release_memory
from incidentkit.sources.tokens import REASON, USAGE_KEYS, event_tokens, warn_unreadable
from incidentkit.times import NS_LIMIT, OUT_OF_RANGE

MS_THRESHOLD = 1e11
"""Epoch timestamps at or above this are milliseconds, below it seconds."""
CHUNK = 50_000
TYPED = True
"""Decode well-formed chunks by types (:mod:`.adk_typed`); tests turn it off to compare."""
SESSION_KEYS = ("app_name", "user_id", "session_id")
EVENT_FRAMES = ("events", "calls", "responses", "state_writes")


@dataclass(frozen=True)
class Origin:
    """How to read one batch: its ``source_format`` label, timestamp unit, final-response rule.

    ``python`` adds ADK Python's clause: an error event that is not partial and calls no
    function is a final response.
    """

    source_format: str
    unit: Literal["ms", "s"]
    python: bool
    invocations: bool = True
    """False for stores that keep no invocation ids (Firestore): none is then required."""


JAVA_JSON = Origin("adk-java-json", "ms", python=False)
PYTHON_SESSION_JSON = Origin("adk-session-json", "s", python=True)
PYTHON_DB_V1 = Origin("adk-python-db-v1", "s", python=True)
PYTHON_SQLITE = Origin("adk-python-sqlite", "s", python=True)


@dataclass(frozen=True)
class Batch:
    """Raw events of one file or table, in source order.

    ``values`` holds event dicts or JSON text. ``meta`` (same length) holds ``location`` and,
    when the source keeps them outside the event, ``app_name``/``user_id``/``session_id``;
    optional ``event_id``/``invocation_id``/``ts`` columns fill in what an event lacks.
    """

    values: pd.Series
    meta: pd.DataFrame
    origin: Origin


# (frame column, JSON keys in either style, kind), read from the event and from its actions.
_Field = tuple[str, tuple[str, ...], str]
_TOP: tuple[_Field, ...] = (
    ("event_id", ("id",), "required"),
    ("invocation_id", ("invocationId", "invocation_id"), "required"),
    ("author", ("author",), "required"),
    ("branch", ("branch",), "text"),
    ("partial", ("partial",), "bool"),
    ("turn_complete", ("turnComplete", "turn_complete"), "bool"),
    ("interrupted", ("interrupted",), "bool"),
    ("error_code", ("errorCode", "error_code"), "text"),
    ("error_message", ("errorMessage", "error_message"), "text"),
)
_ACTIONS: tuple[_Field, ...] = (
    ("transfer_to_agent", ("transferToAgent", "transfer_to_agent", "transferAgent"), "text"),
    ("escalate", ("escalate",), "bool"),
    ("skip_summarization", ("skipSummarization", "skip_summarization"), "bool"),
    ("rewind_before", ("rewindBeforeInvocationId", "rewind_before_invocation_id"), "text"),
    ("end_of_agent", ("endOfAgent", "end_of_agent", "endInvocation"), "bool"),
)
_SESSION_JSON_KEYS = {
    "app_name": ("appName", "app_name"),
    "user_id": ("userId", "user_id"),
    "session_id": ("sessionId", "session_id"),
}


@dataclass(frozen=True)
class _Chunk:
    events: pd.DataFrame
    calls: pd.DataFrame
    responses: pd.DataFrame
    state_writes: pd.DataFrame


IdentityLookup = Callable[[], pd.DataFrame]
"""Ledger rows (invocation_id, app_name, user_id, session_id), read only when asked."""


def normalise(
    batches: Iterable[Batch],
    filters: Filters,
    sink: RejectSink,
    *,
    apply_filters: bool,
    identity: Mapping[str, str] | None = None,
    lookup: IdentityLookup | None = None,
) -> dict[str, pd.DataFrame]:
    """The four event frames of ``batches``; unreadable records go to ``sink``.

    ``batches`` may be lazy (a file read as it is consumed): each is normalised, a chunk at
    a time, and released before the next is drawn.

    ``apply_filters`` applies ``filters`` here (files; databases filter in SQL). Then a
    repeated event id is rejected, and ``seq`` numbers each session's surviving events by
    time, then source order.

    Session identity (app, user, session) of an event comes from its source row (a table's
    columns), else the event itself, else ``identity`` (the manifest's, for a one-session
    dump), else the ledger row of its invocation (``lookup``); an event none of them names is
    kept with empty keys and one warning, never rejected.
    """
    chunks: list[_Chunk] = []
    first_pos = 0
    with bulk_decoding():
        for batch in batches:
            for start in range(0, len(batch.values), CHUNK):
                stop = min(start + CHUNK, len(batch.values))
                chunks.append(_read_chunk(batch, start, stop, first_pos, sink, identity or {}))
            first_pos += len(batch.values)
            del batch  # a lazy source's next batch then replaces it in memory, not beside it
    if not chunks:
        return {name: empty(name) for name in EVENT_FRAMES}
    parts = [chunk.events for chunk in chunks]
    children = {name: [getattr(c, name) for c in chunks] for name in EVENT_FRAMES[1:]}
    del chunks
    release_memory()  # the chunks' decoded records are gone; only their columns stay
    # Identity, filters, duplicates and order are decided on the few columns they read; the
    # other columns are then gathered in that order one at a time, so the events frame is
    # never held whole twice (a concatenation, then a sorted copy, would hold it three times).
    events = pd.concat([part[_DECIDING] for part in parts], ignore_index=True)
    parts = [part.drop(columns=_DECIDING) for part in parts]
    events["ts"] = events["ts"].astype(TS)
    events = _identify(events, lookup, sink)
    if apply_filters and not (keep := matches(events, filters)).all():
        events = events[keep]
    events = _drop_duplicates(events, sink)
    warn_unreadable(events, sink, what="events")
    events = events.drop(columns=["location", REASON])  # read above, not sorted (nor kept)
    order = _session_order(events)
    rest_order = events.index.to_numpy()[order]  # rows of the chunks' other columns
    read = sum(len(part) for part in parts)
    gather: Ints | None = None if _in_order(order, len(order)) else order
    rest_gather: Ints | None = None if _in_order(rest_order, read) else rest_order
    columns = [str(col) for col in events.columns]
    events = pd.DataFrame({col: _gathered([events.pop(col)], gather) for col in columns})
    events["seq"] = _seq(events)
    keys = events[
        ["pos", "event_id", *SESSION_KEYS, "invocation_id", "seq", "ts", "author", "partial"]
    ]
    rest = {
        col: _gathered([part.pop(col) for part in parts], rest_gather) for col in parts[0].columns
    }
    del parts
    events = pd.concat([events, pd.DataFrame(rest)], axis=1)
    del rest
    frames = {"events": conform("events", events.assign(**event_kinds.relations(events)))}
    del events  # each frame is freed as soon as the next is built
    for name, by in (("calls", "part_no"), ("responses", "part_no"), ("state_writes", "key")):
        frames[name] = _attach(children.pop(name), name, keys, by)
    return frames


def _identify(
    events: pd.DataFrame, lookup: IdentityLookup | None, sink: RejectSink
) -> pd.DataFrame:
    """Fill session keys no source named from the ledger; warn about events still unnamed."""
    keys = list(SESSION_KEYS)
    unnamed = events[keys].isna().any(axis=1)
    if not unnamed.any():
        return events
    if lookup is not None:
        runs = lookup()[["invocation_id", *keys]].dropna().drop_duplicates("invocation_id")
        by_invocation = runs.set_index("invocation_id")
        for col in keys:
            found = events.loc[unnamed, "invocation_id"].map(by_invocation[col])
            events.loc[unnamed, col] = events.loc[unnamed, col].fillna(found)
        unnamed = events[keys].isna().any(axis=1)
    if unnamed.any():
        first = events.loc[unnamed, "location"].iloc[0]
        only_user = events.loc[unnamed, ["app_name", "session_id"]].notna().all(axis=None)
        if only_user and events.loc[unnamed, "source_format"].eq("vertex-ai-json").all():
            reason = (  # the session is in each event's name; its user only in sessions.get
                f"{int(unnamed.sum())} events name no user (first at {first}): give the "
                "sessions.get or sessions.list responses of their sessions beside the pages "
                "(they hold userId), or user_id in [events]"
            )
        else:
            reason = (
                f"{int(unnamed.sum())} events name no session (first at {first}): give "
                "app_name, user_id and session_id in [events] for a one-session dump, or add "
                "the ledger"
            )
        sink.warn(str(first), reason)
        events[keys] = events[keys].fillna("")
    return events


def _read_chunk(
    batch: Batch,
    start: int,
    stop: int,
    first_pos: int,
    sink: RejectSink,
    identity: Mapping[str, str],
) -> _Chunk:
    """Check and flatten records ``start:stop`` of ``batch``; rejects go to ``sink``.

    JSON text decodes by types (:mod:`.adk_typed`); what does not (other values, and records
    that break a type) goes the general way, through dicts. Both give the same columns to the
    same checks, in one order, so a record's first reason is the same either way.
    """
    raw = batch.values.iloc[start:stop]
    meta = batch.meta.iloc[start:stop].reset_index(drop=True)
    pos = first_pos + start + np.arange(len(raw), dtype=np.int64)
    rejects: list[_Rejected] = []
    typed = adk_typed.decode(raw.tolist()) if TYPED else None
    chunk = _read(typed, raw, meta, pos, batch.origin, identity, rejects)
    if typed is not None and len(rows := typed.undecodable):
        # Read the general way, and placed back among the others by position.
        meta_rows = meta.iloc[rows].reset_index(drop=True)
        rest = _read(None, raw.iloc[rows], meta_rows, pos[rows], batch.origin, identity, rejects)
        chunk = _merged(chunk, rest)
        rejects.sort(key=lambda rejected: rejected[0])
    for _, location, reason, text in rejects:
        sink.add(location, reason, text)
    return chunk


_Rejected = tuple[int, str, str, str]
"""A rejected record: its position, location, reason and text."""
_RETRY = "read the general way"
"""The reason a typed chunk gives the records it could not decode: not rejects of its own."""
_CALLS = ("functionCall", "function_call")
_RESPONSES = ("functionResponse", "function_response")


def _read(
    typed: adk_typed.Typed | None,
    raw: pd.Series,
    meta: pd.DataFrame,
    pos: Ints,
    origin: Origin,
    identity: Mapping[str, str],
    rejects: list[_Rejected],
) -> _Chunk:
    """The frames of records ``raw``, decoded by types (``typed``) or the general way (None);
    the rejected ones are added to ``rejects``."""
    n = len(raw)
    reasons = Reasons(n)
    view: _General | adk_typed.Typed
    if typed is None:
        view = _General(raw, reasons)
    else:
        view = typed
        reasons.array[typed.undecodable] = _RETRY
    cols = _fields(view, meta, reasons, identity, origin)
    fallback = meta["ts"] if "ts" in meta.columns else None
    why = _meta_list(meta, "ts_reason")
    times = _times(view.events.get(("timestamp",)), origin, fallback, why, reasons)
    owner = view.owner
    if isinstance(view, _General):
        view.check_content(reasons)
        calls, responses = view.check_parts(reasons)
    else:
        calls, responses = view.function_parts(_CALLS), view.function_parts(_RESPONSES)
    check_calls(calls, responses, reasons)
    long_running = view.events.get(("longRunningToolIds", "long_running_tool_ids"))
    if long_running.count(None) == n:  # most records pause on nothing
        lr_ids: list[tuple[str, ...]] = [()] * n
    else:
        lr_ok = mask(
            long_running, lambda v: v is None or (type(v) is list and set(map(type, v)) <= {str})
        )
        reasons.flag(~lr_ok, "longRunningToolIds is not a list of ids")
        lr_ids = [
            tuple(sorted(v)) if ok and v else () for v, ok in zip(long_running, lr_ok, strict=True)
        ]
    deltas = view.actions.get(("stateDelta", "state_delta"))
    reasons.flag(not_of(deltas, (dict, type(None))), "actions.stateDelta is not an object")
    tokens = event_tokens(view.events.get(USAGE_KEYS))  # unreadable counts warn, never reject
    compaction = view.actions.get(("compaction",))
    bounds = _compaction_bounds(view, compaction, origin, reasons)

    keep = ~reasons.bad
    _reject(reasons, raw, view, meta, pos, rejects)
    code_results = view.parts.get(("codeExecutionResult", "code_execution_result"))
    final = _final_response(cols, lr_ids, code_results, owner, calls, responses, origin)
    fields = _blank_rejected(cols, keep)
    kinds = event_kinds.kinds(
        {
            "has_content": np.bincount(owner, minlength=n) > 0,
            "error_code": fields["error_code"],
            "has_compaction": mask(compaction, NOT_NONE),
            "compaction_start": bounds[0],
            "compaction_end": bounds[1],
            "rewind_before": fields.pop("rewind_before"),
            "end_of_agent": mask(fields.pop("end_of_agent"), IS_TRUE),
            "has_agent_state": mask(view.actions.get(("agentState", "agent_state")), NOT_NONE),
        }
    )
    final &= ~event_kinds.is_marker(kinds["kind"])  # ADK's bookkeeping answers nobody
    part_texts = view.parts.get(("text",))
    events = pd.DataFrame(
        {
            "pos": pos,
            "location": meta["location"].astype(STR),
            **_compact(fields),
            "ts": times.array,
            "long_running_tool_ids": lr_ids,
            "final_response": final,
            **tokens.columns,
            REASON: tokens.reasons,
            "text": text_array(texts(part_texts, view.parts.get(("thought",)), owner, n)),
            "source_format": origin.source_format,
            **kinds,
        }
    )
    every = bool(keep.all())
    return _Chunk(
        events=events if every else events[keep],
        calls=calls_frame(calls, None if every else keep[calls.owner], pos, lr_ids),
        responses=responses_frame(responses, None if every else keep[responses.owner], pos),
        state_writes=state_writes_frame(deltas, pos, keep),
    )


def _merged(first: _Chunk, second: _Chunk) -> _Chunk:
    """Two chunks' frames as one, events in input order (children are ordered later)."""
    events = pd.concat([first.events, second.events], ignore_index=True)
    return _Chunk(
        events=events.sort_values("pos", kind="stable", ignore_index=True),
        calls=pd.concat([first.calls, second.calls], ignore_index=True),
        responses=pd.concat([first.responses, second.responses], ignore_index=True),
        state_writes=pd.concat([first.state_writes, second.state_writes], ignore_index=True),
    )


def _blank_rejected(cols: dict[str, list[Any]], keep: Bools) -> dict[str, list[Any]]:
    """``cols`` with None for rejected records: a rejected 0 beside a None would otherwise make
    a float column of text (pandas infers each column's type; text becomes Arrow strings)."""
    if keep.all():
        return cols
    return {
        col: [v if ok else None for v, ok in zip(values, keep, strict=True)]
        for col, values in cols.items()
    }


_KINDS = {col: kind for col, _, kind in (*_TOP, *_ACTIONS)}
_DECIDING = [
    "pos",
    "location",
    "event_id",
    *SESSION_KEYS,
    "invocation_id",
    "ts",
    "author",
    "partial",
    REASON,
    "source_format",
]
"""The columns of a chunk's events that identity, filters, duplicates and order read."""


def _compact(cols: dict[str, list[Any]]) -> dict[str, Any]:
    """``cols`` in the events frame's types: flags as booleans (null is false), text as
    strings. Every chunk's columns are then as small as the final frame's until they are
    concatenated (a list of None costs 8 bytes a row, a flag 1)."""
    return {
        col: _flags(values) if _KINDS.get(col) == "bool" else text_array(values)
        for col, values in cols.items()
    }


def _flags(values: list[Any]) -> Bools:
    """Checked flags (true, false or None) as booleans, None false."""
    flags: Bools = pa.array(values, type=pa.bool_()).fill_null(False).to_numpy(zero_copy_only=False)
    return flags


class _General:
    """A chunk decoded into dicts, whatever the records hold; their shapes are checked here.

    It offers what :class:`.adk_typed.Typed` does: ``events``, ``actions`` and ``parts``
    with a ``get`` over keys, and the parts' ``owner`` and ``part_no``.
    """

    def __init__(self, raw: pd.Series, reasons: Reasons) -> None:
        decoded, json_reasons = parse_json_values(raw)
        recs: list[Any] = decoded.tolist()
        self.recs = recs
        reasons.array[:] = json_reasons.to_numpy()
        if None in recs:
            reasons.flag(mask(recs, lambda r: r is None), "no event JSON (the value is null)")
        reasons.flag(
            not_of(recs, (dict, type(None))),
            lambda i: f"expected a JSON object, got {type(recs[i]).__name__}",
        )
        self.events = Records(recs)
        self.raw_actions = self.events.get(("actions",))
        self.actions = Records(self.raw_actions)
        self.contents = self.events.get(("content",))
        self.raw_parts = pluck(self.contents, ("parts",))
        self.owner, self.part_no, part_list = explode(self.raw_parts)
        self.parts = Records(part_list)

    def check_actions(self, reasons: Reasons) -> None:
        reasons.flag(not_of(self.raw_actions, (dict, type(None))), "actions is not an object")
        compactions = self.actions.get(("compaction",))
        reasons.flag(not_of(compactions, (dict, type(None))), "actions.compaction is not an object")

    def check_content(self, reasons: Reasons) -> None:
        reasons.flag(not_of(self.contents, (dict, type(None))), "content is not an object")
        reasons.flag(not_of(self.raw_parts, (list, type(None))), "content.parts is not a list")

    def check_parts(self, reasons: Reasons) -> tuple[Parts, Parts]:
        """The function calls and responses among the parts, their shapes checked."""
        calls, responses = self.parts.get(_CALLS), self.parts.get(_RESPONSES)
        check_part_shapes(self.parts, calls, responses, self.owner, self.part_no, reasons)
        return (
            function_parts(calls, self.owner, self.part_no, "args"),
            function_parts(responses, self.owner, self.part_no, "response"),
        )


def _final_response(
    cols: dict[str, list[Any]],
    lr_ids: list[tuple[str, ...]],
    code_results: list[Any],
    owner: Ints,
    calls: Parts,
    responses: Parts,
    origin: Origin,
) -> Bools:
    """ADK's ``finalResponse()`` / ``is_final_response()`` of each record."""
    n = len(lr_ids)
    has_call = np.bincount(calls.owner, minlength=n) > 0
    has_response = np.bincount(responses.owner, minlength=n) > 0
    last_part = np.append(owner[1:] != owner[:-1], True) if len(owner) else np.zeros(0, bool)
    code_result = mask(code_results, NOT_NONE)
    trailing = np.zeros(n, dtype=bool)
    trailing[owner[last_part & code_result]] = True
    partial = mask(cols["partial"], IS_TRUE)
    final: Bools = (
        mask(cols["skip_summarization"], IS_TRUE)
        | mask(lr_ids, bool)
        | (~has_call & ~has_response & ~partial & ~trailing)
    )
    if origin.python:  # ADK Python also ends on an error that calls nothing
        final |= mask(cols["error_code"], bool) & ~partial & ~has_call
    return final


def _fields(
    view: _General | adk_typed.Typed,
    meta: pd.DataFrame,
    reasons: Reasons,
    identity: Mapping[str, str],
    origin: Origin,
) -> dict[str, list[Any]]:
    """The event's scalar fields and its actions', checked (ids fall back to ``meta``).

    Session keys come from ``meta`` (the source row), else the event, else ``identity``;
    missing ones stay None for :func:`_identify`.
    """
    typed = isinstance(view, adk_typed.Typed)  # its own values have their types already

    def types(col: str) -> bool:  # whether values need their types checked
        return not typed or (col in meta.columns and meta[col].dtype != STR)

    cols: dict[str, list[Any]] = {}
    for col, keys, kind in _TOP:
        cols[col] = fill(view.events.get(keys), _meta_list(meta, col))
        lossy = col == "invocation_id" and not origin.invocations
        check(cols[col], "text" if lossy else kind, keys[0], reasons, types=types(col))
    for col, keys in _SESSION_JSON_KEYS.items():
        given = _meta_list(meta, col)
        if given is not None and None not in given and "" not in given:
            values = given  # the source row names every record's session: the event's key unread
        else:
            own = view.events.get(keys)
            values = own if given is None else fill(given, own)
        if "" in values:
            values = [None if v == "" else v for v in values]
        if col in identity:
            values = fill(values, [identity[col]] * len(values))
        check(values, "text", keys[0], reasons, types=types(col))
        cols[col] = values
    if isinstance(view, _General):
        view.check_actions(reasons)
    for col, keys, kind in _ACTIONS:
        cols[col] = view.actions.get(keys)
        check(cols[col], kind, f"actions.{keys[0]}", reasons, types=not typed)
    return cols


def _meta_list(meta: pd.DataFrame, column: str) -> list[Any] | None:
    if column not in meta.columns:
        return None
    series: Any = meta[column]  # pandas-stubs do not allow None as na_value
    values: list[Any] = series.to_numpy(dtype=object, na_value=None).tolist()
    return values


def _times(
    raw: list[Any],
    origin: Origin,
    fallback: pd.Series | None,
    why: list[Any] | None,
    reasons: Reasons,
) -> Any:
    """Event times from epoch numbers in ``origin.unit``; ``fallback`` fills absent ones.

    An event with neither is rejected with ``why`` (the reader's reason the fallback is null,
    e.g. an unreadable timestamp column) when it has one, else as missing its timestamp.
    """
    present = mask(raw, NOT_NONE)
    backed = np.zeros(len(raw), bool) if fallback is None else fallback.notna().to_numpy()
    reasons.flag(
        ~present & ~backed,
        "timestamp is missing" if why is None else lambda i: why[i] or "timestamp is missing",
    )
    times = _epochs(raw, origin, "timestamp", reasons)
    if fallback is not None:
        times = times.where(present, fallback.reset_index(drop=True))
    return times


_COMPACTION_BOUNDS = (("startTimestamp", "start_timestamp"), ("endTimestamp", "end_timestamp"))


def _compaction_bounds(
    view: _General | adk_typed.Typed, compaction: list[Any], origin: Origin, reasons: Reasons
) -> tuple[pd.Series, pd.Series]:
    """The start and end of each event's ``actions.compaction`` (NaT without one), read as
    its timestamp is (the same unit and checks), so a bound equals the time of its event."""
    if compaction.count(None) == len(compaction):  # the common case: no compaction at all
        none = pd.Series(pd.NaT, index=range(len(compaction)), dtype=TS)
        return none, none
    fields = (
        Records(compaction) if isinstance(view, _General) else adk_typed.compactions(compaction)
    )
    start, end = (
        _epochs(fields.get(keys), origin, f"actions.compaction.{keys[0]}", reasons)
        for keys in _COMPACTION_BOUNDS
    )
    return start, end


def _epochs(raw: list[Any], origin: Origin, name: str, reasons: Reasons) -> pd.Series:
    """Times from epoch numbers in ``origin.unit`` (NaT where absent or flagged); a value
    that is no number, out of range or in the other unit flags its record, naming ``name``."""
    wrong = not_of(raw, (int, float, type(None)))
    reasons.flag(wrong, lambda i: f"{name} is not a number: {raw[i]!r}")
    try:
        if wrong is None:  # numbers and None (NaN) only: one pass in C
            numbers = np.array(raw, dtype=float)
        else:
            numbers = np.array([v if type(v) in (int, float) else np.nan for v in raw], dtype=float)
    except OverflowError:  # an integer past float's range: out of range below, not a crash
        numbers = np.array(to_numbers(pd.Series(raw, dtype=object)), dtype=float)
    with np.errstate(invalid="ignore"):
        is_num = ~np.isnan(numbers)
        java = origin.unit == "ms"
        plausible = (numbers >= 0) & (numbers < 1e14)
        # nanoseconds since the epoch must fit in int64 (the frames' unit): before 2262-04-11
        representable = numbers < NS_LIMIT / (1e6 if java else 1e9)
        looks_ms = numbers >= MS_THRESHOLD

    def out_of_range(i: int) -> str:
        return f"{name} out of range: {raw[i]!r} ({OUT_OF_RANGE})"

    reasons.flag(is_num & ~plausible, out_of_range)
    reasons.flag(
        is_num & (looks_ms != java),
        lambda i: (
            f"{name} {raw[i]!r} looks like epoch {'seconds' if java else 'milliseconds'}"
            f", but this ADK {'Java' if java else 'Python'} source stores epoch "
            f"{'milliseconds' if java else 'seconds'} (mixed units)"
        ),
    )
    reasons.flag(is_num & ~representable, out_of_range)
    numbers[reasons.bad] = np.nan
    times = pd.Series(pd.to_datetime(numbers, unit=origin.unit, utc=True)).dt.as_unit("ns")
    if origin.unit == "s":  # float seconds carry binary noise below the µs ADK's clock gives
        times = times.dt.round("us")
    return times


def _reject(
    reasons: Reasons,
    raw: pd.Series,
    view: _General | adk_typed.Typed,
    meta: pd.DataFrame,
    pos: Ints,
    rejects: list[_Rejected],
) -> None:
    """Add each rejected record to ``rejects`` with its text, or its dict as JSON (only the
    general path is handed dicts: a typed chunk is all text)."""
    raws = raw.to_numpy(dtype=object)
    locations = meta["location"].to_numpy()
    for i in np.flatnonzero(reasons.bad):
        if reasons.array[i] is _RETRY:  # the general path reads it
            continue
        reason = str(reasons.array[i])
        if isinstance(raws[i], str):
            text = raws[i]
        else:
            text = json.dumps(cast(_General, view).recs[i], default=str)
        rejects.append((int(pos[i]), str(locations[i]), reason, text))


def matches(events: pd.DataFrame, filters: Filters) -> pd.Series:
    """The manifest's filters over parsed file events (databases apply them in SQL)."""
    keep = pd.Series(True, index=events.index)
    if filters.window is not None:
        keep &= (events["ts"] >= filters.window.start) & (events["ts"] < filters.window.end)
    if filters.app_name is not None:
        keep &= events["app_name"] == filters.app_name
    if filters.session_ids:
        keep &= events["session_id"].isin(filters.session_ids)
    if filters.invocation_ids:
        keep &= events["invocation_id"].isin(filters.invocation_ids)
    return keep


def _drop_duplicates(events: pd.DataFrame, sink: RejectSink) -> pd.DataFrame:
    """Keep the first event of each id; reject later copies, naming where the first was."""
    if all_distinct(events["event_id"]):  # the common case, without pandas' hash kernels
        return events
    dup = events["event_id"].duplicated(keep="first")
    first = events.loc[~dup].set_index("event_id")["location"]
    later = events[dup]
    reasons = "duplicate event id " + later["event_id"] + ", first seen at "
    sink.add_many(later["location"], reasons + later["event_id"].map(first), later["event_id"])
    return events[~dup]


def _session_order(events: pd.DataFrame) -> Ints:
    """The rows of ``events`` (session keys filled) ordered by session, time, then position
    in the input: Arrow's stable sort of the key columns, read without a copy. pandas'
    ``sort_values`` would make a sorted copy of the frame beside the original."""
    by = [*SESSION_KEYS, "ts", "pos"]
    keys = pa.Table.from_pandas(events[by], preserve_index=False)
    rows: Ints = pc.sort_indices(keys, [(col, "ascending") for col in by]).to_numpy()
    return rows


def _seq(events: pd.DataFrame) -> Ints:
    """Each event's number within its session, for ``events`` ordered by session: the row
    less the row where its session starts (no hash table of the keys)."""
    n = len(events)
    starts = np.zeros(n, dtype=bool)
    starts[:1] = True
    if n > 1:
        for col in SESSION_KEYS:
            values = pa.array(events[col])
            starts[1:] |= pc.not_equal(values[1:], values[:-1]).to_numpy(zero_copy_only=False)
    rows = np.arange(n, dtype=np.int64)
    seq: Ints = rows - np.maximum.accumulate(np.where(starts, rows, 0))
    return seq


def _chunks(text: pd.Series) -> list[pa.Array[Any]]:
    """The Arrow arrays holding a text column, as large strings."""
    arrow = pa.array(text, type=pa.large_string())  # a column of several chunks gives them all
    return list(arrow.chunks) if isinstance(arrow, pa.ChunkedArray) else [arrow]


def _in_order(rows: Ints, total: int) -> bool:
    """Whether ``rows`` are all ``total`` rows, in order: gathering them changes nothing (a
    table read in session order, a session document)."""
    return len(rows) == total and bool((rows == np.arange(total)).all())


def _gathered(pieces: list[pd.Series], order: Ints | None) -> pd.Series:
    """``pieces`` concatenated, rows ``order`` of them (None: all, in order). The pieces are
    freed on return, and their memory is handed back to the system at once: Arrow's pool and
    glibc's heap would keep it for reuse it does not make here (a 1M-event file's peak: 971
    MB, 1,050 MB with Arrow's kept; a 1M-row PostgreSQL table's: 970 MB, 1,015-1,042 MB with
    glibc's kept)."""
    column = _taken(pieces, order)
    pieces.clear()
    release_memory()
    return column


def _taken(pieces: list[pd.Series], order: Ints | None) -> pd.Series:
    """``pieces`` concatenated, rows ``order`` of them (None: all, in order); text taken by
    Arrow (200k shuffled rows: 3 ms, pandas 12 ms)."""
    if all(piece.dtype == STR for piece in pieces):
        text = pa.chunked_array(chunk for piece in pieces for chunk in _chunks(piece))
        return pd.Series(
            pd.array(cast(Any, text if order is None else text.take(order)), dtype=STR)
        )
    column = pd.concat(pieces, ignore_index=True)
    return column if order is None else column.take(order).reset_index(drop=True)


def _attach(parts: list[pd.DataFrame], name: str, keys: pd.DataFrame, by: str) -> pd.DataFrame:
    """A child frame joined to its surviving events (``keys``, in the events frame's order:
    seq, ts, ...), ordered by event, then ``by`` within it."""
    pos = pd.concat([part.pop("pos") for part in parts], ignore_index=True).to_numpy()
    known = keys["pos"].to_numpy()
    event_at = np.full(max(pos.max(initial=-1), known.max(initial=-1)) + 1, -1, dtype=np.int64)
    event_at[known] = np.arange(len(known))  # a record's position is its index in the input
    event = event_at[pos]  # -1: its event was dropped
    kept = np.flatnonzero(event >= 0)
    within = pa.array(pd.concat([part[by] for part in parts], ignore_index=True)).take(kept)
    ranks = pa.table({"event": event[kept], by: within})
    rows = kept[pc.sort_indices(ranks, [("event", "ascending"), (by, "ascending")]).to_numpy()]
    del within, ranks
    at = event[rows]
    repeated = spec_of(name).names  # the event's columns the child frame repeats
    columns = {col: _taken([keys[col]], at) for col in keys.columns if col in repeated}
    for col in list(parts[0].columns):  # moved one at a time: the chunks' rows are freed as
        columns[col] = _gathered([part.pop(col) for part in parts], rows)  # they are taken
    parts.clear()
    return conform(name, pd.DataFrame(columns))
