"""The runaway flow, as the rest of the kit knows it."""

from __future__ import annotations

from incidentkit.flows.plugin import CardChecks, EvidenceLimits, Flow, PostmortemHooks
from incidentkit.flows.runaway.settings import RunawaySettings

FLOW = Flow(
    name="runaway",
    notebook="runaway.ipynb",
    summary="count model calls per invocation, find the invocations that hit maxLlmCalls "
    "and the loops that burned them, and set the limit from data",
    sections=("diagnostics", "spans", "ledger", "events"),
    reads=("runs", "events", "calls", "responses", "state_writes", "spans", "diagnostics"),
    settings=RunawaySettings,
    limits=EvidenceLimits(
        withheld=(
            "no model calls counted from the events (no invocation ids) and no loop exits (no "
            "state deltas or escalations): counts come from the ledger and spans only"
        ),
        withheld_items=("runaway/loops",),
        withheld_counts=("loops",),
        table_means=(
            "model calls are the finished LLM_RESPONSE rows; the call a limit refused is an "
            "LLM_REQUEST with no response, and not counted"
        ),
        table_limits=("dropped",),
    ),
    postmortem=PostmortemHooks(
        module="incidentkit.flows.runaway.postmortem",
        roles={
            "runaway/loops": "Root cause",
            "runaway/hit-limit": "Effect",
            "runaway/cost": "Effect",
            "runaway/no-model-calls": "Evidence",
        },
        action_types={
            "runaway/hit-limit": "prevent",
            "runaway/loops": "prevent",
            "runaway/model-calls": "prevent",
            "runaway/source-disagreements": "process",
            "runaway/no-model-calls": "process",
        },
        timed=False,
    ),
    card=(
        CardChecks(
            checks=("over-call-limit",),
            module="incidentkit.flows.runaway.card",
            engine="engine_lines",
        ),
    ),
)
