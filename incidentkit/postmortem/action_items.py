"""The Action items table (mitigate / prevent / process, owner ``_owner_``) and the Resolution."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, get_args

from incidentkit.findings import Finding
from incidentkit.flows.plugin import ActionType
from incidentkit.postmortem.collect import EVIDENCE_ITEMS, RUN_ERROR, FlowFindings
from incidentkit.postmortem.proof import Ref, cite, item_ref
from incidentkit.postmortem.text import TODO, md

ACTION_TYPES: tuple[ActionType, ...] = get_args(ActionType)
"""The types of action item, in the order of the table: mitigate, prevent, process."""
OWNER = "_owner_"
"""The owner cell of every action item, for a person to fill in."""


def _type(
    ff: FlowFindings, item_id: str, row: Mapping[str, Any] | None = None
) -> ActionType | None:
    """The type of an item's action item, or of a ``row``'s when its rows are one action each:
    process for an alert, for what speaks of the evidence and for a run that stopped; else as
    its flow declares (``action_types``; None: no item), else mitigate."""
    if row is not None and str(row.get("fix", "")).startswith("alert"):
        return "process"  # a fix whose step is an alert
    if item_id.endswith(EVIDENCE_ITEMS) or item_id == RUN_ERROR:
        return "process"
    return ff.hooks.action_types.get(item_id, "mitigate")


def _note(ff: FlowFindings, item: Finding) -> str:
    """What the flow adds after the item's action (``action_note``), else nothing."""
    module = ff.module()
    return "" if module is None else module.action_note(ff, item)


def _entries(
    sources: Sequence[FlowFindings],
) -> list[tuple[tuple[ActionType, str], list[Ref]]]:
    """Each (type, action) with its proof, by type, then in findings order."""
    entries: dict[tuple[ActionType, str], list[Ref]] = {}
    for ff in sources:
        if ff.clean:  # nothing to act on
            continue
        for item in ff.findings.items:
            if not item.needs_action:
                continue
            if ff.navigates and item.id != RUN_ERROR:  # "open, in this order": navigation
                continue
            pairs: list[tuple[ActionType | None, str, list[int] | None]]
            column = ff.hooks.per_row.get(item.id)
            if column is not None:
                pairs = [
                    (_type(ff, item.id, row), md(str(row[column])), [n])
                    for n, row in enumerate(item.rows, 1)
                    if row.get(column) and row.get("verdict") != "PRESENT"
                ]
            else:
                pairs = [(_type(ff, item.id), md(item.action) + _note(ff, item), None)]
            for kind, text, rows in pairs:
                if kind is None or text.startswith("None"):  # "None: they wait for a person"
                    continue
                entries.setdefault((kind, text), []).append(item_ref(ff, item.id, rows))
    for ff in sources:
        prevented = any(
            k == "prevent" and ff.rel in {r.rel for r in v} for (k, _), v in entries.items()
        )
        if ff.failed is None and ff.findings.needs_action and not prevented and not ff.navigates:
            todo = f"{TODO} prevention for {ff.flow}: the findings give recovery steps only"
            entries[("prevent", f"{todo}; say what keeps it from happening again")] = []
    order = {kind: n for n, kind in enumerate(ACTION_TYPES)}
    return sorted(entries.items(), key=lambda e: order[e[0][0]])  # stable: findings order


def actions(sources: Sequence[FlowFindings]) -> list[str]:
    """The Action items section's lines: the numbered table and its TODO."""
    lines = ["| # | type | action | owner | proof |", "|---|---|---|---|---|"]
    lines += [
        f"| {n} | {kind} | {text} | {OWNER} | {cite(pointers) or '—'} |"
        for n, ((kind, text), pointers) in enumerate(_entries(sources), 1)
    ]
    return [
        *lines,
        "",
        f"> {TODO} give each item an owner (a team or a role), a ticket and a due date; add "
        "process items the review finds (runbook, alert, on-call hand-over).",
    ]


def resolution(sources: Sequence[FlowFindings]) -> str:
    """The Resolution section's sentence: how many recovery steps the action items hold."""
    mitigations = sum(1 for (kind, _), _ in _entries(sources) if kind == "mitigate")
    if not mitigations:
        return "The findings give no recovery step (no mitigate item below)."
    return (
        f"The findings' recovery steps are the {mitigations} mitigate item(s) under Action items."
    )
