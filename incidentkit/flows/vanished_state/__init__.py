"""Vanished state: why "the agent forgot" — a verdict per state key of one session,
its deltas replayed beside the stored state, and the invocations that overlapped on it.

- ``state``: the session found, its visible writes, the replay, the stored state, the comparison;
- ``verdicts``: TEMP_PREFIX, NEVER_DURABLE, OVERWRITTEN, RACED, REMOVED, PRESENT per key;
- ``overlaps``: invocation time ranges (events and ledger) and the pairs that overlap;
- ``triage``: :func:`triage_vanished_state` and :class:`VanishedReport`, the flow's pure core;
- ``findings``; ``steps``: what the notebook's cells call.
"""

from incidentkit.flows.common import Frames
from incidentkit.flows.vanished_state.findings import vanished_state_findings
from incidentkit.flows.vanished_state.steps import SECTIONS, findings, notes, setup, table, triage
from incidentkit.flows.vanished_state.triage import VanishedReport, triage_vanished_state
from incidentkit.flows.vanished_state.verdicts import Cause, KeyVerdict

__all__ = [
    "SECTIONS",
    "Cause",
    "Frames",
    "KeyVerdict",
    "VanishedReport",
    "findings",
    "notes",
    "setup",
    "table",
    "triage",
    "triage_vanished_state",
    "vanished_state_findings",
]
