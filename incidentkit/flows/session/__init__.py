"""One session, read before forming a theory: its dump, the errors that vanish
around it, and its swimlane.

- ``dump``: :func:`session_dump` (one row per stored event) and :func:`dump_text` (a dump's
  line per event), printed by ``incidentkit session SESSION_ID --evidence PATH``;
- ``errors``: error codes on events, undeliverable RxJava errors, logged errors per agent/tool;
- ``swimlane``: ledger runs and leases, invocations, events by author, spans, journal;
- ``triage``: :func:`triage_session` and :class:`SessionReport`; ``findings``; ``steps``.
"""

from incidentkit.flows.session.dump import DUMP_COLUMNS, dump_text, session_dump
from incidentkit.flows.session.errors import error_counts, vanishing_errors
from incidentkit.flows.session.findings import session_findings
from incidentkit.flows.session.steps import (
    SECTIONS,
    dump,
    findings,
    notes,
    setup,
    swimlane,
    table,
    triage,
)
from incidentkit.flows.session.swimlane import plot_swimlane
from incidentkit.flows.session.triage import SessionReport, triage_session

__all__ = [
    "DUMP_COLUMNS",
    "SECTIONS",
    "SessionReport",
    "dump",
    "dump_text",
    "error_counts",
    "findings",
    "notes",
    "plot_swimlane",
    "session_dump",
    "session_findings",
    "setup",
    "swimlane",
    "table",
    "triage",
    "triage_session",
    "vanishing_errors",
]
