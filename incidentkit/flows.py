"""Flow steps for notebooks: pure triage applied to one incident's Evidence.

A notebook cell is one call to a function here (or to ``triage``/``plots`` directly). These
functions resolve the notebook's parameters against the evidence (an empty ``as_of`` means the
end of the manifest's window), pass the right frames to the pure triage functions, and fill in
the findings' provenance (title, window, rejects).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pandas as pd

from incidentkit.errors import ParameterError
from incidentkit.evidence import Evidence
from incidentkit.findings import Findings
from incidentkit.frames import utc_timestamp
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
    """Classify every non-terminal run of the incident's ledger at ``as_of`` (seed 000)."""
    return classify_orphans(
        evidence.runs,
        evidence.events,
        evidence.calls,
        evidence.responses,
        evidence.journal,
        as_of=resolve_as_of(as_of, evidence),
        terminal_agent=terminal_agent,
        key_templates=key_templates,
        attempts_cap=attempts_cap,
    )


def orphans_findings(report: OrphanReport, evidence: Evidence) -> Findings:
    """The orphan flow's findings, with the incident's title, window and rejects."""
    window = evidence.filters.window
    return orphan_findings(
        report,
        title=evidence.title,
        window=None if window is None else (window.start, window.end),
        rejects=evidence.rejects,
    )


def action_table(report: OrphanReport) -> Any:
    """What to do with each unfinished run, most urgent first, full text (a pandas Styler)."""
    runs = pd.concat([report.orphans, report.in_flight], ignore_index=True)
    rank = runs["action_kind"].map({kind: i for i, kind in enumerate(URGENCY)})
    ordered = runs.assign(_rank=rank.fillna(len(URGENCY))).sort_values(
        ["_rank", "run_id"], kind="stable"
    )
    table = ordered[["run_id", "owner", "orphan_class", "action", "reason"]].reset_index(drop=True)
    return table.style.hide(axis="index").set_properties(
        subset=["action", "reason"], **{"text-align": "left", "white-space": "normal"}
    )


def most_urgent_run(report: OrphanReport) -> str | None:
    """The orphan to look at first (crash loops, then W4, then re-drives...), or None."""
    candidates = report.orphans[report.orphans["action_kind"].isin(URGENCY)]
    if candidates.empty:
        return None
    rank = candidates["action_kind"].map({kind: i for i, kind in enumerate(URGENCY)})
    ordered = candidates.assign(_rank=rank).sort_values(["_rank", "run_id"], kind="stable")
    return str(ordered["run_id"].iloc[0])


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
