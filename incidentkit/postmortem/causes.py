"""The Root cause and trigger section: each flow's items that need action, by their role."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from incidentkit.findings import Finding
from incidentkit.postmortem.collect import (
    EVIDENCE_ITEMS,
    OPEN_ITEM,
    ORPHAN_ITEMS,
    FlowFindings,
    orphaned,
)
from incidentkit.postmortem.proof import cite, distinct, item_ref
from incidentkit.postmortem.text import TODO, md

_ROLE: Mapping[str, str] = {
    "latency_cliff/cliff": "Trigger",
    "latency_cliff/stuck-threads": "Root cause",
    "latency_cliff/fix": "Mechanism",
    "latency_cliff/open-invocations": "Effect",
    "runaway/loops": "Root cause",
    "runaway/hit-limit": "Effect",
    "runaway/cost": "Effect",
    "vanished_state/keys": "Root cause",
    "session/errors": "Root cause",
    "orphans/duplicate-effects": "Contributing",
    "run/error": "Evidence",
}
_ROLES = ("Trigger", "Root cause", "Mechanism", "Contributing", "Effect", "Evidence")


def _role(item: Finding) -> str:
    if item.id.endswith(EVIDENCE_ITEMS):
        return "Evidence"
    return _ROLE.get(item.id, "Effect" if item.id in ORPHAN_ITEMS else "Contributing")


def _said(role: str, item: Finding) -> str:
    """A mechanism is its detail; a root cause or evidence its title and detail; else its title."""
    if role == "Mechanism":
        return md(item.detail)
    detail = f" {md(item.detail)}" if role in ("Root cause", "Evidence") else ""
    return f"{md(item.title)}.{detail}"


def causes(sources: Sequence[FlowFindings]) -> list[str]:
    """The Root cause and trigger section's lines: a subsection per flow that diagnosed, one
    line for the CLEAN flows."""
    lines: list[str] = []
    clean = [ff.flow for ff in sources if ff.clean and not ff.navigates]
    for ff in sources:
        # a triage card points to the flows; a failed run is in the Evidence incomplete note;
        # CLEAN: one line below
        if ff.navigates or ff.clean or ff.failed is not None:
            continue
        lines += ["", f"### {ff.flow} ({ff.findings.verdict.value})", ""]
        items = [i for i in ff.findings.items if i.needs_action]
        if ff.flow == "orphans" and ff.failed is None:
            owners, pointers, _ = distinct(ff, ORPHAN_ITEMS, "owner")
            if owners:
                lines.append(
                    f"- **Trigger**: worker(s) {md(', '.join(owners))} stopped while runs were in "
                    f"flight; their leases ran out (timeline) {cite(pointers)}"
                )
                lines.append(
                    "- **Root cause**: n/a — the evidence shows that the worker stopped, not why "
                    "(a kill, a deploy, an out-of-memory exit: see the TODO below)"
                )
        dead = [row for row in ff.rows(OPEN_ITEM) if orphaned(row)]
        if ff.flow == "latency_cliff" and dead:
            owners = sorted({str(row["owner"]) for row in dead if row.get("owner")})
            whose = f"worker(s) {md(', '.join(owners))}" if owners else "a worker"
            lines.append(
                f"- **Trigger**: {whose} stopped while {len(dead)} open invocation(s) were in "
                "flight: their ledger leases ran out (or their runs were re-driven since); "
                f"those invocations are orphans, not hangs {item_ref(ff, OPEN_ITEM).text()}"
            )
        for role in _ROLES:
            lines += [
                f"- **{role}**: {_said(role, item)} {item_ref(ff, item.id).text()}"
                for item in items
                if _role(item) == role
            ]
        if not items:
            lines.append("- Nothing in these findings needs action.")
    if clean:
        lines += ["", f"{', '.join(clean)} (CLEAN): nothing in these findings needs action."]
    if not lines:
        lines += ["", "- No findings here name a cause (see Evidence incomplete above)."]
    return [
        *lines,
        "",
        f"> {TODO} confirm the root cause and name the trigger (what changed: a deploy, a "
        "dependency, traffic, a configuration). The findings show the conditions, not why they "
        "arose.",
    ]
