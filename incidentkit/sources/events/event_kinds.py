"""What each stored ADK event is (``events.kind``), and what ADK 2.x's markers say of others.

ADK 2.x appends markers to the log that holds the conversation: a compaction's summary
(``actions.compaction``), a rewind (``actions.rewind_before_invocation_id``), the checkpoints
of a resumable app (``end_of_agent`` / ``agent_state`` on an event with no content), and error
events with no content (a tool or model raised, a timeout, ``max_llm_calls``). None of them is
a turn, and no marker is a final response.

A loader extracts the raw fields of :data:`RAW` (one value per event) and hands them over as
arrays: :func:`kinds` gives the columns each event decides alone (``kind``,
``compaction_start``, ``compaction_end``, ``rewind_before``); :func:`relations` those its
session decides (``compacted_by``, ``rewound_by``), from the events with their keys;
:func:`derive` does both for a loader that holds everything at once (a DuckDB query, the
BigQuery Agent Analytics rows). Column operations throughout: the only loops run over the
compaction and rewind events, never over the rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, cast

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from incidentkit.frames import TS, EventKind, text_array
from incidentkit.sources.events.adk_columns import Bools, Ints

RAW: Final = (
    "has_content",
    "error_code",
    "has_compaction",
    "compaction_start",
    "compaction_end",
    "rewind_before",
    "end_of_agent",
    "has_agent_state",
)
"""The raw fields, one per event: whether it has content parts (bool); its ``error_code``
(text); whether ``actions.compaction`` is there (bool) and its start and end (UTC times,
converted from the epoch unit of the event's own timestamp, NaT when absent);
``actions.rewind_before_invocation_id`` (text); ``actions.end_of_agent`` (bool; Java
``endOfAgent``, legacy ``endInvocation``); whether ``actions.agent_state`` is there (bool)."""
KEYS: Final = ("event_id", "app_name", "user_id", "session_id", "invocation_id", "seq", "ts")
"""The event columns :func:`relations` reads besides those :func:`kinds` gives."""
MARKERS: Final = frozenset({EventKind.COMPACTION, EventKind.REWIND, EventKind.CHECKPOINT})
"""Kinds that are ADK's bookkeeping, never a turn nor an answer (an error event is neither
either, but ADK Python's rule still makes it a final response)."""
_SESSION = ("app_name", "user_id", "session_id")
_NO_ROW = -1


def kinds(raw: Mapping[str, Any]) -> dict[str, Any]:
    """``kind``, ``compaction_start``, ``compaction_end`` and ``rewind_before`` of each event,
    from the fields of :data:`RAW` (arrays or lists of one length), as arrays.

    A compaction wins over everything, then a rewind; an event with no content parts is a
    checkpoint when it ends an agent or carries its state, else an error when it has an error
    code; everything else is a turn. The bounds are kept on compactions only, the rewound
    invocation on rewinds only.
    """
    bare = ~_flags(raw["has_content"])
    compaction = _flags(raw["has_compaction"])
    rewind_text = _text(raw["rewind_before"])
    rewind = _given(rewind_text) & ~compaction
    kind = np.full(len(bare), EventKind.TURN.value, dtype=object)
    kind[bare & _given(_text(raw["error_code"]))] = EventKind.ERROR.value
    checkpoint = _flags(raw["end_of_agent"]) | _flags(raw["has_agent_state"])
    kind[bare & checkpoint] = EventKind.CHECKPOINT.value
    kind[rewind] = EventKind.REWIND.value
    kind[compaction] = EventKind.COMPACTION.value
    return {
        "kind": text_array(kind),
        "compaction_start": _times(raw["compaction_start"]).where(compaction).array,
        "compaction_end": _times(raw["compaction_end"]).where(compaction).array,
        "rewind_before": text_array(pc.if_else(pa.array(rewind), rewind_text, None)),
    }


def is_marker(kind: Any) -> Bools:
    """Whether each of ``kind`` (the column :func:`kinds` gives) is a marker."""
    found: Bools = pd.Series(kind).isin([str(k) for k in MARKERS]).to_numpy(dtype=bool)
    return found


def relations(events: pd.DataFrame) -> dict[str, Any]:
    """``compacted_by`` and ``rewound_by`` of ``events`` (the columns of :data:`KEYS` and those
    :func:`kinds` gives; any order), as text arrays in the rows' order.

    ``compacted_by``: on an event that is no marker and whose time lies in a compaction's
    [start, end] in its session, the id of the latest (by ``seq``) such compaction.

    ``rewound_by``: on every event from the first of invocation ``rewind_before`` in the
    rewind's session up to the rewind event (excluded), by ``seq``, the rewind's id. As ADK
    reads a log (``events/_rewind_events.py``: ``_apply_rewinds``), the latest rewind is
    applied first, and a rewind that lies in a range it undid is undone with it (undoing
    nothing); a rewind whose invocation has no event before it undoes nothing.
    """
    n = len(events)
    kind = events["kind"]
    compaction = kind.eq(EventKind.COMPACTION.value).to_numpy(dtype=bool, na_value=False)
    rewind = kind.eq(EventKind.REWIND.value).to_numpy(dtype=bool, na_value=False)
    compacted = np.full(n, _NO_ROW, dtype=np.int64)
    rewound = np.full(n, _NO_ROW, dtype=np.int64)
    if compaction.any() or rewind.any():
        sessions = events["session_id"]
        rows = np.flatnonzero(sessions.isin(sessions[compaction | rewind].unique()))
        part = events.iloc[rows]  # only sessions that hold a marker are searched
        code = _session_codes(part)
        seq = part["seq"].to_numpy(dtype=np.int64)
        covered = _covered(part, code, seq, compaction[rows])
        undone = _undone(part, code, seq, rewind[rows])
        compacted[rows] = np.where(covered >= 0, rows[covered], _NO_ROW)
        rewound[rows] = np.where(undone >= 0, rows[undone], _NO_ROW)
        compacted[is_marker(kind)] = _NO_ROW
    return {
        "compacted_by": _ids(events["event_id"], compacted),
        "rewound_by": _ids(events["event_id"], rewound),
    }


def derive(frame: pd.DataFrame) -> pd.DataFrame:
    """The six columns :func:`kinds` and :func:`relations` give, from ``frame``'s fields of
    :data:`RAW` and :data:`KEYS`, in the events frame's order and on ``frame``'s index."""
    row = kinds({col: frame[col] for col in RAW})
    keyed = pd.DataFrame({col: frame[col].array for col in KEYS} | row)
    out = {**row, **relations(keyed)}
    order = ("kind", "compaction_start", "compaction_end", "compacted_by", "rewind_before")
    return pd.DataFrame({col: out[col] for col in (*order, "rewound_by")}, index=frame.index)


def _covered(part: pd.DataFrame, code: Ints, seq: Ints, compaction: Bools) -> Ints:
    """For each row of ``part``, the row of the latest compaction of its session whose
    [start, end] holds its time (-1: none). Rows are searched in (session, time) order, so
    each compaction covers one slice of them."""
    start = _nanos(part["compaction_start"])
    end = _nanos(part["compaction_end"])
    found = np.flatnonzero(compaction & (start != _NAT) & (end != _NAT))
    if not len(found):
        return np.full(len(part), _NO_ROW, dtype=np.int64)
    ts = _nanos(part["ts"])  # NaT sorts first, before any start: never covered
    order = np.lexsort((ts, code))
    codes, times = code[order], ts[order]
    found = found[np.argsort(seq[found], kind="stable")]  # the latest is painted last
    firsts = np.searchsorted(codes, code[found], "left")
    lasts = np.searchsorted(codes, code[found], "right")
    owner = np.full(len(part), _NO_ROW, dtype=np.int64)
    for row, first, last in zip(found, firsts, lasts, strict=True):
        window = times[first:last]
        lo = first + np.searchsorted(window, start[row], "left")
        hi = first + np.searchsorted(window, end[row], "right")
        owner[lo:hi] = row
    out = np.empty_like(owner)
    out[order] = owner
    return out


def _undone(part: pd.DataFrame, code: Ints, seq: Ints, rewind: Bools) -> Ints:
    """For each row of ``part``, the row of the rewind that undid it (-1: none), walking each
    session's rewinds from the latest as ADK does."""
    found = np.flatnonzero(rewind)
    owner = np.full(len(part), _NO_ROW, dtype=np.int64)
    if not len(found):
        return owner
    targets = part["rewind_before"].astype(object).to_numpy()[found]
    invocation = part["invocation_id"]
    holders = np.flatnonzero(invocation.isin(set(targets)))
    firsts = (
        pd.DataFrame(
            {
                "code": code[holders],
                "invocation": invocation.astype(object).to_numpy()[holders],
                "seq": seq[holders],
            }
        )
        .groupby(["code", "invocation"])["seq"]
        .min()
    )
    wanted = pd.MultiIndex.from_arrays([code[found], targets])
    first_seq = firsts.reindex(wanted).to_numpy(dtype=float, na_value=np.nan)
    order = np.lexsort((seq, code))
    codes, seqs = code[order], seq[order]
    floor: dict[int, float] = {}  # per session: where the walk stands (ADK's index i)
    for k in np.lexsort((-seq[found], code[found])):  # by session, the latest first
        row, first, session = found[k], first_seq[k], int(code[found[k]])
        if seq[row] >= floor.get(session, np.inf) or not first < seq[row]:
            continue  # undone by a later rewind, or nothing of its invocation precedes it
        a = np.searchsorted(codes, session, "left")
        b = np.searchsorted(codes, session, "right")
        lo = a + np.searchsorted(seqs[a:b], first, "left")
        hi = a + np.searchsorted(seqs[a:b], seq[row], "left")
        owner[order[lo:hi]] = row
        floor[session] = first
    return owner


def _session_codes(frame: pd.DataFrame) -> Ints:
    """One number per session (app, user, session) of ``frame``'s rows."""
    code = np.zeros(len(frame), dtype=np.int64)
    for col in _SESSION:
        own, uniques = pd.factorize(frame[col], use_na_sentinel=False)
        code = pd.factorize(code * len(uniques) + own)[0].astype(np.int64)
    return code


_NAT = np.iinfo(np.int64).min


def _nanos(values: Any) -> Ints:
    nanos: Ints = pd.DatetimeIndex(values).as_unit("ns").asi8
    return nanos


def _times(values: Any) -> pd.Series:
    """``values`` (UTC times, or all missing) as a ``datetime64[ns, UTC]`` series."""
    index = pd.DatetimeIndex(values)
    if index.tz is None:  # nothing but missing values (an aware time keeps its zone)
        index = index.tz_localize("UTC")
    return pd.Series(index.tz_convert("UTC").as_unit("ns"), dtype=TS)


def _flags(values: Any) -> Bools:
    if isinstance(values, np.ndarray) and values.dtype == bool:
        return values
    flags: Bools = pd.Series(values, dtype="boolean").fillna(False).to_numpy(dtype=bool)
    return flags


def _text(values: Any) -> pa.LargeStringArray:
    """Text values (a list, an array or a column; missing as None or NaN) in Arrow."""
    return pa.array(values, type=pa.large_string(), from_pandas=True)


def _given(text: pa.LargeStringArray) -> Bools:
    """Whether each text is there and not empty (ADK tests these fields for truth)."""
    lengths: Any = pc.binary_length(text)  # Any: the stubs compare no Int64Array to 0
    given: Bools = pc.fill_null(pc.greater(lengths, pa.scalar(0)), False).to_numpy(
        zero_copy_only=False
    )
    return given


def _ids(event_ids: pd.Series, rows: Ints) -> Any:
    """The event id at each of ``rows`` (missing where -1)."""
    missing = rows < 0
    if missing.all():
        return text_array(pa.nulls(len(rows), type=pa.large_string()))
    taken = cast(pa.Int64Array, pa.array(np.where(missing, 0, rows), mask=missing))
    return text_array(_text(event_ids).take(taken))
