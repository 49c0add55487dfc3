"""Findings as Markdown: for notebooks (displayed), reports and postmortem drafts."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from incidentkit.findings import Finding, Findings

VERDICT_WORDS = {
    "CLEAN": "Clean: nothing needs action.",
    "ACTION_NEEDED": "Action needed: see the findings below, most urgent first.",
    "INCOMPLETE_EVIDENCE": "Evidence incomplete: fix the sources before trusting a verdict.",
}
SEVERITY_ORDER = {"CRITICAL": 0, "WARNING": 1, "INFO": 2}


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= 80 else text[:77] + "..."


def markdown_table(rows: Sequence[dict[str, Any]], *, limit: int = 10) -> str:
    """A Markdown table of the first ``limit`` rows (columns of the first row)."""
    if not rows:
        return ""
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(row.get(c)) for c in columns) + " |" for row in rows[:limit]]
    if len(rows) > limit:
        lines.append(f"\n… and {len(rows) - limit} more rows in findings.json")
    return "\n".join(lines)


def finding_markdown(item: Finding, *, limit: int = 10) -> str:
    """One finding: title, why, what to do, and the rows that prove it."""
    parts = [
        f"### {item.severity.value}: {item.title}",
        "",
        item.detail,
        "",
        f"**What to do:** {item.action}",
    ]
    if item.rows:
        parts += ["", markdown_table(list(item.rows), limit=limit)]
    return "\n".join(parts)


def findings_markdown(findings: Findings, *, limit: int = 10) -> str:
    """The whole findings document as Markdown, most severe findings first."""
    head = [
        f"## Findings — {findings.flow}: {findings.verdict.value}",
        "",
        VERDICT_WORDS[findings.verdict.value],
        "",
    ]
    evidence = findings.evidence
    if evidence.title:
        head.append(f"- incident: {evidence.title}")
    if evidence.window:
        head.append(f"- window (UTC): {evidence.window[0]} .. {evidence.window[1]}")
    if evidence.as_of:
        head.append(f"- as of (UTC): {evidence.as_of}")
    counts = ", ".join(f"{k} {v}" for k, v in findings.summary.items() if v)
    head += [f"- counts: {counts or 'none'}", ""]
    items = sorted(findings.items, key=lambda f: SEVERITY_ORDER[f.severity.value])
    body = [finding_markdown(item, limit=limit) for item in items]
    return "\n".join(head) + "\n" + "\n\n".join(body) + "\n"


@dataclass(frozen=True)
class MarkdownView:
    """Text that Jupyter renders as Markdown when it is a cell's last value."""

    text: str

    def _repr_markdown_(self) -> str:
        return self.text


def show(findings: Findings) -> MarkdownView:
    """The findings as a notebook display (Markdown)."""
    return MarkdownView(findings_markdown(findings))


def record(findings: Findings, path: str | os.PathLike[str]) -> MarkdownView:
    """Write ``findings.json`` to ``path`` and return the findings for display."""
    findings.write(path)
    return show(findings)
