"""The session flow's steps: what its notebook's cells call, one call per cell."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from incidentkit.evidence import Evidence
from incidentkit.findings import Findings
from incidentkit.flows import evidence_limits
from incidentkit.flows._session import history, incident_window, open_session
from incidentkit.flows.common import findings_context, frames_of, notes_view
from incidentkit.flows.evidence_limits import with_limits
from incidentkit.flows.session.findings import session_findings
from incidentkit.flows.session.flow import FLOW as DECLARED
from incidentkit.flows.session.settings import SessionSettings
from incidentkit.flows.session.swimlane import plot_session
from incidentkit.flows.session.triage import SessionReport, triage_session
from incidentkit.flows.settings import resolve
from incidentkit.flows.vanished_state.state import SessionRef
from incidentkit.manifest import Window
from incidentkit.plotting import Picture, show

FLOW = "session"
SECTIONS = DECLARED.sections


def setup(
    evidence: Evidence | str | os.PathLike[str],
    *,
    session_id: str = "",
    app_name: str = "",
    user_id: str = "",
    as_of: object = "",
) -> tuple[Evidence, SessionSettings]:
    """The incident narrowed to the session's app and read over its whole history up to
    ``as_of``, and the flow's settings. ``session_id`` is required; the app and the user come
    from the session's events when not given."""
    incident, _, found = open_session(
        FLOW, evidence, session_id=session_id, app_name=app_name, user_id=user_id, as_of=as_of
    )
    settings = resolve(SessionSettings, incident, found)
    return history(incident, settings.as_of), settings


def triage(evidence: Evidence, settings: SessionSettings) -> SessionReport:
    """The flow on the session: its dump, the errors around it, its swimlane's rows."""
    ref = SessionRef(settings.app_name, settings.user_id, settings.session_id)
    span = incident_window(evidence, settings.as_of)
    report = triage_session(
        frames_of(evidence, DECLARED.reads),
        ref,
        as_of=settings.as_of,
        window=None if span is None else Window(*span),
    )
    limited = evidence_limits.note(evidence, FLOW)
    return report if limited is None else replace(report, notes=(limited, *report.notes))


def findings(report: SessionReport, evidence: Evidence, settings: SessionSettings) -> Findings:
    """The flow's findings, with the incident's title, window, settings and rejects."""
    context = findings_context(evidence, settings, SECTIONS)
    context["window"] = incident_window(evidence, settings.as_of)
    return with_limits(session_findings(report, **context), evidence)


SHOWN: Mapping[str, tuple[str, ...]] = {
    "errors": (
        *("ts", "kind", "agent", "tool", "error_code", "message", "invocation_id"),
        *("run_outcome", "in_session"),
    ),
    "quiet": ("ts", "kind", "agent", "error_code", "message", "invocation_id", "location"),
    "counts": ("kind", "agent", "tool", "errors", "invocations"),
    "overlaps": ("invocation_a", "a_start", "a_end", "invocation_b", "b_start", "b_end", "source"),
    "ranges": ("invocation_id", "start", "end", "source"),
}
"""The columns each view shows in the report; findings.json keeps every contract column."""


def table(report: SessionReport, view: str) -> Any:
    """One view of the report (``"errors"``, ``"quiet"``, ``"counts"``, ``"overlaps"``,
    ``"ranges"``) for people."""
    from incidentkit.report import table as people_table

    return people_table(getattr(report, view), SHOWN[view])


def dump(report: SessionReport) -> None:
    """Print the session dump, one line per event, as a session-dump admin endpoint does."""
    print(report.text or f"(session {report.ref.session_id} has no stored event)", end="")


def swimlane(report: SessionReport) -> Picture:
    """The session's swimlane, overlapping invocations in red (and zoomed on, when any)."""
    return show(plot_session(report.session, report.ranges, report.overlaps))


def notes(report: SessionReport) -> Any:
    """What the flow cannot tell from the sources present, as Markdown."""
    return notes_view(report.notes)
