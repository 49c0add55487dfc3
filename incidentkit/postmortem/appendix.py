"""The Evidence appendix: per findings document, its verdict, window, parameters and counts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from incidentkit.postmortem.collect import FlowFindings
from incidentkit.postmortem.proof import counter, item_ref
from incidentkit.postmortem.text import md, num, utc


def _parameters(ff: FlowFindings) -> str:
    """The parameters as ``name`` = ``json`` (where its value came from), sorted by name."""
    parameters = dict(ff.findings.evidence.parameters)
    origin = parameters.pop("settings_from", {})
    shown = [
        f"`{k}` = `{json.dumps(v, ensure_ascii=False, sort_keys=True)}`"
        + (f" ({origin[k]})" if isinstance(origin, dict) and k in origin else "")
        for k, v in sorted(parameters.items())
    ]
    return "; ".join(shown) or "none"


def appendix(sources: Sequence[FlowFindings], out: Path) -> list[str]:
    """The Evidence section's lines: a subsection per findings document, then the run's overview."""
    lines: list[str] = []
    for ff in sources:
        f, e = ff.findings, ff.findings.evidence
        links = f"[{ff.rel}]({ff.rel})" + (
            f", report [{ff.report}]({ff.report})" if ff.report else ""
        )
        lines += ["", f"### {ff.flow} — {links}", ""]
        lines.append(f"- verdict: {f.verdict.value} ({f.generated_by})")
        lines.append(f"- incident: {md(e.title) if e.title else 'n/a — the findings name none'}")
        window = f"{utc(e.window[0])} .. {utc(e.window[1])}" if e.window else "n/a — not recorded"
        lines.append(f"- window (UTC): {window}")
        lines.append(f"- as of (UTC): {utc(e.as_of) if e.as_of else 'n/a — not recorded'}")
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
                ", ".join(f"{k} {v}" for k, v in coverage.items())
                if coverage
                else "not in the findings (`incidentkit inspect EVIDENCE` reports it)"
            )
        )
        counts = ", ".join(f"{k} {num(v)}" for k, v in f.summary.items())
        lines.append(f"- summary: {counts or 'none'}")
    if (out / "summary.json").is_file():
        lines += ["", "The run's overview: [summary.json](summary.json)."]
    return lines
