"""The orphans flow, as the rest of the kit knows it."""

from __future__ import annotations

from incidentkit.flows.orphans.settings import OrphanSettings
from incidentkit.flows.plugin import CardChecks, EvidenceLimits, Flow, PostmortemHooks

ORPHAN_ITEMS = tuple(
    f"orphans/{kind}"
    for kind in (
        "not-started",
        "model-inflight",
        "tool-unanswered",
        "paused",
        "actually-done",
        "unknown",
    )
)
"""The items of orphaned runs, one per orphan class: the effect of a worker that stopped."""

FLOW = Flow(
    name="orphans",
    notebook="orphans.ipynb",
    summary="classify runs orphaned by a crash and say what to do with each",
    sections=("ledger", "events", "journal"),
    reads=("runs", "events", "calls", "responses", "journal", "spans", "diagnostics"),
    settings=OrphanSettings,
    needs=("ledger",),
    limits=EvidenceLimits(
        withheld=(
            "no orphan classes: an orphan's class comes from the events of its invocation, and "
            "these events name none; crash loops, leases and duplicate effects (ledger and "
            "journal) still stand"
        ),
        withheld_items=(
            "orphans/not-started",
            "orphans/model-inflight",
            "orphans/tool-unanswered",
            "orphans/paused",
            "orphans/waiting",
            "orphans/actually-done",
            "orphans/unknown",
            "orphans/status-disagreements",
            "orphans/call-id-journal",
        ),
        withheld_counts=("orphans", "unanswered_calls", "calls", "status_disagreements"),
        table_means=(
            "an invocation with no INVOCATION_COMPLETED may be one whose rows the plugin dropped, "
            "not a run that died; calls pair with answers by name and order"
        ),
        table_limits=("dropped", "call_ids"),
    ),
    postmortem=PostmortemHooks(
        module="incidentkit.flows.orphans.postmortem",
        roles={
            **dict.fromkeys(ORPHAN_ITEMS, "Effect"),
            "orphans/duplicate-effects": "Contributing",
            "orphans/empty-ledger": "Evidence",
        },
        action_types={"orphans/empty-ledger": "process"},
    ),
    card=(
        CardChecks(
            checks=("orphans",), module="incidentkit.flows.orphans.card", engine="engine_lines"
        ),
    ),
)
