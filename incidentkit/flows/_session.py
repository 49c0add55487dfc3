"""What the one-session flows (``vanished_state``, ``session``) share: the session a user names,
found in the evidence with its app and user, and the evidence read over its whole history."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING

import pandas as pd

from incidentkit.coverage import require_named
from incidentkit.errors import ParameterError
from incidentkit.evidence import Evidence
from incidentkit.flows.common import begin, opened, up_to
from incidentkit.flows.settings import Found
from incidentkit.frames import empty
from incidentkit.manifest import EARLIEST, Filters, Window

if TYPE_CHECKING:  # the flow's package imports this module: its state is imported when used
    from incidentkit.flows.vanished_state.state import SessionRef


def open_session(
    flow: str,
    evidence: Evidence | str | os.PathLike[str],
    *,
    session_id: str,
    app_name: str = "",
    user_id: str = "",
    as_of: object = "",
) -> tuple[Evidence, SessionRef, Found]:
    """The incident narrowed to the session's app (its window up to ``as_of``: the manifest's
    window end, else the evidence's last record: :func:`~incidentkit.flows.common.judge`);
    the session; what was found (the app, ``as_of``, ``session_id``, ``user_id``) and where
    each came from."""
    incident = opened(flow, evidence, as_of=as_of)
    ref = find_session(incident, session_id, app_name=app_name, user_id=user_id)
    incident, found = begin(flow, incident, app_name=ref.app_name, as_of=as_of)
    assert found.as_of is not None  # begin judges it
    incident = up_to(incident, found.as_of)
    user_from = "parameter" if user_id and user_id.strip() else "the session's events"
    found = replace(
        found,
        app_from=found.app_from if app_name and app_name.strip() else "the session's events",
        more={"session_id": (ref.session_id, "parameter"), "user_id": (ref.user_id, user_from)},
    )
    return incident, ref, found


def history(evidence: Evidence, as_of: pd.Timestamp, *, session_id: str | None = None) -> Evidence:
    """``evidence`` read from the start of its history up to ``as_of`` (a session may have
    started before the incident window), narrowed to ``session_id`` when given."""
    whole = Window(EARLIEST, as_of + pd.Timedelta(microseconds=1))
    filters = replace(evidence.filters, window=whole)
    if session_id is not None:
        filters = replace(filters, session_ids=(session_id,))
    return evidence.narrowed(filters)


def incident_window(
    evidence: Evidence, as_of: pd.Timestamp
) -> tuple[pd.Timestamp, pd.Timestamp] | None:
    """The manifest's own window cut at ``as_of`` (what a one-session flow's findings record:
    its reading starts earlier, at the session's history)."""
    window = evidence.manifest.filters.window
    return None if window is None else (window.start, min(window.end, as_of))


def find_session(
    evidence: Evidence, session_id: str, *, app_name: str = "", user_id: str = ""
) -> SessionRef:
    """The session ``session_id`` names, read from the event log and the stored state of that
    session alone (no window: it may have started before the incident), else the ledger."""
    from incidentkit.flows.vanished_state.state import resolve_session

    if not isinstance(session_id, str) or not session_id.strip():
        return resolve_session(empty("events"), empty("session_state"), str(session_id or ""))
    if not evidence.has("events"):
        raise ParameterError(
            "the manifest names no event log: a session's events and state come from [events]",
            value=str(evidence.manifest.path or "<manifest>"),
            fix="add an [events] section pointing at the session store or the event log "
            "(docs/manifest.md)",
        )
    probe = evidence.narrowed(Filters(session_ids=(session_id.strip(),)))
    events, stored = probe.frame("events"), probe.frame("session_state")
    if events.empty and stored.empty and probe.has("ledger"):
        runs = probe.runs
        events = empty("events") if runs.empty else runs[["app_name", "user_id", "session_id"]]
    if events.empty and stored.empty:  # named nowhere: the sessions held, the closest one
        require_named(
            probe,
            "session_id",
            [session_id.strip()],
            fix="give -p session_id with a session the evidence holds (incidentkit session "
            "--help; the ledger's and the event log's session_id column)",
        )
    if events.empty and stored.empty:  # named, but not in the events: read them all
        every = evidence.narrowed(Filters())
        events, stored = every.frame("events"), every.frame("session_state")
    return resolve_session(events, stored, session_id, app_name=app_name, user_id=user_id)
