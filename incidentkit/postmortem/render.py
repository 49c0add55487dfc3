"""The draft: its sections assembled as Markdown, or as a standalone HTML page."""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

from incidentkit.errors import ParameterError
from incidentkit.findings import Verdict
from incidentkit.postmortem.action_items import actions, resolution
from incidentkit.postmortem.appendix import appendix
from incidentkit.postmortem.causes import causes
from incidentkit.postmortem.collect import FlowFindings, collect_findings, read_summary
from incidentkit.postmortem.detection import detection
from incidentkit.postmortem.impact import impact
from incidentkit.postmortem.proof import Ref, item_ref
from incidentkit.postmortem.text import TODO, md
from incidentkit.postmortem.timeline import timeline

FORMATS = ("md", "html")
"""The formats of a draft."""


def _title(sources: Sequence[FlowFindings]) -> str:
    """The incident's title (the first of the findings' titles), as plain text."""
    titles = sorted({t for ff in sources if (t := ff.findings.evidence.title)})
    return titles[0] if titles else f"incident ({', '.join(ff.flow for ff in sources)})"


def _preamble(sources: Sequence[FlowFindings]) -> list[str]:
    """The title, what the draft is, and a warning per flow whose evidence is incomplete."""
    flows = ", ".join(f"{ff.flow} {ff.findings.verdict.value}" for ff in sources)
    lines = [
        f"# Postmortem draft: {md(_title(sources))}",
        "",
        f"Drafted by incidentkit from the findings in this folder ({flows}). Numbers and times "
        "link to the rows that prove them; paths are relative to this folder. Passages marked "
        f"`{TODO}` are for a person to write. Blameless: it names systems and conditions, not "
        "people.",
    ]
    incomplete = [ff for ff in sources if ff.findings.verdict is Verdict.INCOMPLETE_EVIDENCE]
    if not incomplete:
        return lines
    # One note for every incomplete flow; the flows that say the same thing share a line.
    causes: dict[str, list[tuple[FlowFindings, str | None]]] = {}
    for ff in incomplete:
        cause = ff.failed or ff.rejects or ff.limits
        if cause is None:
            said = "no item says why"
        elif cause is ff.failed:
            said = f"the run stopped before its verdict: {md(cause.detail)}"
        else:
            said = f"{md(cause.title)}: {md(cause.detail)}"
        causes.setdefault(said, []).append((ff, None if cause is None else cause.id))
    names = ", ".join(ff.flow for ff in incomplete)
    lines += [
        "",
        f"> **Evidence incomplete ({names}).** The findings are INCOMPLETE_EVIDENCE, so this "
        "draft is partial: what follows counts only what was read.",
        ">",
    ]
    for said, members in causes.items():
        proof = " ".join(item_ref(ff, item_id).text() for ff, item_id in members if item_id)
        flows = ", ".join(ff.flow for ff, _ in members)
        lines.append(f"> - {flows}: {said} {proof}".rstrip())
    return lines


def _summary(sources: Sequence[FlowFindings]) -> list[str]:
    """A line per flow: its verdict and its three most severe items that need action."""
    lines = []
    for ff in sources:
        top = sorted(
            (i for i in ff.findings.items if i.needs_action),
            key=lambda i: i.severity.rank,
        )[:3]
        said = "; ".join(md(i.title) for i in top) or "nothing needs action"
        lines.append(
            f"- {ff.flow}: {ff.findings.verdict.value} — {said} {Ref(ff.rel, key='verdict').text()}"
        )
    return lines


def postmortem_markdown(sources: Sequence[FlowFindings], out: Path) -> str:
    """The draft as Markdown, from the findings ``collect_findings(out)`` returned (and
    ``out/summary.json``, checked against its schema, when there is one)."""
    summary = read_summary(out)
    lines = [
        *_preamble(sources),
        "",
        "## Summary",
        "",
        *_summary(sources),
        "",
        f"> {TODO} in two or three sentences for readers outside the team: what users saw, for "
        "how long, and what ended it.",
        "",
        "## Impact",
        "",
        *impact(sources),
        "",
        f"> {TODO} add what the evidence cannot count (users told, tickets, money refunded).",
        "",
        "## Timeline",
        "",
        *timeline(sources),
        "",
        "## Root cause and trigger",
        *causes(sources),
        "",
        "## Detection",
        "",
        *detection(sources),
        "",
        "## Resolution",
        "",
        resolution(sources),
        "",
        f"> {TODO} what was done, when (UTC), by which change or command, and when the service "
        "was back to normal.",
        "",
        "## Action items",
        "",
        *actions(sources),
        "",
        "## Evidence",
        *appendix(sources, summary),
    ]
    return "\n".join(lines) + "\n"


def to_html(markdown: str, *, title: str) -> str:
    """``markdown`` as a standalone HTML page: mistune, with raw HTML in the text escaped and
    entities (``&lt;``, how the draft writes ``<``) kept; links only to safe protocols."""
    try:
        import mistune
        from mistune.util import safe_entity
    except ImportError as err:  # pragma: no cover - nbconvert depends on it
        raise ParameterError(
            "the html format needs mistune", value=str(err), fix="pip install 'mistune>=3'"
        ) from err

    class Renderer(mistune.HTMLRenderer):
        """Raw HTML escaped (``escape=True``); text entities kept, not escaped a second time."""

        def text(self, text: str) -> str:
            return safe_entity(text)

    body = mistune.create_markdown(renderer=Renderer(escape=True), plugins=["table"])(markdown)
    style = (
        "body{font-family:sans-serif;max-width:70em;margin:2em auto;line-height:1.45}"
        "table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:.2em .5em;"
        "text-align:left;vertical-align:top}blockquote{border-left:4px solid #b25e09;"
        "margin-left:0;padding-left:1em;color:#444}"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{style}</style>\n</head>\n<body>\n"
        f"{body}</body>\n</html>\n"
    )


def postmortem_command(out: Path, *, fmt: str) -> str:
    """The postmortem draft of the findings in ``out`` (``md`` or ``html``); writes nothing."""
    if fmt not in FORMATS:
        raise ParameterError(
            "unknown postmortem format", value=fmt, fix=f"use one of {', '.join(FORMATS)}"
        )
    sources = collect_findings(out)
    text = postmortem_markdown(sources, Path(out))
    if fmt == "md":
        return text
    return to_html(text, title=f"Postmortem draft: {_title(sources)}")
