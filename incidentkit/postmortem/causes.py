"""The Root cause and trigger section: each flow's items that need action, by their role."""

from __future__ import annotations

from collections.abc import Sequence
from typing import get_args

from incidentkit.findings import Finding
from incidentkit.flows.plugin import Role
from incidentkit.postmortem.collect import EVIDENCE_ITEMS, RUN_ERROR, FlowFindings
from incidentkit.postmortem.proof import item_ref
from incidentkit.postmortem.text import TODO, md

_ROLES: tuple[Role, ...] = get_args(Role)


def _role(ff: FlowFindings, item: Finding) -> Role:
    """The item's role: Evidence for what speaks of the evidence, else as its flow declares
    (``roles``), else Contributing."""
    if item.id.endswith(EVIDENCE_ITEMS) or item.id == RUN_ERROR:
        return "Evidence"
    return ff.hooks.roles.get(item.id, "Contributing")


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
        module = ff.module()
        if module is not None:
            lines += module.triggers(ff)
        for role in _ROLES:
            lines += [
                f"- **{role}**: {_said(role, item)} {item_ref(ff, item.id).text()}"
                for item in items
                if _role(ff, item) == role
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
