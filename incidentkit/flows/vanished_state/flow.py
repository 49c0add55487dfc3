"""The vanished_state flow, as the rest of the kit knows it."""

from __future__ import annotations

from incidentkit.flows.plugin import CardChecks, EvidenceLimits, Flow, PostmortemHooks
from incidentkit.flows.vanished_state.settings import VanishedSettings

FLOW = Flow(
    name="vanished_state",
    notebook="vanished_state.ipynb",
    summary="say why a session forgot a state key: temp:, never durable, overwritten, "
    "raced, removed or present, with the writes that prove it",
    sections=("events", "ledger"),
    reads=("runs", "events", "responses", "state_writes", "session_state"),
    settings=VanishedSettings,
    required=("session_id",),
    needs=("events",),
    limits=EvidenceLimits(
        withheld=(
            "no state verdicts: without state deltas the kit cannot say which write set, overwrote"
            " or lost a key, so the per-key verdicts and the replay are withheld; the stored state"
            " is shown as it is, and overlapping invocations come from the ledger"
        ),
        withheld_items=("vanished_state/keys", "vanished_state/replayed-state"),
        withheld_counts=(
            "temp_prefix",
            "never_durable",
            "overwritten",
            "raced",
            "removed",
            "present",
            "rewound",
            "replay_differences",
        ),
        table_means=(
            "keys logged as [REDACTED] get no verdict; a user message's delta is read from the "
            "session state logged around it, and deltas of dropped rows are lost"
        ),
        table_limits=("redacted", "user_delta", "dropped"),
    ),
    postmortem=PostmortemHooks(
        module="incidentkit.flows.vanished_state.postmortem",
        roles={"vanished_state/keys": "Root cause"},
        action_types={
            "vanished_state/keys": "prevent",
            "vanished_state/overlapping-invocations": "prevent",
            "vanished_state/replayed-state": "process",
        },
        per_row={"vanished_state/keys": "fix"},
    ),
    card=(
        CardChecks(
            checks=("state-can-vanish",),
            module="incidentkit.flows.vanished_state.card",
            function="state_lines",
        ),
        CardChecks(
            checks=("overlapping-invocations",),
            module="incidentkit.flows.vanished_state.card",
            function="overlap_lines",
            engine="overlap_engine_lines",
        ),
    ),
)
