"""Orphan classification: every run in flight at ``as_of``, what happened, what to do.

- ``triage``: :func:`classify_orphans` and :class:`OrphanReport`, the flow's pure core;
- ``classes``, ``journal``, ``actions``, ``views``: its parts (locate and classify each run,
  look its calls up in the journal by business key, say what to do, the side views);
- ``findings``: the findings value; ``plots``: its figures;
- ``steps``: what the notebook's cells call.
"""

from incidentkit.flows.orphans.actions import URGENCY, Action, by_urgency, most_urgent_run
from incidentkit.flows.orphans.plots import plot_orphan_classes, plot_run_timeline
from incidentkit.flows.orphans.steps import (
    SECTIONS,
    action_table,
    findings,
    plot_most_urgent_run,
    setup,
    table,
    triage,
)
from incidentkit.flows.orphans.triage import (
    JournalVerdict,
    OrphanClass,
    OrphanReport,
    classify_orphans,
)

__all__ = [
    "SECTIONS",
    "URGENCY",
    "Action",
    "JournalVerdict",
    "OrphanClass",
    "OrphanReport",
    "action_table",
    "by_urgency",
    "classify_orphans",
    "findings",
    "most_urgent_run",
    "plot_most_urgent_run",
    "plot_orphan_classes",
    "plot_run_timeline",
    "setup",
    "table",
    "triage",
]
