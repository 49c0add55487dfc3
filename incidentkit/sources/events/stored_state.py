"""The state documents of ADK Python's key-value session stores (MongoDB, Redis) as
``session_state`` rows, narrowed by the manifest's filters as ADK Python's database stores are
(:func:`.session_state.read_python_store`).

Both stores keep a session's own keys in its document and the ``app:``/``user:`` keys in
documents of their own, stored without the prefix; the rows put the prefix back, as
``get_session`` does when it merges them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from incidentkit.frames import StateScope, build, empty
from incidentkit.manifest import Filters
from incidentkit.sources.events import session_state
from incidentkit.sources.loaded import RejectSink


def rows(
    state: Any,
    *,
    app_name: str,
    user_id: str,
    session_id: str,
    scope: StateScope | None,
    updated_at: Any,
    source: str,
    location: str,
    sink: RejectSink,
) -> pd.DataFrame:
    """The rows of one stored state object: an app's or a user's (``scope``: its keys get their
    prefix back), or a session's (None: each key's prefix says its scope)."""
    if scope is not None and isinstance(state, dict):
        prefix = session_state.PREFIXES[scope]
        state = {prefix + str(key): value for key, value in state.items()}
    frame = session_state.from_document(
        state,
        app_name=app_name,
        user_id=user_id,
        session_id=session_id,
        updated_at=updated_at,
        source=source,
        location=location,
        sink=sink,
        scope=scope,
    )
    if scope is not None:  # null where the row names no user or session, as a database's
        frame["session_id"] = pd.Series(pd.NA, index=frame.index, dtype=frame["session_id"].dtype)
        if scope is StateScope.APP:
            frame["user_id"] = pd.Series(pd.NA, index=frame.index, dtype=frame["user_id"].dtype)
    return frame


def scoped_rows(
    state: Any,
    scope: StateScope,
    *,
    app_name: str,
    user_id: str,
    source: str,
    location: str,
    sink: RejectSink,
) -> pd.DataFrame:
    """The rows of an app's or a user's state object (no session, no time of its own)."""
    return rows(
        state,
        app_name=app_name,
        user_id=user_id,
        session_id="",
        scope=scope,
        updated_at=None,
        source=source,
        location=location,
        sink=sink,
    )


def combined(parts: Iterable[pd.DataFrame], filters: Filters) -> pd.DataFrame:
    """The rows of ``parts`` as one frame, narrowed like an ADK Python database store: the app
    filter keeps that app's rows; a session filter keeps those sessions, their users' state
    and the app state (the time window does not apply: stored state is the store's now)."""
    kept = [part for part in parts if not part.empty]
    if not kept:
        return empty("session_state")
    state = build("session_state", pd.concat(kept, ignore_index=True))
    keep = pd.Series(True, index=state.index)
    if filters.app_name is not None:
        keep &= state["app_name"].eq(filters.app_name)
    if filters.session_ids:  # a session's rows name it; a user's name no session; an app's neither
        shared = state["session_id"].isna()
        chosen = state["session_id"].isin(filters.session_ids)
        pairs = pd.MultiIndex.from_frame(state.loc[chosen, ["app_name", "user_id"]].astype(object))
        owners = pd.MultiIndex.from_frame(state[["app_name", "user_id"]].astype(object))
        users = shared & state["user_id"].notna() & owners.isin(pairs)
        keep &= chosen | users | (shared & state["user_id"].isna())
    return state if keep.all() else state.loc[keep].reset_index(drop=True)
