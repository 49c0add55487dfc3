"""The orphan flow's steps: what its notebook's cells call, one call per cell.

Each step applies the pure triage (:mod:`.triage`) to one incident's Evidence, with the
notebook's parameters resolved (:mod:`incidentkit.flows.common`), and fills in the findings'
provenance (title, window, rejects).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pandas as pd

from incidentkit.errors import IncidentkitError
from incidentkit.evidence import Evidence
from incidentkit.findings import Findings
from incidentkit.flows.common import begin, evidence_notes, flow_rejects, log_context
from incidentkit.flows.evidence_limits import with_limits
from incidentkit.flows.orphans.actions import by_urgency, most_urgent_run
from incidentkit.flows.orphans.findings import orphan_findings
from incidentkit.flows.orphans.flow import FLOW as DECLARED
from incidentkit.flows.orphans.settings import OrphanSettings
from incidentkit.flows.orphans.triage import OrphanReport, classify_orphans
from incidentkit.flows.settings import resolve

if TYPE_CHECKING:
    from matplotlib.axes import Axes

FLOW = "orphans"
SECTIONS = DECLARED.sections
"""The sources the orphan flow reads; only their rejects make its evidence incomplete."""


def setup(
    evidence: Evidence | str | os.PathLike[str],
    *,
    app_name: str = "",
    as_of: object = "",
    terminal_agent: str | Iterable[str] = "",
    key_templates: Mapping[str, str] | None = None,
    attempts_cap: int = 0,
) -> tuple[Evidence, OrphanSettings]:
    """The incident narrowed to the app to sweep, and the sweep's settings.

    Every empty parameter comes from the manifest: the app from ``app_name`` or the ledger
    (:func:`~incidentkit.flows.common.resolve_app`), ``as_of`` from the window's end, the rest
    from the app's ``[apps.<app>]`` profile (``attempts_cap`` defaults to 3). A setting that
    neither gives is a ParameterError naming the key and the section.
    """
    incident, found = begin(FLOW, evidence, app_name=app_name, as_of=as_of)
    settings = resolve(
        OrphanSettings,
        incident,
        found,
        terminal_agent=terminal_agent,
        key_templates=key_templates,
        attempts_cap=attempts_cap,
    )
    return incident, settings


def triage(evidence: Evidence, settings: OrphanSettings) -> OrphanReport:
    """Classify every non-terminal run of the app's ledger at ``as_of``.

    The ledger is read with the evidence's filters. Events and the journal are then read from
    the earliest start of those runs up to ``as_of``: a run still RUNNING may have started
    before the window, and its log and journal entries must not be cut off (a cut log would
    make a finished or half-sent run look NOT_STARTED). Nothing after ``as_of`` is seen. The
    spans and the diagnostics log, when the manifest has them, show which invocations ADK
    resumed after a crash (the calls it ran again).
    """
    at = settings.as_of
    runs = evidence.runs
    context = log_context(evidence, runs, at)
    spans, spans_note = _side_frame(context, "spans")
    diagnostics, diagnostics_note = _side_frame(context, "diagnostics")
    report = classify_orphans(
        runs,
        context.events,
        context.calls,
        context.responses,
        context.journal,
        as_of=at,
        terminal_agent=settings.terminal_agent,
        key_templates=settings.key_templates,
        attempts_cap=settings.attempts_cap,
        spans=spans,
        diagnostics=diagnostics,
        has_journal=context.has("journal"),
    )
    notes = tuple(note for note in (spans_note, diagnostics_note) if note)
    return replace(report, notes=notes) if notes else report


def _side_frame(evidence: Evidence, name: str) -> tuple[pd.DataFrame | None, str | None]:
    """A frame the sweep reads only to see resumes, and a note when it could not be read:
    None when the manifest lacks its section or it cannot be read (a source outside the
    flow's sections never stops it, but the report says what it missed)."""
    if not evidence.has(name):
        return None, None
    try:
        return evidence.frame(name), None
    except IncidentkitError as err:
        return None, (
            f"The {name} could not be read ({err}): invocations ADK resumed after a crash are "
            "found from the event log alone, so a resume it does not show is missed."
        )


def findings(report: OrphanReport, evidence: Evidence, settings: OrphanSettings) -> Findings:
    """The orphan flow's findings, with the incident's title, window, settings and rejects."""
    window = evidence.filters.window
    found = orphan_findings(
        report,
        title=evidence.title,
        window=None if window is None else (window.start, window.end),
        rejects=flow_rejects(evidence, SECTIONS),
        app_name=settings.app_name,
        settings_from=settings.sources,
    )
    notes = [*evidence_notes(evidence, SECTIONS), *report.notes]
    if notes:  # the first screen says what the window holds
        parameters = {**found.evidence.parameters, "evidence_notes": notes}
        found = replace(found, evidence=replace(found.evidence, parameters=parameters))
    return with_limits(found, evidence)


SHOWN: Mapping[str, tuple[str, ...]] = {
    "orphans": (
        *("run_id", "orphan_class", "action_kind", "last_seq", "last_author", "last_ts"),
        *("unanswered_calls", "journal_verdict", "owner", "attempts"),
    ),
    "calls": (
        *("run_id", "action_kind", "tool", "args", "ts", "long_running", "business_key"),
        *("journal_status", "journal_verdict", "window", "matched_by"),
    ),
    "crash_loops": (
        *("run_id", "action_kind", "owner", "attempts", "attempts_cap", "orphan_class"),
        "action",
    ),
    "duplicate_effects": ("business_key", "tool", "effects", "basis", "detail"),
    "calls_run_twice": (
        *("invocation_id", "tool", "call_id", "called_at", "resumed_at", "journal_key"),
        *("journal_status", "verdict", "detail"),
    ),
    "in_flight": (
        *("run_id", "status", "orphan_class", "action_kind", "owner", "lease_until"),
        "action",
    ),
    "live_leases": ("run_id", "owner", "lease_until", "remaining_s", "orphan_class", "action_kind"),
    "status_disagreements": ("run_id", "ledger_status", "orphan_class", "action_kind", "detail"),
    "per_owner": ("owner", "runs", "live_leases", "orphans", "recovered_unfinished", "crash_loops"),
}
"""The columns each view of the sweep shows in the report; findings.json keeps every column.
Every view that names a run shows that run's own ``action_kind`` (a call's is its run's)."""


def table(report: OrphanReport, view: str) -> Any:
    """One view of the sweep (``"orphans"``, ``"calls"``, ...) as a table for people, with
    the columns a reader needs (:data:`SHOWN`)."""
    from incidentkit.report import table as people_table

    return people_table(getattr(report, view), SHOWN[view])


def action_table(report: OrphanReport) -> Any:
    """What to do with each orphan, most urgent first, in full sentences.

    Live leases and paused runs are not orphans: the notebook shows them apart.
    """
    from incidentkit.report import table

    columns = ["run_id", "owner", "orphan_class", "action_kind", "action", "reason"]
    return table(by_urgency(report.orphans), columns)


def plot_most_urgent_run(
    report: OrphanReport, evidence: Evidence, *, ax: Axes | None = None
) -> Axes:
    """The timeline of :func:`most_urgent_run` across ledger, events, journal and spans."""
    from incidentkit.flows.orphans.plots import plot_run_timeline

    run_id = most_urgent_run(report.orphans)
    if run_id is None:
        from matplotlib.figure import Figure

        axes = ax if ax is not None else Figure(figsize=(8.0, 1.5)).add_subplot()
        axes.text(
            0.5,
            0.5,
            "no orphaned run needs action",
            ha="center",
            va="center",
            transform=axes.transAxes,
        )
        axes.set_axis_off()
        return axes
    return plot_run_timeline(
        run_id,
        evidence.runs,
        evidence.events,
        evidence.journal,
        evidence.spans,
        calls=evidence.calls,
        responses=evidence.responses,
        ax=ax,
    )
