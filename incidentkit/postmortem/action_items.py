"""The Action items table (mitigate / prevent / process, owner ``_owner_``) and the Resolution."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from incidentkit.findings import Finding
from incidentkit.postmortem.collect import EVIDENCE_ITEMS, FlowFindings
from incidentkit.postmortem.proof import Ref, cite, item_ref
from incidentkit.postmortem.text import TODO, code, md

ACTION_TYPES = ("mitigate", "prevent", "process")
"""The types of action item, in the order of the table."""
OWNER = "_owner_"
"""The owner cell of every action item, for a person to fill in."""

_ACTION_TYPE: Mapping[str, str | None] = {
    "latency_cliff/cliff": None,  # "find what they wait on": the flow did
    "latency_cliff/stuck-threads": None,  # "apply the fix below"
    "latency_cliff/open-invocations": "mitigate",
    "latency_cliff/fix": "prevent",
    "runaway/hit-limit": "prevent",
    "runaway/loops": "prevent",
    "runaway/model-calls": "prevent",
    "vanished_state/keys": "prevent",
    "vanished_state/overlapping-invocations": "prevent",
    "session/overlapping-invocations": "prevent",
    "session/errors": "process",
    "vanished_state/replayed-state": "process",
    "latency_cliff/source-disagreements": "process",
    "runaway/source-disagreements": "process",
    "run/error": "process",
}
_PER_ROW = {"latency_cliff/fix": "change", "vanished_state/keys": "fix"}
"""Items whose rows are one action each, and the column that says it."""


def _type(item_id: str, row: Mapping[str, Any] | None = None) -> str | None:
    if row is not None and str(row.get("fix", "")).startswith("alert"):
        return "process"  # the latency fix's step 4: an alert
    if item_id.endswith(EVIDENCE_ITEMS):
        return "process"
    return _ACTION_TYPE.get(item_id, "mitigate")


NOTHING_TO_DO = frozenset({"NONE", "WAIT"})
"""Action kinds that are no runs to act on: a live lease, a run waiting for a person."""


def _export_hint(ff: FlowFindings, item: Finding) -> str:
    kinds = sorted(
        {str(r["action_kind"]) for r in item.rows if r.get("action_kind")} - NOTHING_TO_DO
    )
    if ff.flow != "orphans" or not kinds:
        return ""
    folder = Path(ff.rel).parent.as_posix()
    where = "OUT" if folder == "." else f"OUT/{folder}"
    return (
        " (runs to act on: "
        + ", ".join(code(f"incidentkit actions {where} --kind {k}") for k in kinds)
        + ")"
    )


def _entries(sources: Sequence[FlowFindings]) -> list[tuple[tuple[str, str], list[Ref]]]:
    """Each (type, action) with its proof, by type, then in findings order."""
    entries: dict[tuple[str, str], list[Ref]] = {}
    for ff in sources:
        if ff.clean:  # nothing to act on
            continue
        for item in ff.findings.items:
            if not item.needs_action:
                continue
            if ff.navigates and item.id != "run/error":  # "open, in this order": navigation
                continue
            pairs: list[tuple[str | None, str, list[int] | None]]
            if item.id in _PER_ROW:
                pairs = [
                    (_type(item.id, row), md(str(row[_PER_ROW[item.id]])), [n])
                    for n, row in enumerate(item.rows, 1)
                    if row.get(_PER_ROW[item.id]) and row.get("verdict") != "PRESENT"
                ]
            else:
                pairs = [(_type(item.id), md(item.action) + _export_hint(ff, item), None)]
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
