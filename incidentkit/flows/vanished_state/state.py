"""One session's state: its stored deltas replayed as ADK applies them, beside the state the
store keeps.

ADK applies an event's ``stateDelta`` when the event is appended: a partial (streamed) event is
not appended at all, a ``temp:`` key is skipped, a removal (ADK Java's sentinel, a JSON null)
deletes the key. ``app:`` keys are shared by every session of the app and ``user:`` keys by
every session of the user, so their writes come from those sessions too, in time order.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pandas as pd

from incidentkit.errors import ParameterError
from incidentkit.frames import EventKind, StateScope
from incidentkit.manifest import did_you_mean

WRITE_COLUMNS = ["event_id", "session_id", "invocation_id", "seq", "ts", "author", "tool"]
REPLAYED_COLUMNS = ["key", "scope", "value", "stored_value", "matches", "stored_in", "origin"]


@dataclass(frozen=True)
class SessionRef:
    """The session a replay is for: its app, its user and its id."""

    app_name: str
    user_id: str
    session_id: str


def resolve_session(
    events: pd.DataFrame,
    stored: pd.DataFrame,
    session_id: str,
    *,
    app_name: str = "",
    user_id: str = "",
) -> SessionRef:
    """The session ``session_id`` names, its app and user read off its events (else its stored
    state); a given ``app_name``/``user_id`` must agree. An unknown session is a
    ParameterError naming how many sessions the evidence holds."""
    if not isinstance(session_id, str) or not session_id.strip():
        raise ParameterError(
            "session_id is empty",
            value=session_id,
            fix="give the session the customer used, e.g. -p session_id <id> "
            "(incidentkit session --help; the ledger's and the event log's session_id column)",
        )
    sid = session_id.strip()
    for frame in (events, stored):
        mine = frame.loc[frame["session_id"].eq(sid), ["app_name", "user_id"]].dropna()
        if mine.empty:
            continue
        app, user = str(mine["app_name"].iloc[0]), str(mine["user_id"].iloc[0])
        for name, given, found in (("app_name", app_name, app), ("user_id", user_id, user)):
            if given and given.strip() and given.strip() != found:
                raise ParameterError(
                    f"session {sid} belongs to {name} {found!r}, not to the one given",
                    value=given.strip(),
                    fix=f"drop the {name} parameter (the session names it) or give {found!r}",
                )
        return SessionRef(app, user, sid)
    raise unknown_session(
        sid,
        pd.concat([events["session_id"], stored["session_id"]]),
        where="neither the event log nor the stored state holds it",
    )


def unknown_session(session_id: str, held: pd.Series, *, where: str) -> ParameterError:
    """The error for a session the evidence does not hold: how many it holds, a few of them."""
    ids = sorted(map(str, held.dropna().unique()))
    examples = f", e.g. {', '.join(ids[:3])}" if ids else ""
    return ParameterError(
        f"no such session: {where}; the evidence holds {len(ids)} session(s){examples}",
        value=session_id,
        fix=f"{did_you_mean([session_id], ids)}check the id (copy it from the ledger or the "
        "event log), the manifest's app_name and window, and that [events] points at the "
        "session store the app used",
    )


MARKER_COLUMNS = {"kind": EventKind.TURN.value, "rewound_by": None, "rewind_before": None}
"""What :func:`visible_writes` adds of the writing event (its default on a frame without it):
its ``kind`` (a rewind's delta is ``rewind``), the rewind that undid it, the invocation a
rewind rewound to before."""


def visible_writes(
    writes: pd.DataFrame, events: pd.DataFrame, responses: pd.DataFrame, ref: SessionRef
) -> pd.DataFrame:
    """Every stored write the session sees, in the order ADK applied them: its own keys' and
    the ``app:``/``user:`` keys its app's and its user's sessions wrote. Adds ``tool`` (the
    function whose response carried the delta, if one did), ``user_id`` and the writing
    event's :data:`MARKER_COLUMNS`."""
    sessions = events.drop_duplicates("session_id").set_index("session_id")
    app = writes["session_id"].map(sessions["app_name"]).eq(ref.app_name)
    owner = writes["session_id"].map(sessions["user_id"])
    scope = writes["scope"]
    mine = writes["session_id"].eq(ref.session_id)
    shared = app & (scope.eq(StateScope.APP) | (scope.eq(StateScope.USER) & owner.eq(ref.user_id)))
    seen = writes.loc[mine | shared.fillna(False).astype(bool)].copy()
    seen["user_id"] = owner.loc[seen.index]
    tools = responses.drop_duplicates("event_id").set_index("event_id")["name"]
    seen["tool"] = seen["event_id"].map(tools).astype("str")
    by_event = events.drop_duplicates("event_id").set_index("event_id")
    for column, default in MARKER_COLUMNS.items():
        found = seen["event_id"].map(by_event[column]) if column in by_event else None
        filled = found if found is not None else pd.Series(None, index=seen.index, dtype=object)
        seen[column] = (filled.fillna(default) if default is not None else filled).astype("str")
    ordered = seen.sort_values(["ts", "session_id", "seq"], kind="stable")
    return ordered.reset_index(drop=True)


def replay(writes: pd.DataFrame) -> pd.DataFrame:
    """The state the ``writes`` (from :func:`visible_writes`) leave, as ADK applies them: one
    row per key still set, with the write that set it (partial and ``temp:`` writes
    skipped; a removal deletes)."""
    applied = writes.loc[~writes["partial"] & writes["scope"].ne(StateScope.TEMP)]
    last = applied.drop_duplicates("key", keep="last")
    kept = last.loc[~last["removed"]]
    return kept[["key", "scope", "value", *WRITE_COLUMNS]].reset_index(drop=True)


def stored_state(stored: pd.DataFrame, ref: SessionRef) -> pd.DataFrame:
    """The stored state the session sees: its own keys, its user's and its app's, one row per
    key (the latest, where sources overlap)."""
    scope = stored["scope"]
    app = stored["app_name"].eq(ref.app_name)
    own = stored["session_id"].eq(ref.session_id)
    here = own | stored["session_id"].isna()
    user = stored["user_id"].eq(ref.user_id)
    visible = app & (
        (own & scope.isin([StateScope.SESSION, StateScope.TEMP]))
        | (scope.eq(StateScope.USER) & user & here)
        | (scope.eq(StateScope.APP) & here)
    )
    mine = stored.loc[visible.fillna(False).astype(bool)]
    latest = mine.sort_values("updated_at", kind="stable", na_position="first")
    return latest.drop_duplicates("key", keep="last").reset_index(drop=True)


def compare(
    replayed: pd.DataFrame,
    stored: pd.DataFrame,
    *,
    store_keeps_state: bool,
    written: Iterable[str] = (),
) -> pd.DataFrame:
    """Replayed beside stored, one row per key either names (:data:`REPLAYED_COLUMNS`).

    A stored key no delta in ``written`` names started the replay (state given to
    ``create_session`` has no delta; ``origin`` says so). ``matches`` is None when the store
    keeps no state (an event log alone); a stored null is an absent key (ADK Python keeps a
    key set to None, the removal its delta recorded).
    """
    left = replayed.set_index("key")
    right = stored.set_index("key")
    named = set(written)
    keys = list(dict.fromkeys([*left.index, *right.index]))
    rows = []
    for key in keys:
        held = right["value"].get(key)
        scope = left["scope"].get(key, right["scope"].get(key))
        if key in left.index:
            value, origin = left["value"].get(key), "event delta"
        elif key in named:
            value, origin = None, "event delta (removed or never applied)"
        else:
            value, origin = held, "stored without a delta (create_session state)"
        same = _same(value, held) if store_keeps_state else None
        where = right["source"].get(key) if key in right.index else None
        rows.append((key, scope, value, held, same, where, origin))
    frame = pd.DataFrame(rows, columns=REPLAYED_COLUMNS)
    return frame.astype({"value": object, "stored_value": object, "matches": object})


def _same(value: object, held: object) -> bool:
    return bool(value == held) if value is not None and held is not None else value is held
