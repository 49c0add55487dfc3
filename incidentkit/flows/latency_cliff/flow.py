"""The latency_cliff flow, as the rest of the kit knows it."""

from __future__ import annotations

from incidentkit.flows.latency_cliff.settings import LatencySettings
from incidentkit.flows.plugin import CardChecks, EvidenceLimits, Flow, PostmortemHooks

FLOW = Flow(
    name="latency_cliff",
    notebook="latency_cliff.ipynb",
    summary="find when latency fell off a cliff, which invocations hang on what, which "
    "threads are stuck, and the fix",
    sections=("diagnostics", "spans", "ledger", "events", "threads", "jfr"),
    reads=("runs", "events", "calls", "responses", "spans", "diagnostics", "threads"),
    settings=LatencySettings,
    limits=EvidenceLimits(
        withheld=(
            "no last-event shape of an open invocation: its events cannot be found without "
            "invocation ids; open invocations, the cliff and stuck threads (ledger, spans, dumps) "
            "still stand"
        ),
        withheld_items=("latency_cliff/open-by-last-event",),
        table_means=(
            "an invocation with no INVOCATION_COMPLETED is open, or its rows were dropped by the "
            "plugin; run times are the plugin's latency_ms"
        ),
        table_limits=("dropped",),
    ),
    postmortem=PostmortemHooks(
        module="incidentkit.flows.latency_cliff.postmortem",
        roles={
            "latency_cliff/cliff": "Trigger",
            "latency_cliff/stuck-threads": "Root cause",
            "latency_cliff/fix": "Mechanism",
            "latency_cliff/open-invocations": "Effect",
            "latency_cliff/no-latency-source": "Evidence",
        },
        action_types={
            "latency_cliff/cliff": None,  # "find what they wait on": the flow did
            "latency_cliff/stuck-threads": None,  # "apply the fix below"
            "latency_cliff/open-invocations": "mitigate",
            "latency_cliff/fix": "prevent",
            "latency_cliff/source-disagreements": "process",
            "latency_cliff/no-latency-source": "process",
        },
        per_row={"latency_cliff/fix": "change"},
    ),
    card=(
        CardChecks(
            checks=("open-past-timeout", "latency-cliff", "dead-worker"),
            module="incidentkit.flows.latency_cliff.card",
            engine="engine_lines",
        ),
    ),
)
