"""The latency cliff: when p95 jumped, which invocations hang and on what, which
threads are stuck, and the fix.

- ``latency``: latency per invocation from the best source, cross-checked, per bucket;
- ``cliff``: the change point; ``hangs``: open invocations and their last event;
- ``stacks``: stuck threads across dumps, grouped and tied to the open calls; ``fixes``;
- ``triage``: :func:`triage_latency` and :class:`LatencyReport`, the flow's pure core;
- ``findings``, ``plots``; ``steps``: what the notebook's cells call.
"""

from incidentkit.flows.common import Frames
from incidentkit.flows.latency_cliff.findings import latency_findings
from incidentkit.flows.latency_cliff.plots import (
    plot_latency,
    plot_open_by_last_event,
    plot_stuck_threads,
)
from incidentkit.flows.latency_cliff.steps import SECTIONS, findings, notes, setup, table, triage
from incidentkit.flows.latency_cliff.triage import LatencyReport, triage_latency

__all__ = [
    "SECTIONS",
    "Frames",
    "LatencyReport",
    "findings",
    "latency_findings",
    "notes",
    "plot_latency",
    "plot_open_by_last_event",
    "plot_stuck_threads",
    "setup",
    "table",
    "triage",
    "triage_latency",
]
