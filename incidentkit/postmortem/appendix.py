"""The Evidence appendix: per findings document, its verdict, window, parameters and counts."""

from __future__ import annotations

import json
from collections.abc import Sequence

from incidentkit.postmortem.collect import FlowFindings, RunSummary
from incidentkit.postmortem.proof import counter, item_ref
from incidentkit.postmortem.text import code, link, md, num, utc


def _parameters(ff: FlowFindings) -> str:
    """The parameters as ``name`` = ``json`` (where its value came from), sorted by name."""
    parameters = dict(ff.findings.evidence.parameters)
    origin = parameters.pop("settings_from", {})
    parameters.pop("evidence_notes", None)  # shown on the first screen, not a setting
    shown = [
        f"{code(k)} = {code(json.dumps(v, ensure_ascii=False, sort_keys=True))}"
        + (f" ({md(origin[k])})" if isinstance(origin, dict) and k in origin else "")
        for k, v in sorted(parameters.items())
    ]
    return "; ".join(shown) or "none"


def _overview(summary: RunSummary, sources: Sequence[FlowFindings]) -> list[str]:
    """What ``summary.json`` adds: its exit code, the flows skipped, and those it lists whose
    findings are not here."""
    lines = ["", f"The run's overview: {link('summary.json')} (exit {summary.exit_code})."]
    if summary.skipped:
        skipped = "; ".join(f"{md(k)} ({md(v)})" for k, v in sorted(summary.skipped.items()))
        lines += ["", f"- skipped: {skipped}"]
    read = {ff.flow for ff in sources}
    missing = sorted(set(summary.flows) - read)
    if missing:
        lines.append(f"- in summary.json without a findings.json here: {md(', '.join(missing))}")
    return lines


def appendix(sources: Sequence[FlowFindings], summary: RunSummary | None = None) -> list[str]:
    """The Evidence section's lines: a subsection per findings document, then the run's overview
    (``run all``'s ``summary.json``, when OUT holds one)."""
    lines: list[str] = []
    for ff in sources:
        f, e = ff.findings, ff.findings.evidence
        links = link(ff.rel) + (f", report {link(ff.report)}" if ff.report else "")
        lines += ["", f"### {ff.flow} — {links}", ""]
        lines.append(f"- verdict: {f.verdict.value} ({md(f.generated_by)})")
        lines.append(f"- incident: {md(e.title) if e.title else 'n/a — the findings name none'}")
        window = (
            f"{md(utc(e.window[0]))} .. {md(utc(e.window[1]))}"
            if e.window
            else "n/a — not recorded"
        )
        lines.append(f"- window (UTC): {window}")
        lines.append(f"- as of (UTC): {md(utc(e.as_of)) if e.as_of else 'n/a — not recorded'}")
        lines.append(f"- parameters: {_parameters(ff)}")
        if "rejects" in f.summary:
            rejects = ff.rejects
            note = f" {item_ref(ff, rejects.id).text()}" if rejects else ""
            lines.append(f"- rejects: {f.summary['rejects']} {counter(ff, 'rejects').text()}{note}")
        else:
            lines.append("- rejects: n/a — the findings count none (the run stopped first)")
        coverage = {k: v for k, v in f.summary.items() if k.startswith("coverage")}
        lines.append(
            "- coverage: "
            + (
                ", ".join(f"{md(k)} {num(v)}" for k, v in coverage.items())
                if coverage
                else "not in the findings (`incidentkit inspect EVIDENCE` reports it)"
            )
        )
        counts = ", ".join(f"{md(k)} {num(v)}" for k, v in f.summary.items())
        lines.append(f"- summary: {counts or 'none'}")
    if summary is not None:
        lines += _overview(summary, sources)
    return lines
