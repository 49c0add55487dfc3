"""The vanished-state flow's steps: what its notebook's cells call, one call per cell."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pandas as pd

from incidentkit.evidence import Evidence
from incidentkit.findings import Findings
from incidentkit.flows import evidence_limits
from incidentkit.flows._session import history, incident_window, open_session
from incidentkit.flows.common import findings_context, frames_of, notes_view
from incidentkit.flows.evidence_limits import with_limits
from incidentkit.flows.settings import resolve
from incidentkit.flows.vanished_state.findings import vanished_state_findings
from incidentkit.flows.vanished_state.flow import FLOW as DECLARED
from incidentkit.flows.vanished_state.settings import VanishedSettings
from incidentkit.flows.vanished_state.triage import VanishedReport, triage_vanished_state

FLOW = "vanished_state"
SECTIONS = DECLARED.sections


def setup(
    evidence: Evidence | str | os.PathLike[str],
    *,
    session_id: str = "",
    keys: list[str] | str | None = None,
    app_name: str = "",
    user_id: str = "",
    as_of: object = "",
) -> tuple[Evidence, VanishedSettings]:
    """The incident narrowed to the session's app and read over its whole history up to
    ``as_of`` (``app:``/``user:`` keys come from other sessions too), and the flow's settings.
    ``session_id`` is required; the app and the user come from the session's events when not
    given."""
    incident, _, found = open_session(
        FLOW, evidence, session_id=session_id, app_name=app_name, user_id=user_id, as_of=as_of
    )
    settings = resolve(VanishedSettings, incident, found, keys=keys)
    return history(incident, settings.as_of), settings


def triage(evidence: Evidence, settings: VanishedSettings) -> VanishedReport:
    """The flow on the session: verdicts, replay, overlapping invocations. On events that keep
    no state deltas (a Firestore export) the verdicts and the replay are withheld, and the
    notes open with why."""
    report = triage_vanished_state(
        frames_of(evidence, DECLARED.reads),
        settings.session_id,
        as_of=settings.as_of,
        keys=settings.keys,
        app_name=settings.app_name,
        user_id=settings.user_id,
    )
    limited = evidence_limits.note(evidence, FLOW)
    if limited is None:
        return report
    return replace(
        report,
        keys=report.keys.iloc[0:0],
        replayed=report.replayed.iloc[0:0],
        notes=(limited, *report.notes),
    )


def findings(report: VanishedReport, evidence: Evidence, settings: VanishedSettings) -> Findings:
    """The flow's findings, with the incident's title, window, settings and rejects."""
    context = findings_context(evidence, settings, SECTIONS)
    context["window"] = incident_window(evidence, settings.as_of)
    return with_limits(vanished_state_findings(report, **context), evidence)


SHOWN: Mapping[str, tuple[str, ...]] = {
    "keys": ("key", "verdict", "cause", "value", "why", "fix"),
    "writes": (
        *("ts", "session_id", "invocation_id", "author", "tool", "key", "value"),
        *("removed", "partial", "kind", "rewound_by"),
    ),
    "replayed": ("key", "scope", "value", "stored_value", "matches", "stored_in", "origin"),
    "overlaps": ("invocation_a", "a_start", "a_end", "invocation_b", "b_start", "b_end", "source"),
    "ranges": ("invocation_id", "start", "end", "source"),
}
"""The columns each view shows in the report; findings.json keeps every contract column."""


def table(report: VanishedReport, view: str) -> Any:
    """One view of the report (``"keys"``, ``"writes"``, ``"replayed"``, ``"overlaps"``,
    ``"ranges"``) for people."""
    from incidentkit.report import table as people_table

    frame: pd.DataFrame = getattr(report, view)
    shown = list(SHOWN[view])
    if view == "writes" and len(set(frame["session_id"])) <= 1:
        shown.remove("session_id")  # one session: the column would repeat its id
    if view == "writes" and frame["kind"].eq("turn").all() and frame["rewound_by"].isna().all():
        shown = [c for c in shown if c not in ("kind", "rewound_by")]  # no marker: turns only
    if view == "replayed" and not report.store_keeps_state:
        shown = [c for c in shown if c not in ("stored_value", "matches", "stored_in")]
    return people_table(frame, shown)


def notes(report: VanishedReport) -> Any:
    """What the flow cannot tell from the sources present, as Markdown."""
    return notes_view(report.notes)
