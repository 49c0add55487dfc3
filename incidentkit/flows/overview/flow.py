"""The overview flow, as the rest of the kit knows it."""

from __future__ import annotations

from incidentkit.flows.overview.settings import OverviewSettings
from incidentkit.flows.plugin import CardChecks, EvidenceLimits, Flow, PostmortemHooks

FLOW = Flow(
    name="overview",
    notebook="overview.ipynb",
    summary="the triage card: every flow's cheap check on every app, ordered by the "
    "reported symptom, each line with the flow to open next",
    sections=(
        *("ledger", "events", "journal", "spans", "diagnostics"),
        *("threads", "histograms", "jfr"),
    ),
    reads=(
        *("runs", "events", "calls", "responses", "state_writes", "session_state", "journal"),
        *("spans", "diagnostics", "threads"),
    ),
    settings=OverviewSettings,
    limits=EvidenceLimits(
        withheld=(
            "no more than its card lines can: those for orphans and overlaps are only as good as "
            "the invocation ids these events lack, so open those flows for what they still tell"
        ),
        table_means="its card lines rest on the rows the plugin did not drop",
        table_limits=("dropped", "redacted"),
    ),
    postmortem=PostmortemHooks(navigates=True),  # "open, in this order": no diagnosis
    card=(  # the JVM's evidence, not an app's: the overview's own checks
        CardChecks(
            checks=("growing-classes",),
            module="incidentkit.flows.overview.jvm_checks",
            function="growth_lines",
            engine="growth_engine_lines",
        ),
        CardChecks(
            checks=("heap-growth",),
            module="incidentkit.flows.overview.jvm_checks",
            function="heap_lines",
            engine="heap_engine_lines",
        ),
    ),
)
