"""The session dump: one line per stored event of a session, read before forming a
theory — time, invocation, author, the function calls and responses it carries, its state
delta's keys, its transfer, its error code, and whether it is a final response.

The seed dumps a session from an admin endpoint of the live service; this is the same view,
offline and after the fact, from whatever event store the manifest names.

ADK 2.x appends markers to the same log (``events.kind``): each is labelled for what it is,
never shown as an empty user turn. A compaction with the span of event times it summarises and
the events it covers (those whose ``compacted_by`` is its id), a rewind with the invocations it
undid, a checkpoint of a resumable app with its agent, an error event with no content with its
code; an event a rewind undid carries that rewind's id (``rewound_by``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from incidentkit.flows._frames import as_columns, per_group
from incidentkit.flows._markers import MARKER_KINDS, turns
from incidentkit.flows.vanished_state.state import unknown_session
from incidentkit.frames import BOOL, INT, OBJ, STR, TS, EventKind
from incidentkit.times import iso_utc

DUMP_COLUMNS: Mapping[str, str] = {
    "ts": TS,
    "seq": INT,
    "event_id": STR,
    "invocation_id": STR,
    "author": STR,
    "calls": OBJ,
    "responses": OBJ,
    "delta": OBJ,
    "transfer": STR,
    "error_code": STR,
    "final": BOOL,
    "partial": BOOL,
    "kind": STR,
    "label": STR,
    "compacted_by": STR,
    "rewound_by": STR,
}
"""One row per event in session order; ``calls``, ``responses`` and ``delta`` are tuples of
function names and state keys (a removed key keeps its name, as the stored delta does).
``kind`` is the event's (``turn``, ``compaction``, ``rewind``, ``checkpoint``, ``error``);
``label`` says what an event that is no turn is, in words (missing on a turn);
``compacted_by`` and ``rewound_by`` name the compaction that covers it and the rewind that
undid it."""


def _names(values: pd.Series, keys: pd.Series, events: pd.Series) -> np.ndarray:
    """Per event (in ``events`` order), the tuple of ``values`` stored under it."""
    grouped = per_group(values, keys)
    out = np.empty(len(events), dtype=object)
    out[:] = [grouped.get(event, ()) for event in events]
    return out


def session_dump(
    events: pd.DataFrame,
    calls: pd.DataFrame,
    responses: pd.DataFrame,
    state_writes: pd.DataFrame,
    session_id: str,
) -> pd.DataFrame:
    """The dump of ``session_id`` (see :data:`DUMP_COLUMNS`); a session the events do not
    hold is a ParameterError naming how many sessions they do hold, and a few of them."""
    mine = events.loc[events["session_id"].eq(session_id)].sort_values("seq", kind="stable")
    if mine.empty:
        raise unknown_session(session_id, events["session_id"], where="no stored event has it")
    ids = mine["event_id"]
    own_calls = calls.loc[calls["session_id"].eq(session_id)]
    own_responses = responses.loc[responses["session_id"].eq(session_id)]
    own_writes = state_writes.loc[state_writes["session_id"].eq(session_id)]
    dump = pd.DataFrame(
        {
            "ts": mine["ts"],
            "seq": mine["seq"],
            "event_id": ids,
            "invocation_id": mine["invocation_id"],
            "author": mine["author"],
            "calls": _names(own_calls["name"], own_calls["event_id"], ids),
            "responses": _names(own_responses["name"], own_responses["event_id"], ids),
            "delta": _names(own_writes["key"], own_writes["event_id"], ids),
            "transfer": mine["transfer_to_agent"],
            "error_code": mine["error_code"],
            "final": mine["final_response"],
            "partial": mine["partial"],
            "kind": mine["kind"].fillna(EventKind.TURN.value) if "kind" in mine else "turn",
            "label": labels(mine),
            "compacted_by": mine.get("compacted_by"),
            "rewound_by": mine.get("rewound_by"),
        }
    )
    return as_columns(dump, DUMP_COLUMNS)


def _in_span(times: pd.Series, compactions: pd.DataFrame) -> np.ndarray:
    """How many of ``times`` lie in each compaction's [start, end] (the events it
    summarised: ADK hands its summariser every event of the span but earlier summaries)."""
    sorted_times = np.sort(times.dropna().to_numpy(dtype="datetime64[ns]"))
    start = compactions["compaction_start"].to_numpy(dtype="datetime64[ns]")
    end = compactions["compaction_end"].to_numpy(dtype="datetime64[ns]")
    found: np.ndarray = np.searchsorted(sorted_times, end, "right") - np.searchsorted(
        sorted_times, start, "left"
    )
    return np.where(np.isnat(start) | np.isnat(end), 0, found)


def _clock(times: pd.Series) -> pd.Series:
    """``14:00:01.000Z`` (``?Z`` when missing)."""
    return iso_utc(times, date=False).fillna("?Z")


def labels(events: pd.DataFrame) -> pd.Series:
    """What each of one session's ``events`` that is no turn is, in words (missing on a turn):

    - ``compaction of 14:00:01.000Z–14:00:09.500Z: 6 event(s) covered (a summary ADK wrote,
      not a turn)``;
    - ``rewind undoing invocation(s) e-2, e-3 (rewind_before_invocation_id e-2; not a user
      turn)``, or ``... undid nothing ...`` when no event of that invocation precedes it;
    - ``checkpoint of agent checkout (end_of_agent / agent_state; not a turn)``;
    - ``error with no content: TimeoutError from cashier_agent``.
    """
    out = pd.Series(pd.NA, index=events.index, dtype=STR)
    if "kind" not in events:
        return out
    kind = events["kind"].fillna(EventKind.TURN.value)
    author = events["author"].fillna("?")
    compaction = kind.eq(EventKind.COMPACTION.value)
    if compaction.any():
        part = events.loc[compaction]
        summarised = pd.Series(_in_span(events.loc[~compaction, "ts"], part), index=part.index)
        covered = part["event_id"].map(events["compacted_by"].value_counts()).fillna(0)
        covered = covered.astype(int)
        count = summarised.astype(str) + " event(s) summarised"
        count += (", " + covered.astype(str) + " covered (a later summary covers the rest; "
                  ).where(covered.ne(summarised), " and covered (")  # fmt: skip
        out[compaction] = (
            "compaction of " + _clock(part["compaction_start"]) + "–"
            + _clock(part["compaction_end"]) + ": " + count + "a summary ADK wrote, not a turn)"
        )  # fmt: skip
    rewind = kind.eq(EventKind.REWIND.value)
    if rewind.any():
        undone = turns(events).dropna(subset=["rewound_by"])
        undone = undone.sort_values("seq", kind="stable").drop_duplicates(
            ["rewound_by", "invocation_id"]
        )
        undid = per_group(undone["invocation_id"].fillna("?"), undone["rewound_by"], sep=", ")
        part = events.loc[rewind]
        named = part["event_id"].map(undid).astype(STR)
        before = part["rewind_before"].fillna("?")
        out[rewind] = (
            ("rewind undoing invocation(s) " + named).fillna("rewind that undid nothing")
            + " (rewind_before_invocation_id " + before + "; not a user turn)"
        )  # fmt: skip
    checkpoint = kind.eq(EventKind.CHECKPOINT.value)
    out[checkpoint] = (
        "checkpoint of agent " + author[checkpoint] + " (end_of_agent / agent_state; not a turn)"
    )
    error = kind.eq(EventKind.ERROR.value)
    out[error] = (
        "error with no content: " + events.loc[error, "error_code"].fillna("?") + " from "
        + author[error]
    )  # fmt: skip
    return out


def _listed(values: pd.Series) -> pd.Series:
    return values.map(lambda names: "[" + ", ".join(map(str, names)) + "]")


def dump_text(dump: pd.DataFrame) -> str:
    """The dump as the seed prints it, one line per event:
    ``<UTC time> inv=... author=... calls=[...] responses=[...] delta=[...] transfer=...
    err=... final=true|false``, and ``partial=true`` on a partial (streamed) event, which an
    event log written by a plugin may hold and ADK never appends; a missing value reads ``-``.
    A marker's line (a compaction, a rewind, a checkpoint) is ``<UTC time> inv=... <label>``
    and its delta when it has one; an error event with no content gets its label after the
    line; an event a rewind undid ends with ``rewound_by=<the rewind's event id>``."""
    if dump.empty:
        return ""
    head = iso_utc(dump["ts"]).fillna("-") + " inv=" + dump["invocation_id"].fillna("-")
    lines = (
        head
        + " author="
        + dump["author"].fillna("-")
        + " calls="
        + _listed(dump["calls"])
        + " responses="
        + _listed(dump["responses"])
        + " delta="
        + _listed(dump["delta"])
        + " transfer="
        + dump["transfer"].fillna("-")
        + " err="
        + dump["error_code"].fillna("-")
        + " final="
        + dump["final"].map({True: "true", False: "false"})
        + dump["partial"].map({True: " partial=true", False: ""})  # never stored by ADK
        + (" (" + dump["label"] + ")").where(dump["kind"].eq(EventKind.ERROR.value), "")
    )
    marker = dump["kind"].isin(MARKER_KINDS).to_numpy(dtype=bool)
    delta = (" delta=" + _listed(dump["delta"])).where(dump["delta"].map(len).gt(0), "")
    lines[marker] = (head + " " + dump["label"].fillna(dump["kind"]) + delta)[marker]
    lines += (" rewound_by=" + dump["rewound_by"]).fillna("")
    return "\n".join(lines) + "\n"
