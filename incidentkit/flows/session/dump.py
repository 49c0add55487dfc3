"""The session dump: one line per stored event of a session, read before forming a
theory — time, invocation, author, the function calls and responses it carries, its state
delta's keys, its transfer, its error code, and whether it is a final response.

The seed dumps a session from an admin endpoint of the live service; this is the same view,
offline and after the fact, from whatever event store the manifest names.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from incidentkit.flows._frames import as_columns, per_group
from incidentkit.flows.vanished_state.state import unknown_session
from incidentkit.frames import BOOL, INT, OBJ, STR, TS

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
}
"""One row per event in session order; ``calls``, ``responses`` and ``delta`` are tuples of
function names and state keys (a removed key keeps its name, as the stored delta does)."""


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
        }
    )
    return as_columns(dump, DUMP_COLUMNS)


def _listed(values: pd.Series) -> pd.Series:
    return values.map(lambda names: "[" + ", ".join(map(str, names)) + "]")


def dump_text(dump: pd.DataFrame) -> str:
    """The dump as the seed prints it, one line per event:
    ``<UTC time> inv=... author=... calls=[...] responses=[...] delta=[...] transfer=...
    err=... final=true|false``, and ``partial=true`` on a partial (streamed) event, which an
    event log written by a plugin may hold and ADK never appends; a missing value reads ``-``."""
    if dump.empty:
        return ""
    stamps = dump["ts"].dt.strftime("%Y-%m-%dT%H:%M:%S.%f").str[:-3] + "Z"
    lines = (
        stamps.fillna("-")
        + " inv="
        + dump["invocation_id"].fillna("-")
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
    )
    return "\n".join(lines) + "\n"
