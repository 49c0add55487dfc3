"""No value from evidence, the manifest or parameters becomes markup in any report.

Copies of bundled incidents get hostile text in every text field of every evidence kind the
flows show (title, tool, agent, thread, stack frame, ledger owner, histogram class, state key,
error code and message, session id): a live ``<img onerror>``, ``</script>`` and ``</title>``
break-outs, a backtick, a custom element and ``javascript:`` links, each piece carrying its
kind's marker. The files still parse (JSON and CSV are re-encoded, text gets payloads without
the characters its format splits on). ``run all`` runs every flow on each copy; its reports,
``index.html``, the executed notebooks' outputs (Markdown rendered as nbconvert renders it),
the postmortem draft (md and html) and the demo page are parsed as HTML, and no element,
attribute or link may come from the markers, while every marker must be read as text somewhere
(or the test would prove nothing).
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from matplotlib.text import Text
from nbconvert.filters.markdown_mistune import markdown2html_mistune

from incidentkit.batch import run_all
from incidentkit.demo import DemoRun, demo_packs, pack_parameters, write_demo_index
from incidentkit.plotting import new_axes, show
from incidentkit.postmortem.render import postmortem_command
from incidentkit.report import findings_markdown, markdown_text, summary_html, table

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
pytestmark = pytest.mark.xdist_group("hostile_values")  # one worker runs each hostile copy
MARK = "ik_"
"""Every marker starts so: no base64 (an embedded PNG) holds an underscore."""
ELEMENT = "x-ikmark"
"""A custom element only evidence text holds."""


def marker(kind: int) -> str:
    return f"{MARK}{kind:02d}_q"


def hostile(kind: int, *, spaces: bool = True, parens: bool = True) -> str:
    """Every attack on one line, with no quote, comma or backslash (so it fits a CSV cell, a
    thread name and a TOML string); without ``spaces`` it fits a log token and a histogram
    line too (a browser still reads ``<img/src=x/onerror=...>`` as an image, a Markdown
    renderer does not); ``parens`` adds Markdown links and a call. The ``$...^$`` is mathtext
    that fails to parse: a plot label must draw it as written."""
    m = marker(kind)
    call = f"alert({m})" if parens else m
    image = f"<img src=x onerror={call}>" if spaces else f"<img/src=x/onerror={call}>"
    text = (
        f"{image}</script><script>{call}</script></title><script>{call}</script>"
        f"`<{ELEMENT}>{m}</{ELEMENT}>javascript:{m}${m}^$"
    )
    return text + (f"[{m}](javascript:{call})<javascript:{call}>" if parens else "")


TITLE, TOOL, AGENT, THREAD, FRAME, OWNER, CLASS, KEY, ERROR_CODE, ERROR, SESSION = range(1, 12)
KINDS = {
    TITLE: "manifest title",
    TOOL: "tool name",
    AGENT: "agent (event author)",
    THREAD: "thread name",
    FRAME: "stack frame",
    OWNER: "ledger owner",
    CLASS: "histogram class name",
    KEY: "state key",
    ERROR_CODE: "error code",
    ERROR: "error message",
    SESSION: "session id",
}


@dataclass(frozen=True)
class Incident:
    """A bundled incident and the hostile values put into its copy."""

    pack: str
    kinds: tuple[int, ...]
    replace: Mapping[str, str] = field(default_factory=dict)
    """Substrings replaced in every file (a name that several sources carry stays one name)."""
    exact: Mapping[str, str] = field(default_factory=dict)
    """JSON strings (keys and values) replaced when equal (state keys, which are common words)."""
    owners: bool = False
    """Every ledger owner gets the OWNER payload."""
    error_in: str | None = None
    """A session whose first agent event gets an error code and message."""


SESSION_ID = "e3e70682-c209-4cac-a29f-6fbed82c07cd"
INCIDENTS = (
    Incident(
        "latency_cliff",
        (TITLE, TOOL, AGENT, THREAD, FRAME, OWNER),
        replace={
            "order_lookup": "order_lookup" + hostile(TOOL),
            "support_agent": "support_agent" + hostile(AGENT),
            '"tool-exec-': '"tool-exec' + hostile(THREAD) + "-",
            ".fetch(OrderLookupClient.java:": f".fetch{hostile(FRAME, spaces=False, parens=False)}"
            "(OrderLookupClient.java:",
        },
        owners=True,
    ),
    Incident(
        "vanished_state",
        (TITLE, AGENT, KEY, ERROR_CODE, ERROR, SESSION),
        replace={
            SESSION_ID: SESSION_ID + hostile(SESSION, spaces=False),
            "cart_agent": "cart_agent" + hostile(AGENT),
        },
        exact={key: key + hostile(KEY) for key in ("cart", "loyalty_tier", "draft_reply")},
        error_in=SESSION_ID,
    ),
    Incident(
        "slow_death",
        (TITLE, CLASS),
        replace={
            "com.example.agent.RunnerCache$Entry": "com.example.agent.RunnerCache$Entry"
            + hostile(CLASS, spaces=False, parens=False)
        },
    ),
)


# --- the hostile copy -------------------------------------------------------------------------


def _renamed(text: str, incident: Incident) -> str:
    for old, new in incident.replace.items():
        text = text.replace(old, new)
    return text


def _walk(value: Any, rename: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return rename(value)
    if isinstance(value, list):
        return [_walk(v, rename) for v in value]
    if isinstance(value, dict):
        return {rename(k): _walk(v, rename) for k, v in value.items()}
    return value


def _with_error(record: dict[str, Any], incident: Incident, done: list[bool]) -> dict[str, Any]:
    """The error code and message on the session's first agent event (ADK Java keys)."""
    session = record.get("sessionId")
    if done or incident.error_in is None or session is None or record.get("author") == "user":
        return record
    if not str(session).startswith(incident.error_in):
        return record
    done.append(True)
    return {**record, "errorCode": "IK_" + hostile(ERROR_CODE), "errorMessage": hostile(ERROR)}


def _json_text(text: str, incident: Incident, lines: bool, done: list[bool]) -> str:
    def rename(value: str) -> str:
        return _renamed(incident.exact.get(value, value), incident)

    if not lines:
        return json.dumps(_walk(json.loads(text), rename), ensure_ascii=False, indent=1)
    out = []
    for line in text.splitlines():
        if line.strip():
            record = _walk(json.loads(line), rename)
            if isinstance(record, dict):
                record = _with_error(record, incident, done)
            line = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
        out.append(line)
    return "\n".join(out) + "\n"


def _csv_text(text: str, incident: Incident) -> str:
    rows = list(csv.reader(io.StringIO(text, newline="")))
    owner = rows[0].index("owner") if incident.owners and "owner" in rows[0] else None
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for number, row in enumerate(rows):
        cells = [_renamed(cell, incident) for cell in row]
        if owner is not None and number and cells[owner]:
            cells[owner] += hostile(OWNER)
        writer.writerow(cells)
    return buffer.getvalue()


def _toml_text(text: str, incident: Incident) -> str:
    title = f'Incident <img src=x onerror=alert(1)> {hostile(TITLE)} "quoted" {hostile(TITLE)}'
    text = re.sub(r"(?m)^title = .*$", lambda _: "title = " + json.dumps(title), text)
    return _renamed(text, incident)


def hostile_copy(incident: Incident, to: Path) -> Path:
    """A copy of the bundled incident with the incident's hostile values in it."""
    shutil.copytree(FIXTURES / incident.pack, to)
    done: list[bool] = []
    for path in sorted(p for p in to.rglob("*") if p.is_file()):
        text = path.read_text(encoding="utf-8")
        if path.name == "evidence.toml":
            text = _toml_text(text, incident)
        elif path.suffix in (".json", ".jsonl"):
            text = _json_text(text, incident, path.suffix == ".jsonl", done)
        elif path.suffix == ".csv":
            text = _csv_text(text, incident)
        else:  # logs, thread dumps, histograms: the payloads hold nothing their formats split on
            text = _renamed(text, incident)
        path.write_text(text, encoding="utf-8")
    assert bool(done) == (incident.error_in is not None)
    return to


# --- what a reader's browser would build ------------------------------------------------------

URL_ATTRIBUTES = {"href", "src", "action", "formaction", "xlink:href", "data", "poster", "srcdoc"}
RAW_TEXT = {"script", "style"}


class LiveMarkup(HTMLParser):
    """Collects what in a page came from evidence text: an element or attribute holding a
    marker, an event handler attribute, a ``javascript:`` URL, a marker inside a script."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []
        self.text: list[str] = []
        self.raw: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.raw.append(tag)
        if tag == ELEMENT:
            self.problems.append(f"element <{tag}>")
        for name, value in attrs:
            text = value or ""
            squeezed = re.sub(r"[\s\x00-\x1f]+", "", text).lower()
            if name.startswith("on") or MARK in name:
                self.problems.append(f"attribute {name}={text!r} on <{tag}>")
            elif name in URL_ATTRIBUTES and squeezed.startswith(("javascript:", "vbscript:")):
                self.problems.append(f"{name}={text!r} on <{tag}>")
            elif MARK in text and not (name == "id" or (name == "href" and text[:1] == "#")):
                self.problems.append(f"{name}={text!r} on <{tag}>")  # an anchor's id is fine

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if self.raw and self.raw[-1] == tag:
            self.raw.pop()

    def close(self) -> None:
        if self.raw and self.raw[-1] in RAW_TEXT and MARK in self.rawdata:  # never closed
            self.problems.append(f"<{self.raw[-1]}> holding {self.rawdata.strip()[:80]!r}")
        super().close()

    def handle_data(self, data: str) -> None:
        if MARK in data and self.raw and self.raw[-1] in RAW_TEXT:
            self.problems.append(f"<{self.raw[-1]}> holding {data.strip()[:80]!r}")
        self.text.append(data)


def parsed(page: str) -> LiveMarkup:
    parser = LiveMarkup()
    parser.feed(page)
    parser.close()
    return parser


def live_markup(page: str) -> list[str]:
    """What in ``page`` (HTML) came alive from evidence text."""
    return parsed(page).problems


def notebook_pages(notebook: Path) -> Iterator[tuple[str, str]]:
    """Each rich output of an executed notebook as the HTML a reader gets: ``text/html`` as it
    is, ``text/markdown`` rendered as nbconvert renders it (raw HTML kept)."""
    document = json.loads(notebook.read_text(encoding="utf-8"))
    for number, cell in enumerate(document["cells"]):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "text/html" in data:
                yield f"{notebook.name} cell {number} text/html", "".join(data["text/html"])
            if "text/markdown" in data:
                source = "".join(data["text/markdown"])
                yield f"{notebook.name} cell {number} text/markdown", markdown2html_mistune(source)


# --- the runs ---------------------------------------------------------------------------------


@dataclass
class HostileRun:
    incident: Incident
    out: Path
    exit_code: int
    parameters: Mapping[str, str]
    pages: dict[str, str] = field(default_factory=dict)
    """Every page a reader opens, by name: reports, index.html, notebook outputs, postmortem."""


@pytest.fixture(scope="module", params=INCIDENTS, ids=lambda incident: incident.pack)
def hostile_run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> HostileRun:
    incident: Incident = request.param
    root = tmp_path_factory.mktemp(f"hostile-{incident.pack}")
    evidence = hostile_copy(incident, root / "evidence")
    parameters = pack_parameters(evidence, demo_packs(FIXTURES).apps.get(evidence.name))
    result = run_all(evidence, root / "out", parameters=parameters, jobs=2)
    run = HostileRun(incident, result.out, result.exit_code, parameters)
    for page in sorted(result.out.rglob("*.html")):
        run.pages[str(page.relative_to(result.out))] = page.read_text(encoding="utf-8")
    for notebook in sorted(result.out.rglob("*.ipynb")):
        run.pages.update(notebook_pages(notebook))
    return run


@pytest.mark.notebook
def test_every_flow_reads_the_hostile_copy(hostile_run: HostileRun) -> None:
    summary = json.loads((hostile_run.out / "summary.json").read_text(encoding="utf-8"))
    ran = summary["flows"]
    assert ran and hostile_run.exit_code in (0, 1, 2), summary
    for name, flow in ran.items():
        if flow.get("status") != "skipped":
            assert flow["exit_code"] in (0, 1, 2), (name, flow)
            findings = json.loads((hostile_run.out / name / "findings.json").read_text("utf-8"))
            assert findings["summary"].get("rejects", 0) == 0, (name, findings["summary"])


@pytest.mark.notebook
def test_no_flow_report_or_notebook_output_holds_live_markup(hostile_run: HostileRun) -> None:
    reports = [name for name in hostile_run.pages if name.endswith(".html")]
    assert "index.html" in reports and len(reports) >= 4, reports
    assert any("text/markdown" in name for name in hostile_run.pages)
    assert any("text/html" in name for name in hostile_run.pages)
    found = {name: live_markup(page) for name, page in hostile_run.pages.items()}
    assert {name: problems for name, problems in found.items() if problems} == {}


@pytest.mark.notebook
def test_a_flow_report_loads_and_runs_no_script(hostile_run: HostileRun) -> None:
    """nbconvert's page would load require.js, MathJax (which typesets a ``$...$`` in evidence
    as TeX) and mermaid from a CDN: the kit's report template keeps none."""
    reports = [name for name in hostile_run.pages if name.endswith(".html")]
    for name in reports:
        page = hostile_run.pages[name]
        assert "<script" not in page.lower(), name
        assert "mathjax" not in page.lower(), name


@pytest.mark.notebook
def test_every_hostile_value_reaches_a_report_as_text(hostile_run: HostileRun) -> None:
    """Else the test above would prove nothing for that kind of value."""
    flow_reports = "".join(
        "".join(parsed(page).text)
        for name, page in hostile_run.pages.items()
        if name.endswith(".html") and name != "index.html"
    )
    missing = [KINDS[k] for k in hostile_run.incident.kinds if marker(k) not in flow_reports]
    assert missing == []
    for kind in hostile_run.incident.kinds:  # each piece read whole, as text
        pieces = {hostile(kind, spaces=s, parens=p) for s in (True, False) for p in (True, False)}
        assert any(piece in flow_reports for piece in pieces), KINDS[kind]


@pytest.mark.notebook
@pytest.mark.parametrize("fmt", ["md", "html"])
def test_the_postmortem_draft_holds_no_live_markup(hostile_run: HostileRun, fmt: str) -> None:
    draft = postmortem_command(hostile_run.out, fmt=fmt)
    page = markdown2html_mistune(draft) if fmt == "md" else draft
    assert live_markup(page) == []
    assert marker(TITLE) in "".join(parsed(page).text)


@pytest.mark.notebook
def test_the_demo_page_holds_no_live_markup(hostile_run: HostileRun, tmp_path: Path) -> None:
    run = DemoRun(
        hostile_run.incident.pack, hostile_run.out, hostile_run.exit_code, hostile_run.parameters
    )
    page = write_demo_index(tmp_path, [run]).read_text(encoding="utf-8")
    assert live_markup(page) == []
    assert marker(TITLE) in "".join(parsed(page).text)


# --- the instruments themselves ---------------------------------------------------------------


def test_the_checker_finds_every_payload_left_live() -> None:
    pieces = re.findall(r"<[^>]*>[^<]*|\[[^]]*\]\([^)]*\)", hostile(1))
    raw = [piece for piece in pieces if not piece.startswith("</")]
    assert len(raw) >= 5
    for piece in raw:
        rendered = markdown2html_mistune(f"text {piece} text")
        assert live_markup(rendered), piece  # nbconvert's renderer keeps each one live
    assert live_markup(f"<p>{hostile(1)}</p>")
    assert live_markup('<a href=" JaVa\tscript:x()">a</a>')
    assert live_markup("<p>a</p>") == [] and live_markup(f'<h3 id="{marker(1)}">x</h3>') == []


def test_the_kit_s_escaping_leaves_every_payload_dead() -> None:
    import pandas as pd

    from incidentkit.findings import Finding, Findings, Provenance, Severity, Verdict

    value = hostile(1)
    assert live_markup(markdown2html_mistune(f"- {markdown_text(value)}")) == []
    assert live_markup(table(pd.DataFrame({value: [value]})).to_html()) == []
    item = Finding("x/y", Severity.CRITICAL, value, value, value, ({value: value},))
    findings = Findings("x", Verdict.ACTION_NEEDED, {value: 1}, (item,), Provenance(value))
    assert live_markup(markdown2html_mistune(findings_markdown(findings))) == []
    assert live_markup(markdown2html_mistune(summary_html(findings))) == []
    text = "".join(parsed(markdown2html_mistune(findings_markdown(findings))).text)
    assert text.count(value) >= 4  # title, detail, action, row: each read as the text it is


def test_a_label_from_evidence_is_drawn_as_written() -> None:
    """Mathtext in a label (a ``$`` pair in a tool or thread name) neither fails nor renders."""
    ax = new_axes(None, (6.0, 3.0))
    ax.barh(["tool$a^$", "$x$"], [1, 2])  # tick labels, made while drawing
    ax.set_title("thread $_$")
    ax.annotate(r"$\nosuch$", (0.5, 0.5))
    assert show(ax)._repr_png_().startswith(b"\x89PNG")
    figure = ax.get_figure(root=True)
    assert figure is not None
    texts = {t.get_text() for t in figure.findobj(Text)}
    assert {"tool$a^$", "$x$", "thread $_$", r"$\nosuch$"} <= texts
