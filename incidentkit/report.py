"""The report layer: findings as Markdown and HTML, tables for people, the summary block.

Every value from evidence, the manifest or parameters is escaped where it is written, so no
value can become markup in a report: :func:`table` escapes every cell and header,
:func:`markdown_text` every value put into Markdown, :func:`summary_html` every value put into
its HTML.

- :func:`table` renders a frame for a person (no index, a dash for missing values, lists as
  comma lists, long text wrapped and never cut): notebooks call it for every table they show.
- :func:`summary_html` is the block the HTML report opens with, made from ``findings.json``:
  verdict, app, window, as_of, counts, settings and the first actions.
- :func:`findings_markdown` is the whole findings document (postmortem drafts, the notebook's
  verdict cell shows it without the row tables the story already showed).
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from incidentkit.findings import Finding, Findings

VERDICT_WORDS = {
    "CLEAN": "Clean: nothing needs action.",
    "ACTION_NEEDED": "Action needed: what to do first is listed below, most urgent first.",
    "INCOMPLETE_EVIDENCE": "Evidence incomplete: fix the sources before trusting a verdict.",
}


MISSING = "—"
"""How a missing value reads in a report."""


def plain(value: Any) -> str:
    """One value as a person reads it: a dash for missing, lists as comma lists, times in UTC."""
    if isinstance(value, list | tuple | set | frozenset):
        return ", ".join(plain(v) for v in value) if value else MISSING
    if isinstance(value, Mapping):
        return ", ".join(f"{k}: {plain(v)}" for k, v in value.items()) if value else MISSING
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return MISSING
    if isinstance(value, pd.Timestamp):
        return str(value.strftime("%Y-%m-%d %H:%M:%S.%f"))[:-3] + " UTC"
    if isinstance(value, float):  # no float noise such as 66763.84999999999
        return str(round(value, 2)) if abs(value) >= 1 or value == 0 else f"{value:.3g}"
    return str(value)


_MARKDOWN_SYNTAX = re.compile(r"([!\"#$%'()*+,\-./:;=?@\[\\\]^_`{|}~])")
"""ASCII punctuation but ``&<>`` (those become entities): CommonMark reads each one after a
backslash as itself, so escaped text can open no link, code span, emphasis, list or table."""
_LINE_BREAK = re.compile(r"\r\n?|\n")


def markdown_text(value: Any) -> str:
    """``value`` as :func:`plain` reads it, as Markdown inline text that renders as exactly
    that text: HTML escaped, Markdown syntax backslash-escaped, line breaks read as spaces
    (a blank line would end the paragraph, list item or table it is in)."""
    text = _MARKDOWN_SYNTAX.sub(r"\\\1", _LINE_BREAK.sub(" ", plain(value)))
    return html.escape(text, quote=False)


LIST_SHOWN = 8
"""How many items of a list a table cell shows before "… and N more" (findings.json and the
frames keep them all): 64 thread names would make one cell a page long."""


def _table_cell(value: Any) -> str:
    if isinstance(value, list | tuple) and len(value) > LIST_SHOWN:
        return f"{plain(value[:LIST_SHOWN])} … and {len(value) - LIST_SHOWN} more"
    return plain(value)


def table(frame: pd.DataFrame, columns: Sequence[str] | None = None) -> Any:
    """``frame`` as a table for people (a pandas Styler): no index, values as :func:`plain`
    reads them (a list past :data:`LIST_SHOWN` items with how many more), every cell and
    header HTML-escaped, long text wrapped, never cut. An empty frame reads "No rows." with
    its columns named, not as a bare header."""
    shown = frame if columns is None else frame[list(columns)]
    if shown.empty:
        named = ", ".join(markdown_text(c) for c in shown.columns)
        return MarkdownView(f"_No rows_ ({named}).")
    text = shown.astype(object).map(_table_cell) if len(shown) else shown.astype(object)
    return (
        text.reset_index(drop=True)
        .style.format(escape="html")
        .format_index(escape="html", axis=1)
        .hide(axis="index")
        .set_table_styles(
            [
                {"selector": "th", "props": [("text-align", "left")]},
                {
                    "selector": "td",
                    "props": [
                        ("text-align", "left"),
                        ("white-space", "normal"),
                        ("overflow-wrap", "break-word"),  # a long stack frame breaks, words not
                        ("vertical-align", "top"),
                    ],
                },
            ]
        )
    )


def markdown_table(rows: Sequence[dict[str, Any]], *, limit: int = 10) -> str:
    """A Markdown table of the first ``limit`` rows (columns of the first row), every header
    and cell :func:`markdown_text`."""
    if not rows:
        return ""
    columns = list(rows[0])
    cells = [[markdown_text(row.get(c)) for c in columns] for row in rows[:limit]]
    lines = ["| " + " | ".join(map(markdown_text, columns)) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(row) + " |" for row in cells]
    if len(rows) > limit:
        lines.append(f"\n… and {len(rows) - limit} more rows in findings.json")
    return "\n".join(lines)


def finding_markdown(item: Finding, *, limit: int = 10) -> str:
    """One finding: title, why, what to do, and the rows that prove it (``limit`` 0: none);
    its texts, which quote evidence, as :func:`markdown_text`."""
    m = markdown_text
    parts = [
        f"### {m(item.severity.value)}: {m(item.title)}",
        "",
        m(item.detail),
        "",
        f"**What to do:** {m(item.action)}",
    ]
    if item.rows and limit:
        parts += ["", markdown_table(list(item.rows), limit=limit)]
    return "\n".join(parts)


def findings_markdown(findings: Findings, *, limit: int = 10) -> str:
    """The whole findings document as Markdown, most severe findings first; every value
    from the findings as :func:`markdown_text`."""
    m = markdown_text
    head = [
        f"## Findings — {m(findings.flow)}: {m(findings.verdict.value)}",
        "",
        VERDICT_WORDS[findings.verdict.value],
        "",
    ]
    evidence = findings.evidence
    if evidence.title:
        head.append(f"- incident: {m(evidence.title)}")
    if evidence.window:
        head.append(f"- window (UTC): {m(evidence.window[0])} .. {m(evidence.window[1])}")
    if evidence.as_of:
        head.append(f"- as of (UTC): {m(evidence.as_of)}")
    counts = ", ".join(f"{k} {v}" for k, v in findings.summary.items() if v)
    head += [f"- counts: {m(counts or 'none')}", ""]
    items = sorted(findings.items, key=lambda f: f.severity.rank)
    body = [finding_markdown(item, limit=limit) for item in items]
    return "\n".join(head) + "\n" + "\n\n".join(body) + "\n"


@dataclass(frozen=True)
class MarkdownView:
    """Text that Jupyter renders as Markdown when it is a cell's last value. ``text`` is
    Markdown the kit wrote: any value from evidence in it goes through :func:`markdown_text`."""

    text: str

    def _repr_markdown_(self) -> str:
        return self.text


def show(findings: Findings, *, limit: int = 0) -> MarkdownView:
    """The findings as a notebook display (Markdown); ``limit`` rows of proof per finding
    (none by default: the story's tables showed them, and findings.json keeps them all)."""
    return MarkdownView(findings_markdown(findings, limit=limit))


def record(findings: Findings, path: str | os.PathLike[str]) -> MarkdownView:
    """Write ``findings.json`` to ``path`` and return the findings for display."""
    findings.write(path)
    return show(findings)


VERDICT_COLOURS = {"CLEAN": "#2e7d4f", "ACTION_NEEDED": "#b25e09", "INCOMPLETE_EVIDENCE": "#b3261e"}


_STEP = re.compile(r"(?:^|\s)(\d+)\) ")


def _e(value: str) -> str:
    """Text for the summary block: HTML-escaped, line breaks as spaces. The block reaches the
    report as a Markdown cell's HTML, which a blank line would end: what followed it would be
    read as Markdown (a link from evidence text, say)."""
    return html.escape(_LINE_BREAK.sub(" ", value))


def _steps_html(action: str) -> str:
    """An action as HTML: numbered steps (``1) ... 2) ...``) become a list, one step a line."""
    parts = _STEP.split(action)
    if len(parts) < 5 or parts[1] != "1":  # fewer than two steps: plain text
        return _e(action)
    lead, steps = parts[0].strip(), parts[2::2]
    items = "".join(f"<li>{_e(step.strip())}</li>" for step in steps)
    return (_e(lead) + " " if lead else "") + f"<ol style='margin:0.2em 0'>{items}</ol>"


STALE_ID = "run/stale-evidence"
"""The scheduler's item for evidence that ends long before as_of (``incidentkit.schedule``)."""


def incomplete_reasons(findings: Findings) -> str:
    """Why an INCOMPLETE_EVIDENCE verdict is one, in a sentence ("" for other verdicts): stale
    evidence (and the moment ages were judged at), a run that stopped, sources a flow could
    not fully use, rejected rows."""
    if findings.verdict.value != "INCOMPLETE_EVIDENCE":
        return ""
    reasons = []
    for item in findings.items:
        if item.id == STALE_ID:
            asked = item.rows[0].get("as_of") if item.rows else None
            judged = findings.evidence.as_of
            text = item.title
            if _earlier(judged, asked):
                text += f"; ages (leases, open invocations) judged at its end, {judged}"
            reasons.append(text)
        elif item.needs_action and (
            item.id.startswith("run/") or item.id.endswith(("/evidence-limits", "/rejects"))
        ):
            reasons.append(item.title)
    rejects = findings.summary.get("rejects", 0)
    if rejects and not any(item.id.endswith("/rejects") for item in findings.items):
        reasons.append(f"{rejects} rows of its sources were rejected")
    return "; ".join(dict.fromkeys(reasons))


def _earlier(first: Any, second: Any) -> bool:
    """Whether time text ``first`` is before ``second`` (False when either is no time)."""
    try:
        return bool(pd.Timestamp(str(first)) < pd.Timestamp(str(second)))
    except (ValueError, TypeError):
        return False


def summary_html(findings: Findings, *, actions: int = 5) -> str:
    """The block a report opens with: verdict, why it is incomplete (when it is), notes on the
    evidence (a window with no row), app, window, as_of and where it came from, counts,
    settings, and the first ``actions`` things to do, most severe first. Made from findings
    alone; every value in it escaped."""
    e = _e
    evidence = findings.evidence
    parameters = dict(evidence.parameters)
    sources = parameters.pop("settings_from", {})
    notes = parameters.pop("evidence_notes", [])
    app = parameters.pop("app_name", None)
    facts = [("flow", findings.flow), ("app", app or MISSING)]
    if evidence.window:
        facts.append(("window (UTC)", f"{evidence.window[0]} .. {evidence.window[1]}"))
    as_of_from = sources.get("as_of") if isinstance(sources, Mapping) else None
    facts.append(
        ("as of (UTC)", f"{evidence.as_of or MISSING}" + (f" ({as_of_from})" if as_of_from else ""))
    )
    counts = ", ".join(f"{k} {v}" for k, v in findings.summary.items() if v)
    facts.append(("counts", counts or MISSING))
    todo = sorted(
        (item for item in findings.items if item.needs_action),
        key=lambda f: f.severity.rank,
    )[:actions]
    colour = VERDICT_COLOURS[findings.verdict.value]
    parts = [
        '<section class="ik-summary" style="border-left:6px solid '
        f'{colour};padding:0.6em 1em;margin:0 0 1.5em 0;background:#fafafa">',
        f'<h1 style="margin-top:0">{e(evidence.title or findings.flow)}</h1>',
        f'<p style="font-size:1.4em;margin:0.2em 0;color:{colour}"><b>'
        f"{e(findings.verdict.value)}</b>: {e(VERDICT_WORDS[findings.verdict.value])}</p>",
        *(
            f'<p style="margin:0.3em 0"><b>Why incomplete:</b> {e(why)}</p>'
            for why in [incomplete_reasons(findings)]
            if why
        ),
        *(
            f'<p style="margin:0.3em 0;color:#b25e09"><b>Note:</b> {e(str(note))}</p>'
            for note in (notes if isinstance(notes, list) else [notes])
        ),
        '<table style="margin:0.5em 0">',
        *(
            f"<tr><th style='text-align:left;padding-right:1em'>{e(k)}</th>"
            f"<td style='text-align:left'>{e(str(v))}</td></tr>"
            for k, v in facts
        ),
        "</table>",
    ]
    if todo:
        parts.append("<h3>What to do first</h3><ol>")
        parts += [
            f"<li><b>{e(item.severity.value)}: {e(item.title)}</b>. {_steps_html(item.action)}</li>"
            for item in todo
        ]
        parts.append("</ol>")
    if parameters:
        parts.append("<details><summary>Settings of this run</summary><table>")
        parts += [
            f"<tr><th style='text-align:left;padding-right:1em'>{e(k)}</th>"
            f"<td style='text-align:left'>{e(plain(v))}</td>"
            f"<td style='text-align:left;color:#666'>{e(str(sources.get(k, '')))}</td></tr>"
            for k, v in parameters.items()
        ]
        parts.append("</table></details>")
    parts.append("</section>")
    return "\n".join(parts)
