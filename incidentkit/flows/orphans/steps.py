"""The orphan flow's steps: what its notebook's cells call, one call per cell.

Each step applies the pure triage (:mod:`.triage`) to one incident's Evidence, with the
notebook's parameters resolved (:mod:`incidentkit.flows.common`), and fills in the findings'
provenance (title, window, rejects).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pandas as pd

from incidentkit.evidence import Evidence
from incidentkit.findings import Findings
from incidentkit.flows.common import flow_rejects, log_context, resolve_as_of
from incidentkit.flows.orphans.actions import by_urgency, most_urgent_run
from incidentkit.flows.orphans.findings import orphan_findings
from incidentkit.flows.orphans.triage import OrphanReport, classify_orphans

if TYPE_CHECKING:
    from matplotlib.axes import Axes

SECTIONS = ("ledger", "events", "journal")
"""The sources the orphan flow reads; only their rejects make its evidence incomplete."""


def sweep(
    evidence: Evidence,
    *,
    as_of: Any = "",
    terminal_agent: str | Iterable[str],
    key_templates: Mapping[str, str] | None = None,
    attempts_cap: int = 3,
) -> OrphanReport:
    """Classify every non-terminal run of the incident's ledger at ``as_of`` (seed 000).

    The ledger is read with the evidence's filters. Events and the journal are then read from
    the earliest start of those runs up to ``as_of``: a run still RUNNING may have started
    before the window, and its log and journal entries must not be cut off (a cut log would
    make a finished or half-sent run look NOT_STARTED). Nothing after ``as_of`` is seen.
    """
    at = resolve_as_of(as_of, evidence)
    runs = evidence.runs
    context = log_context(evidence, runs, at)
    return classify_orphans(
        runs,
        context.events,
        context.calls,
        context.responses,
        context.journal,
        as_of=at,
        terminal_agent=terminal_agent,
        key_templates=key_templates,
        attempts_cap=attempts_cap,
    )


def findings(report: OrphanReport, evidence: Evidence) -> Findings:
    """The orphan flow's findings, with the incident's title, window and rejects."""
    window = evidence.filters.window
    return orphan_findings(
        report,
        title=evidence.title,
        window=None if window is None else (window.start, window.end),
        rejects=flow_rejects(evidence, SECTIONS),
    )


def action_table(report: OrphanReport) -> Any:
    """What to do with each unfinished run, most urgent first, full text (a pandas Styler)."""
    ordered = by_urgency(pd.concat([report.orphans, report.in_flight], ignore_index=True))
    table = ordered[["run_id", "owner", "orphan_class", "action", "reason"]].reset_index(drop=True)
    return table.style.hide(axis="index").set_properties(
        subset=["action", "reason"], **{"text-align": "left", "white-space": "normal"}
    )


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
