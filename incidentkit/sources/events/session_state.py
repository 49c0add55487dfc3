"""The state a session store keeps, as the ``session_state`` frame.

A key set at ``create_session`` (or by anything else that bypasses events) has no event delta:
only the stored state shows it. Sources:

- ADK Python ``DatabaseSessionService`` (v1) and ``SqliteSessionService``: ``sessions.state``
  (session-scoped keys), ``app_states.state`` and ``user_states.state`` (keys stored without
  their ``app:``/``user:`` prefix, which is put back here, as ``get_session`` does);
- a session document (``adk run --save_session``, ADK Java ``Session.toJson()``): its merged
  ``state`` object.

Keys keep the prefix the session sees them by; ``scope`` comes from it (a ``temp:`` key in a
document is scope ``temp``: ADK Java's in-memory service keeps them). A state that is not a
JSON object is a reject naming the row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from incidentkit.frames import StateScope, build, empty
from incidentkit.manifest import Filters
from incidentkit.sources import sql
from incidentkit.sources.json_text import canonical_json, parse_json_values
from incidentkit.sources.loaded import RejectSink
from incidentkit.times import parse_utc

SESSIONS = "sessions"
APP_STATES = "app_states"
USER_STATES = "user_states"
STORE_TABLES = (SESSIONS, USER_STATES, APP_STATES)
"""ADK Python's tables of stored state (their rows say ``<table>.state`` in ``source``)."""
PREFIXES: Mapping[str, str] = {StateScope.APP: "app:", StateScope.USER: "user:"}


def scope_of(keys: pd.Series) -> pd.Series:
    """The scope of each state key, from its prefix."""
    text = keys.astype(str)
    scope = pd.Series(StateScope.SESSION.value, index=keys.index, dtype=object)
    for value, prefix in (("app", "app:"), ("user", "user:"), ("temp", "temp:")):
        scope[text.str.startswith(prefix)] = value
    return scope.astype("str")


def from_document(
    state: Any,
    *,
    app_name: str,
    user_id: str,
    session_id: str,
    updated_at: Any,
    source: str,
    location: str,
    sink: RejectSink,
    scope: StateScope | None = None,
) -> pd.DataFrame:
    """The rows of one session document's merged ``state`` (absent: none; not an object: a
    reject). ``scope`` is every key's (a store's app or user document), else each key's
    prefix says it."""
    if state is None:
        return empty("session_state")
    if not isinstance(state, dict):
        sink.add(f"{location}.state", "state is not a JSON object", canonical_json(state)[:500])
        return empty("session_state")
    keys = pd.Series(list(map(str, state)), dtype=object)
    scopes = scope_of(keys) if scope is None else pd.Series(scope.value, index=keys.index)
    stamp = _document_time(updated_at)
    return build(
        "session_state",
        {
            "app_name": [app_name] * len(keys),
            "user_id": [user_id] * len(keys),
            "session_id": [session_id] * len(keys),
            "scope": scopes,
            "key": keys,
            "value": pd.Series(list(state.values()), dtype=object),
            "source": [source] * len(keys),
            "updated_at": pd.Series([stamp] * len(keys), dtype="datetime64[ns, UTC]"),
        },
    )


def _document_time(value: Any) -> Any:
    """A session document's ``lastUpdateTime`` (epoch seconds, Java and Python alike, or a
    time already read), NaT when it has none."""
    if isinstance(value, pd.Timestamp):  # read from text already (Vertex AI's updateTime)
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        return pd.NaT
    times, _ = parse_utc(pd.Series([value], dtype=object), unit="s")
    return times.iloc[0]


def narrowed(state: pd.DataFrame, filters: Filters) -> pd.DataFrame:
    """``state`` read from files, kept to the app and sessions the filters name (a session's
    document brings its merged app and user keys along)."""
    keep = pd.Series(True, index=state.index)
    if filters.app_name is not None:
        keep &= state["app_name"].eq(filters.app_name)
    if filters.session_ids:
        keep &= state["session_id"].isin(filters.session_ids)
    return state if keep.all() else state.loc[keep].reset_index(drop=True)


def read_python_store(
    conn: Connection, filters: Filters, sink: RejectSink, *, epoch_seconds: bool, what: str
) -> pd.DataFrame:
    """The stored state of an ADK Python store: its sessions', apps' and users' rows.

    The app filter applies to all three; a session filter keeps those sessions and their
    users' state. The time window does not apply: stored state is the store's state now.
    """
    parts = []
    for table, scope in ((SESSIONS, StateScope.SESSION), (USER_STATES, StateScope.USER)):
        parts.append(_read_table(conn, table, scope, filters, sink, epoch_seconds, what))
    parts.append(_read_table(conn, APP_STATES, StateScope.APP, filters, sink, epoch_seconds, what))
    sessions = parts[0]
    if filters.session_ids:  # the (app, user) of the sessions asked for; every user else
        pairs = pd.MultiIndex.from_frame(sessions[["app_name", "user_id"]].astype(object))
        users = pd.MultiIndex.from_frame(parts[1][["app_name", "user_id"]].astype(object))
        parts[1] = parts[1].loc[users.isin(pairs)]
    kept = [part for part in parts if not part.empty]
    if not kept:
        return empty("session_state")
    return build("session_state", pd.concat(kept, ignore_index=True))


_COLUMNS: Mapping[str, Sequence[str]] = {
    SESSIONS: ("app_name", "user_id", "id", "state", "update_time"),
    USER_STATES: ("app_name", "user_id", "state", "update_time"),
    APP_STATES: ("app_name", "state", "update_time"),
}


def _read_table(
    conn: Connection,
    table: str,
    scope: StateScope,
    filters: Filters,
    sink: RejectSink,
    epoch_seconds: bool,
    what: str,
) -> pd.DataFrame:
    info = sql.inspect_table(conn, table, what=what)
    if info is None or any(col not in info.columns for col in _COLUMNS[table]):
        return empty("session_state")  # a store without it holds no state of that scope
    clause = info.clause
    names = _COLUMNS[table]
    session_filter = "id" if table == SESSIONS else None
    conditions = sql.where(
        conn,
        Filters(app_name=filters.app_name, session_ids=filters.session_ids),
        sql.Predicates(app_name="app_name", session_id=session_filter),
        info,
    )
    statement = sa.select(*(sql.column(clause, name) for name in names)).where(*conditions)
    frame = sql.read_frame(conn, statement, what=f"{what} ({table})").reindex(columns=list(names))
    if frame.empty:
        return empty("session_state")
    states, reasons = parse_json_values(frame["state"])
    where = _locations(frame, table)
    not_object = reasons.isna() & ~states.map(lambda v: isinstance(v, dict)).astype(bool)
    reasons = reasons.where(~not_object, "state is not a JSON object")
    bad = reasons.notna()
    for location, reason, raw in zip(where[bad], reasons[bad], frame["state"][bad], strict=True):
        sink.add(f"{location}.state", f"unreadable state: {reason}", str(raw)[:500])
    good = frame.loc[~bad]
    if good.empty:
        return empty("session_state")
    times, _ = (
        parse_utc(good["update_time"], unit="s")
        if epoch_seconds
        else parse_utc(good["update_time"], naive="utc")
    )
    prefix = PREFIXES.get(scope, "")
    rows = pd.DataFrame(
        {
            "row": good.index.repeat([len(s) for s in states[~bad]]),
            "key": [prefix + str(k) for s in states[~bad] for k in s],
            "value": pd.Series([v for s in states[~bad] for v in s.values()], dtype=object),
        }
    )
    rows = rows.join(good[[c for c in ("app_name", "user_id", "id") if c in good]], on="row")
    return build(
        "session_state",
        {
            "app_name": rows["app_name"],
            "user_id": rows.get("user_id"),
            "session_id": rows.get("id"),
            "scope": scope.value,
            "key": rows["key"],
            "value": rows["value"],
            "source": f"{table}.state",
            "updated_at": times.reindex(rows["row"]).reset_index(drop=True),
        },
    )


def _locations(frame: pd.DataFrame, table: str) -> pd.Series:
    ids = frame["app_name"].astype(str)
    for col in ("user_id", "id"):
        if col in frame:
            ids = ids + "/" + frame[col].astype(str)
    return table + ":" + ids
