"""Runaway model calls: model calls per invocation, a ``maxLlmCalls`` set from data,
and the loop that burned them.

- ``counts``: model calls per invocation from each source, cross-checked;
- ``limits``: limit hits with their evidence, the configured limit, the recommendation;
- ``signatures``: the three loop signatures, each with the rows that prove it;
- ``triage``: :func:`triage_runaway` and :class:`RunawayReport`, the flow's pure core;
- ``findings``, ``plots``; ``steps``: what the notebook's cells call.
"""

from incidentkit.flows.common import Frames
from incidentkit.flows.runaway.findings import runaway_findings
from incidentkit.flows.runaway.plots import plot_model_calls, plot_worst
from incidentkit.flows.runaway.steps import SECTIONS, findings, notes, setup, table, triage
from incidentkit.flows.runaway.triage import RunawayReport, triage_runaway

__all__ = [
    "SECTIONS",
    "Frames",
    "RunawayReport",
    "findings",
    "notes",
    "plot_model_calls",
    "plot_worst",
    "runaway_findings",
    "setup",
    "table",
    "triage",
    "triage_runaway",
]
