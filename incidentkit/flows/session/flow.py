"""The session flow, as the rest of the kit knows it."""

from __future__ import annotations

from incidentkit.flows.plugin import CardChecks, EvidenceLimits, Flow, PostmortemHooks
from incidentkit.flows.session.settings import SessionSettings

FLOW = Flow(
    name="session",
    notebook="session.ipynb",
    summary="dump one session event by event, list the errors that vanish, and draw the "
    "session's swimlane",
    sections=("events", "ledger", "diagnostics", "spans", "journal"),
    reads=(
        *("runs", "events", "calls", "responses", "state_writes"),
        *("spans", "diagnostics", "journal"),
    ),
    settings=SessionSettings,
    required=("session_id",),
    needs=("events",),
    limits=EvidenceLimits(
        withheld=(
            "no invocation boundaries in the events, no state deltas and no error codes: the "
            "transcript, the calls by name and the error responses are shown; overlapping "
            "invocations come from the ledger"
        ),
        withheld_counts=(
            "invocations",
            "error_code_events",
            "compactions",
            "rewinds",
            "checkpoints",
            "rewound_events",
        ),
        table_means=(
            "the transcript is the rows' text, cut where the plugin truncated it; compaction and "
            "rewind events are not in the table"
        ),
        table_limits=("redacted", "dropped", "truncated", "markers"),
    ),
    postmortem=PostmortemHooks(
        module="incidentkit.flows.session.postmortem",
        roles={"session/errors": "Root cause"},
        action_types={
            "session/overlapping-invocations": "prevent",
            "session/errors": "process",
        },
    ),
    card=(
        CardChecks(
            checks=("quiet-errors",), module="incidentkit.flows.session.card", engine="engine_lines"
        ),
    ),
)
