"""Flow steps for notebooks: pure triage applied to one incident's Evidence.

A notebook cell is one call to a function here (or to ``triage``/``plots`` directly). These
functions resolve the notebook's parameters against the evidence (an empty ``as_of`` means the
end of the manifest's window), pass the right frames to the pure triage functions, and fill in
the findings' provenance (title, window, rejects).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pandas as pd

from incidentkit.errors import ParameterError
from incidentkit.evidence import Evidence
from incidentkit.findings import Findings
from incidentkit.manifest import Window
from incidentkit.times import utc_timestamp
from incidentkit.triage.orphan_findings import orphan_findings
from incidentkit.triage.orphans import OrphanReport, classify_orphans

if TYPE_CHECKING:
    from matplotlib.axes import Axes

URGENCY = ("PARK", "ASK_DOWNSTREAM", "REDRIVE", "REPLAY", "MARK_DONE", "INVESTIGATE")
"""Action kinds in the order an on-call engineer should look at them."""


def resolve_as_of(as_of: Any, evidence: Evidence) -> pd.Timestamp:
    """``as_of`` as a UTC timestamp; empty means the end of the evidence window."""
    if as_of is None or (isinstance(as_of, str) and not as_of.strip()):
        window = evidence.filters.window
        if window is None:
            raise ParameterError(
                "as_of is empty and the manifest has no window to take it from",
                value=as_of,
                fix="give the sweep time, e.g. -p as_of 2026-11-29T04:00:00Z "
                "(a scheduled report passes the time of the run)",
            )
        return window.end
    return utc_timestamp(as_of, what="as_of")


def orphans(
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


def log_context(evidence: Evidence, runs: pd.DataFrame, as_of: pd.Timestamp) -> Evidence:
    """The evidence over ``[earliest run start, as_of]`` (the app filter kept).

    The evidence itself when its window already is that span (no second read), else the same
    sources re-read with that window.
    """
    starts = runs["started_at"].dropna()
    if starts.empty or starts.min() >= as_of:
        return evidence
    window = Window(starts.min(), as_of + pd.Timedelta(microseconds=1))
    current = evidence.filters.window
    if current is not None and current.start <= window.start and current.end <= window.end:
        return evidence  # already covers every run's start and holds nothing after as_of
    return evidence.narrowed(replace(evidence.filters, window=window))


def orphans_findings(report: OrphanReport, evidence: Evidence) -> Findings:
    """The orphan flow's findings, with the incident's title, window and rejects."""
    window = evidence.filters.window
    return orphan_findings(
        report,
        title=evidence.title,
        window=None if window is None else (window.start, window.end),
        rejects=flow_rejects(evidence, ("ledger", "events", "journal")),
    )


def flow_rejects(evidence: Evidence, sections: Iterable[str]) -> pd.DataFrame:
    """Rejected rows of the sources a flow reads (other sources do not weaken its verdict)."""
    rejects = evidence.rejects
    return rejects[rejects["source"].isin(list(sections))].reset_index(drop=True)


def action_table(report: OrphanReport) -> Any:
    """What to do with each unfinished run, most urgent first, full text (a pandas Styler)."""
    ordered = by_urgency(pd.concat([report.orphans, report.in_flight], ignore_index=True))
    table = ordered[["run_id", "owner", "orphan_class", "action", "reason"]].reset_index(drop=True)
    return table.style.hide(axis="index").set_properties(
        subset=["action", "reason"], **{"text-align": "left", "white-space": "normal"}
    )


def most_urgent_run(report: OrphanReport) -> str | None:
    """The orphan to look at first (crash loops, then W4, then re-drives...), or None."""
    candidates = report.orphans[report.orphans["action_kind"].isin(URGENCY)]
    if candidates.empty:
        return None
    return str(by_urgency(candidates)["run_id"].iloc[0])


def by_urgency(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` sorted by how urgently their action kind needs a person, then run id."""
    rank = runs["action_kind"].map({kind: i for i, kind in enumerate(URGENCY)})
    ordered = runs.assign(_rank=rank.fillna(len(URGENCY)))
    return ordered.sort_values(["_rank", "run_id"], kind="stable").drop(columns="_rank")


def plot_most_urgent_run(
    report: OrphanReport, evidence: Evidence, *, ax: Axes | None = None
) -> Axes:
    """The timeline of :func:`most_urgent_run` across ledger, events, journal and spans."""
    from incidentkit.plots import plot_run_timeline

    run_id = most_urgent_run(report)
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
