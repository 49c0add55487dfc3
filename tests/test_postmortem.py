"""Postmortem drafts from findings: the bundled latency incident against its findings and truth,
a `run all` folder, determinism, the TODO marker, incomplete evidence, the errors, and findings
carrying hostile text (no markup of theirs comes alive in the draft, md or html)."""

from __future__ import annotations

import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import mistune
import pandas as pd
import pytest

from incidentkit.errors import ParameterError
from incidentkit.findings import Findings
from incidentkit.flows import latency_cliff, orphans, overview, runaway
from incidentkit.postmortem import TODO, collect_findings, postmortem_command
from incidentkit.postmortem.text import code, md
from incidentkit.runner import failed_findings

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _latency() -> Findings:
    incident, settings = latency_cliff.setup(FIXTURES / "latency_cliff", app_name="support")
    return latency_cliff.findings(latency_cliff.triage(incident, settings), incident, settings)


def _orphans() -> Findings:
    incident, settings = orphans.setup(FIXTURES / "crash_recovery", app_name="invoicing")
    return orphans.findings(orphans.triage(incident, settings), incident, settings)


def _runaway() -> Findings:
    incident, settings = runaway.setup(FIXTURES / "runaway", app_name="support")
    return runaway.findings(runaway.triage(incident, settings), incident, settings)


@pytest.fixture(scope="module")
def lc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One flow's output folder: the bundled latency cliff's findings.json."""
    out = tmp_path_factory.mktemp("lc")
    _latency().write(out / "findings.json")
    return out


@pytest.fixture(scope="module")
def run_all(tmp_path_factory: pytest.TempPathFactory, lc: Path) -> Path:
    """A `run all` folder: <flow>/findings.json per flow, a report beside one, a summary.json."""
    out = tmp_path_factory.mktemp("all")
    for flow, findings in (
        ("latency_cliff", None),
        ("orphans", _orphans()),
        ("runaway", _runaway()),
    ):
        (out / flow).mkdir()
        if findings is None:
            shutil.copy(lc / "findings.json", out / flow / "findings.json")
        else:
            findings.write(out / flow / "findings.json")
    (out / "orphans" / "orphans.html").write_text("<html></html>", encoding="utf-8")
    flows = {
        flow: {"verdict": "ACTION_NEEDED", "exit_code": 1, "findings": f"{flow}/findings.json"}
        for flow in ("latency_cliff", "orphans", "runaway", "overview")  # overview: no findings
    }
    summary = {
        **{"schema": "incidentkit.run-all/v1", "generated_by": "incidentkit 0.1.0"},
        **{"exit_code": 1, "flows": flows, "pending": []},
        "skipped": {"session": "needs -p session_id"},
    }
    (out / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return out


def _section(text: str, title: str) -> str:
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _timeline_rows(text: str) -> list[list[str]]:
    rows = [line for line in _section(text, "Timeline").splitlines() if line.startswith("| 2")]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows]


def test_latency_timeline_is_sorted_and_matches_the_findings_and_truth(lc: Path) -> None:
    truth = json.loads((FIXTURES / "latency_cliff" / "truth.json").read_text())["expected"]
    findings = Findings.read(lc / "findings.json")
    rows = _timeline_rows(postmortem_command(lc, fmt="md"))
    times = [pd.Timestamp(row[0]) for row in rows]
    assert times == sorted(times)
    cliff = [row for row in rows if row[1].startswith("latency cliff")]
    assert len(cliff) == 1 and pd.Timestamp(cliff[0][0]) == pd.Timestamp(truth["cliff"])
    assert "latency_cliff/cliff`, row 1" in cliff[0][2]
    opened = {r["invocation_id"]: r for r in findings.items[1].rows}
    assert findings.items[1].id == "latency_cliff/open-invocations"
    starts = {row[1].split()[1]: row[0] for row in rows if row[1].startswith("invocation ")}
    assert sorted(starts) == truth["open_invocations"]  # every open invocation, by the truth
    # at the findings' time, in the draft's one format: always to the millisecond
    assert all(pd.Timestamp(starts[i]) == pd.Timestamp(opened[i]["started_at"]) for i in starts)
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", row[0]) for row in rows)


def test_latency_impact_numbers_match_the_findings_and_truth(lc: Path) -> None:
    truth = json.loads((FIXTURES / "latency_cliff" / "truth.json").read_text())["expected"]
    impact = _section(postmortem_command(lc, fmt="md"), "Impact")
    runs = f"**Runs affected**: {truth['runs_since_cliff']} runs started since the cliff"
    assert runs in impact
    assert "p50 3.7 s → 55 s, p95 4.3 s → 59 s" in impact  # truth: 3708 -> 55128, 4275 -> 58982
    invocations = f"**Invocations affected**: {truth['open_since_cliff']} invocations open past "
    assert invocations + "the 60 s client timeout" in impact
    assert "**Sessions affected**: 3 sessions" in impact
    assert "**Duration**: ≥ 6 min: from the cliff at 2026-11-29T03:10:00.000Z" in impact
    assert "**Users affected**: n/a — the latency_cliff rows carry no user id" in impact
    assert "**Tokens**: n/a — " in impact
    assert f"**Stuck threads**: {truth['threads']['stuck_count']} threads" in impact
    assert (
        "(findings.json → " not in impact
    )  # proof is a link: ([findings.json](findings.json) → ...
    assert "([findings.json](findings.json) → `latency_cliff/cliff`, row 1;" in impact


def test_latency_detection_names_the_sooner_alert_at_three_quarters_of_the_timeout(
    lc: Path,
) -> None:
    detection = _section(postmortem_command(lc, fmt="md"), "Detection")
    # The first open invocation started 03:11:21.012: 60 s later the user gave up, 45 s sooner.
    assert "gave up at 2026-11-29T03:12:21.012Z" in detection
    assert "open longer than 45 s" in detection and "fired at 2026-11-29T03:12:06.012Z" in detection
    assert "no error alert fires" in detection


def test_action_items_are_typed_owned_and_proven(lc: Path) -> None:
    items = _section(postmortem_command(lc, fmt="md"), "Action items")
    rows = [line for line in items.splitlines() if re.match(r"\| \d+ \|", line)]
    kinds = [row.split(" | ")[1] for row in rows]
    assert kinds == ["mitigate", "prevent", "prevent", "prevent", "process"]
    assert all(" | _owner_ | " in row and "findings.json" in row for row in rows)
    assert "read timeout of 5 s" in rows[1] and "open longer than 45 s" in rows[4]


def test_the_draft_has_every_section_and_marks_what_a_person_writes(lc: Path) -> None:
    text = postmortem_command(lc, fmt="md")
    headings = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    assert headings == [
        "Summary",
        "Impact",
        "Timeline",
        "Root cause and trigger",
        "Detection",
        "Resolution",
        "Action items",
        "Evidence",
    ]
    todos = [line for line in text.splitlines() if TODO in line]
    assert len(todos) >= 6 and all(line.startswith(f"> {TODO} ") for line in todos[1:])
    for section in ("Summary", "Timeline", "Detection", "Resolution", "Action items"):
        assert f"> {TODO}" in _section(text, section)
    evidence = _section(text, "Evidence")
    assert "- window (UTC): 2026-11-29T02:55:00.000Z .. 2026-11-29T03:16:00.000Z" in evidence
    assert "- as of (UTC): 2026-11-29T03:16:00.000Z" in evidence
    assert "`client_timeout_s` = `60.0` (\\[apps.support\\])" in evidence  # escaped text
    assert "- rejects: 0 " in evidence and "- coverage: " in evidence


def test_the_wording_is_blameless(run_all: Path) -> None:
    text = postmortem_command(run_all, fmt="md").lower().replace("blameless", "")
    for word in (
        "blame",
        "fault",
        "human error",
        "should have",
        "careless",
        "mistake",
        "negligent",
    ):
        assert not re.search(rf"\b{word}", text), word


def test_the_same_findings_give_the_same_draft_byte_for_byte(run_all: Path, tmp_path: Path) -> None:
    first = postmortem_command(run_all, fmt="md")
    moved = tmp_path / "elsewhere"
    shutil.copytree(run_all, moved)
    assert postmortem_command(moved, fmt="md") == first  # no clock, no absolute path
    assert postmortem_command(run_all, fmt="html") == postmortem_command(moved, fmt="html")
    assert str(run_all) not in first


def test_a_run_all_folder_reads_every_flow_with_relative_links(run_all: Path) -> None:
    assert [ff.rel for ff in collect_findings(run_all)] == [
        "latency_cliff/findings.json",
        "orphans/findings.json",
        "runaway/findings.json",
    ]
    text = postmortem_command(run_all, fmt="md")
    impact = _section(text, "Impact")
    assert "runaway: 30,194,944 by the flagged invocations, 99% of the app's 30,395,252" in impact
    assert "orphans: 10 orphaned runs" in impact
    assert "send-invoice:INV-1017 (2 effects)" in impact
    assert "([runaway/findings.json](runaway/findings.json) → summary.runaway_tokens" in impact
    rows = _timeline_rows(text)
    assert [pd.Timestamp(r[0]) for r in rows] == sorted(pd.Timestamp(r[0]) for r in rows)
    leases = [r for r in rows if "held by worker-3" in r[1]]
    assert [r[1].rsplit("(", 1)[1] for r in leases] == ["first of 10)", "last of 10)"]
    assert "`incidentkit actions OUT/orphans --kind ASK_DOWNSTREAM`" in text
    assert "report [orphans/orphans.html](orphans/orphans.html)" in text
    assert "[summary.json](summary.json) (exit 1)" in text
    assert "- skipped: session (needs -p session_id)" in text
    assert "- in summary.json without a findings.json here: overview" in text
    assert "maxLlmCalls 20 (recommended" in _section(text, "Detection")


def test_html_is_a_standalone_page_with_the_tables(lc: Path) -> None:
    page = postmortem_command(lc, fmt="html")
    assert page.startswith("<!DOCTYPE html>") and page.endswith("</html>\n")
    assert page.count("<table>") == 2  # the timeline and the action items
    assert '<a href="findings.json">findings.json</a>' in page
    assert "TODO(author):" in page and "<script" not in page


def test_a_run_that_stopped_early_gives_a_draft_that_says_so(tmp_path: Path) -> None:
    message = "ParameterError: app_name is empty and the evidence does not say which app"
    failed_findings("orphans", message, {"app_name": ""}).write(tmp_path / "findings.json")
    text = postmortem_command(tmp_path, fmt="md")
    assert "> **Evidence incomplete (orphans).** The findings are INCOMPLETE_EVIDENCE" in text
    assert message in text and "`run/error`" in text
    impact = _section(text, "Impact")
    assert impact.strip().splitlines() == [
        "- n/a — the orphans run stopped before its verdict: nothing to count (see Evidence "
        "incomplete above)",
        "",
        f"> {TODO} add what the evidence cannot count (users told, tickets, money refunded).",
    ]
    assert text.count(message) == 1  # in the note only
    assert "- No findings here name a cause" in _section(text, "Root cause and trigger")
    assert "- rejects: n/a — the findings count none (the run stopped first)" in text
    assert "- window (UTC): n/a — not recorded" in text


def test_rejected_rows_give_a_draft_that_says_the_evidence_is_incomplete(tmp_path: Path) -> None:
    incident, settings = orphans.setup(FIXTURES / "broken" / "malformed", app_name="invoicing")
    findings = orphans.findings(orphans.triage(incident, settings), incident, settings)
    findings.write(tmp_path / "findings.json")
    text = postmortem_command(tmp_path, fmt="md")
    assert findings.verdict.value == "INCOMPLETE_EVIDENCE"
    assert "**Evidence incomplete (orphans).**" in text and "could not be read" in text
    assert f"- rejects: {findings.summary['rejects']} " in text


def test_a_firestore_export_gives_a_draft_that_says_what_it_cannot_tell(tmp_path: Path) -> None:
    pack = FIXTURES / "vanished_state-firestore"
    incident, settings = orphans.setup(pack, app_name="shop")
    findings = orphans.findings(orphans.triage(incident, settings), incident, settings)
    findings.write(tmp_path / "findings.json")
    text = postmortem_command(tmp_path, fmt="md")
    assert findings.verdict.value == "INCOMPLETE_EVIDENCE" and "orphans" not in findings.summary
    assert "**Evidence incomplete (orphans).**" in text and "no item says why" not in text
    assert "come from a Firestore export" in text and "`orphans/evidence-limits`" in text
    runs = next(line for line in text.splitlines() if line.startswith("- **Runs affected**"))
    assert "n/a" in runs and "0 orphaned runs" not in text
    causes = text.split("## Root cause", 1)[1].split("\n## ", 1)[0]
    assert "- **Evidence**: " in causes and "**Contributing**" not in causes


def test_a_folder_without_findings_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ParameterError, match=r"no findings\.json in OUT.*run a flow first"):
        postmortem_command(tmp_path, fmt="md")
    with pytest.raises(ParameterError, match="OUT is not a folder"):
        postmortem_command(tmp_path / "missing", fmt="md")


def test_an_unreadable_findings_file_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "orphans").mkdir()
    (tmp_path / "orphans" / "findings.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ParameterError, match=r"cannot read orphans/findings\.json.*not JSON"):
        postmortem_command(tmp_path, fmt="md")


def test_an_unknown_format_lists_the_formats(lc: Path) -> None:
    with pytest.raises(
        ParameterError, match=r"unknown postmortem format: 'pdf'\. use one of md, html"
    ):
        postmortem_command(lc, fmt="pdf")


def _same_window_all(tmp_path: Path, run_all: Path, overview: Findings | None = None) -> Path:
    """``run_all`` with the latency cliff's window and as_of on every flow, and an overview."""
    out = tmp_path / "all"
    shutil.copytree(run_all, out)
    window = Findings.read(out / "latency_cliff" / "findings.json").evidence
    for flow in ("orphans", "runaway"):
        data = json.loads((out / flow / "findings.json").read_text(encoding="utf-8"))
        data["evidence"]["window"], data["evidence"]["as_of"] = list(window.window), window.as_of
        (out / flow / "findings.json").write_text(json.dumps(data), encoding="utf-8")
    if overview is not None:
        (out / "overview").mkdir()
        overview.write(out / "overview" / "findings.json")
    return out


def _overview() -> Findings:
    incident, settings = overview.setup(FIXTURES / "latency_cliff", app_name="support")
    return overview.findings(overview.triage(incident, settings), incident, settings)


def test_flows_that_share_the_window_and_as_of_give_one_row_each(
    run_all: Path, tmp_path: Path
) -> None:
    text = postmortem_command(_same_window_all(tmp_path, run_all), fmt="md")
    rows = _timeline_rows(text)
    edges = [r for r in rows if r[1].startswith(("the evidence window", "the flows judged"))]
    assert [r[:2] for r in edges] == [
        ["2026-11-29T02:55:00.000Z", "the evidence window opens"],
        ["2026-11-29T03:16:00.000Z", "the evidence window closes"],
        ["2026-11-29T03:16:00.000Z", "the flows judged at as_of"],
    ]
    for flow in ("latency_cliff", "orphans", "runaway"):  # each flow's proof on the one row
        assert f"([{flow}/findings.json]({flow}/findings.json) → evidence.as_of)" in edges[2][2]
    # windows that differ keep one row per window, named by its flows
    differ = _timeline_rows(postmortem_command(run_all, fmt="md"))
    opens = [r[1] for r in differ if "window opens" in r[1]]
    assert len(opens) == len(set(opens)) >= 2 and all(": the evidence" in o for o in opens)


def test_each_measure_is_listed_once_from_the_flows_that_count_it(
    run_all: Path, tmp_path: Path
) -> None:
    text = postmortem_command(_same_window_all(tmp_path, run_all, _overview()), fmt="md")
    impact = _section(text, "Impact")
    assert "overview" not in impact  # the triage card counts nothing itself
    assert impact.count("**Users affected**") == 1
    assert "- **Users affected**: n/a — none of the findings read (latency_cliff, orphans, " in (
        impact
    )
    assert "carry no user id" not in impact and "this draft reads no" not in impact
    tokens = [line for line in impact.splitlines() if "Tokens" in line]
    assert tokens == [line for line in impact.splitlines() if line.startswith("- **Tokens**: ")]
    assert "runaway/findings.json" in tokens[0] and "n/a" not in tokens[0]
    assert impact.count("n/a") == 1


def test_the_overview_and_clean_flows_give_no_action_or_detection(lc: Path, tmp_path: Path) -> None:
    out = tmp_path / "all"
    for flow, findings in (
        ("latency_cliff", Findings.read(lc / "findings.json")),
        ("overview", _overview()),
        ("runaway", _latency_fixture_runaway()),
    ):
        (out / flow).mkdir(parents=True)
        findings.write(out / flow / "findings.json")
    assert Findings.read(out / "runaway" / "findings.json").verdict.value == "CLEAN"
    text = postmortem_command(out, fmt="md")
    assert "- overview: ACTION_NEEDED" in _section(text, "Summary")  # its card stays in the summary
    assert "### overview" in _section(text, "Evidence")
    items = _section(text, "Action items")
    assert "Open, in this order" not in items and "overview" not in items
    assert "runaway" not in items
    assert "TODO(author): prevention" not in items
    kinds = [row.split(" | ")[1] for row in items.splitlines() if re.match(r"\| \d+ \|", row)]
    assert kinds == ["mitigate", "prevent", "prevent", "prevent", "process"]
    causes = _section(text, "Root cause and trigger")
    assert "### overview" not in causes and "### runaway" not in causes
    assert "runaway (CLEAN): nothing in these findings needs action." in causes
    detection = _section(text, "Detection")
    assert "maxLlmCalls" not in detection and "runaway" not in detection
    assert "Open, in this order" not in text.split("## Evidence")[0]


def _latency_fixture_runaway() -> Findings:
    incident, settings = runaway.setup(FIXTURES / "latency_cliff", app_name="support")
    return runaway.findings(runaway.triage(incident, settings), incident, settings)


def test_failed_flows_share_one_evidence_incomplete_note(lc: Path, tmp_path: Path) -> None:
    message = "ParameterError: app_name is empty and the evidence does not say which app"
    (tmp_path / "latency_cliff").mkdir()
    shutil.copy(lc / "findings.json", tmp_path / "latency_cliff" / "findings.json")
    for flow in ("orphans", "runaway"):
        (tmp_path / flow).mkdir()
        failed_findings(flow, message, {"app_name": ""}).write(tmp_path / flow / "findings.json")
    text = postmortem_command(tmp_path, fmt="md")
    assert text.count("**Evidence incomplete") == 1
    assert "> **Evidence incomplete (orphans, runaway).**" in text
    assert text.count(message) == 1
    note = next(line for line in text.splitlines() if message in line)
    assert note.startswith("> - orphans, runaway: the run stopped before its verdict: ")
    assert "([orphans/findings.json](orphans/findings.json) → `run/error`" in note
    assert "([runaway/findings.json](runaway/findings.json) → `run/error`" in note
    impact = _section(text, "Impact")
    assert impact.count("stopped before its verdict") == 1  # one line, no long text
    assert "82 runs started since the cliff" in impact
    causes = _section(text, "Root cause and trigger")
    assert "### orphans" not in causes and "### runaway" not in causes
    assert "### latency_cliff" in causes
    items = _section(text, "Action items")
    assert items.count("Fix what the message says") == 1  # one item, both proofs


# ---------------------------------------------------------------------------- hostile values

MARK = "pmx"


def _hostile(n: int) -> str:
    """Markup, a code span break-out, links and Markdown syntax, carrying marker ``n``."""
    m = f"{MARK}{n:03d}q"
    return (
        f" <img src=x onerror=alert('{m}')></title><script>alert('{m}')</script>"
        f"`<x-{m}>{m}</x-{m}>`` [{m}](javascript:alert(1)) <javascript:alert('{m}')> "
        f"&lt;b&gt;{m} | *{m}* \n\n<div>{m}</div>\n# {m}"
    )


class _Hostile:
    """Appends a numbered :func:`_hostile` to every text value that is not a time."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, value: object) -> object:
        if isinstance(value, str) and (value == "" or _not_time(value)):
            self.count += 1
            return value + _hostile(self.count)
        if isinstance(value, list):
            return [self(v) for v in value]
        if isinstance(value, dict):
            return {k: self(v) for k, v in value.items()}
        return value


def _not_time(text: str) -> bool:
    try:
        return pd.Timestamp(text).tzinfo is None
    except ValueError:
        return True


def _hostile_copy(run_all: Path, to: Path) -> tuple[Path, int]:
    """``run_all`` with hostile text in every text field its findings carry (titles, details,
    actions, row values, parameters, summary names, the tool's name and an extra item's id)."""
    shutil.copytree(run_all, to)
    spoil = _Hostile()
    for path in sorted(to.glob("*/findings.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        data["generated_by"] += _hostile(901)
        evidence = data["evidence"]
        evidence["title"] = (evidence["title"] or "") + _hostile(900)
        evidence["parameters"] = spoil(evidence["parameters"])
        evidence["parameters"]["tool" + _hostile(0)] = "a``b`"  # a key and a value with backticks
        data["summary"]["rejected" + _hostile(0)] = 1
        for item in data["items"]:
            for key in ("title", "detail", "action"):
                item[key] = spoil(item[key])
            item["rows"] = spoil(item["rows"])
        data["items"].append(
            {
                **{"id": f"{data['flow']}/x`y" + _hostile(0), "severity": "WARNING"},
                **{"title": spoil("t"), "detail": spoil("d"), "action": spoil("a")},
                **{"count": 1, "rows": [{"at": "2026-11-29T03:00:00Z", "what": spoil("w")}]},
            }
        )
        path.write_text(json.dumps(data), encoding="utf-8")
    return to, spoil.count


class _Page(HTMLParser):
    """The elements, attributes and text of an HTML page."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.attributes: list[tuple[str, str, str]] = []
        self.text: list[str] = []
        self.codes: list[str] = []
        self._in_code = False
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attributes += [(tag, name, value or "") for name, value in attrs]
        self._in_code = tag == "code"

    def handle_endtag(self, tag: str) -> None:
        self._in_code = False

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._in_code:
            self.codes.append(data)


DRAFT_TAGS = {"h1", "h2", "h3", "p", "ul", "li", "table", "thead", "tbody", "tr", "th", "td"}
DRAFT_TAGS |= {"code", "a", "strong", "em", "blockquote"}
PAGE_TAGS = {"html", "head", "meta", "title", "style", "body"}


def _assert_inert(page: str) -> _Page:
    """No element or attribute in ``page`` comes from the findings; what they say is text."""
    parsed = _Page(page)
    assert parsed.tags <= DRAFT_TAGS | PAGE_TAGS, parsed.tags - DRAFT_TAGS - PAGE_TAGS
    allowed = {("a", "href"), ("html", "lang"), ("meta", "charset")}
    assert {(tag, name) for tag, name, _ in parsed.attributes} <= allowed
    links = [value for tag, name, value in parsed.attributes if name == "href"]
    assert links and all(re.fullmatch(r"[\w./-]+", link) for link in links), links
    text = "".join(parsed.text)
    shown = set(re.findall(rf"{MARK}(\d+)q", text))
    assert {"000", "900", "901"} <= shown and len(shown) > 50  # the title, rows, parameters, ...
    assert "<img src=x onerror=alert(" in text  # read as text, whole
    return parsed


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_hostile_findings_give_a_draft_with_no_live_markup(
    run_all: Path, tmp_path: Path, fmt: str
) -> None:
    out, markers = _hostile_copy(run_all, tmp_path / "hostile")
    assert markers > 100
    draft = postmortem_command(out, fmt=fmt)
    if fmt == "html":
        assert "<title>Postmortem draft: Invoicing flow killed" in draft
        assert "&lt;/title&gt;&lt;script&gt;" in draft.split("</title>")[0]
    # the .md as a CommonMark renderer that keeps raw HTML renders it (the worst case)
    page = mistune.create_markdown(escape=False, plugins=["table"])(draft) if fmt == "md" else draft
    parsed = _assert_inert(page)
    assert '"a``b`"' in parsed.codes  # a value with backticks is one whole code span


def test_a_code_span_is_longer_than_any_backtick_run_inside() -> None:
    assert code("plain") == "`plain`"
    assert code("a`b") == "``a`b``"
    assert code("``x`") == "``` ``x` ```"
    assert code("a | b") == "a \\| b"  # a pipe would end a table cell: escaped text instead
    render = mistune.create_markdown(escape=False)
    for value in ("a`b", "``x`", "`", "x``"):
        assert _Page(render(f"see {code(value)} here")).codes == [value]


def test_markdown_text_escapes_html_as_entities() -> None:
    assert md("<b> & </b>") == "&lt;b&gt; &amp; &lt;/b&gt;"
    assert md("a\n\n# b|c") == "a # b\\|c"


def test_the_summary_schema_is_the_one_run_all_writes(run_all: Path, tmp_path: Path) -> None:
    from incidentkit.batch import SUMMARY_SCHEMA
    from incidentkit.postmortem.collect import RUN_ALL_SCHEMA

    assert RUN_ALL_SCHEMA == SUMMARY_SCHEMA
    out = tmp_path / "all"
    shutil.copytree(run_all, out)
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    summary["skipped"] = ["session"]
    (out / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    with pytest.raises(ParameterError, match=r"summary\.json lacks .* at \$\.skipped: "):
        postmortem_command(out, fmt="md")
    (out / "summary.json").write_text('{"schema": "incidentkit.run-all/v1",', encoding="utf-8")
    with pytest.raises(ParameterError, match=r"cannot read summary\.json"):
        postmortem_command(out, fmt="md")


def test_a_dead_workers_open_invocations_are_orphans_in_every_section(tmp_path: Path) -> None:
    truth = json.loads((FIXTURES / "crash_recovery" / "truth.json").read_text())["expected"]
    incident, settings = latency_cliff.setup(FIXTURES / "crash_recovery", app_name="invoicing")
    found = latency_cliff.findings(latency_cliff.triage(incident, settings), incident, settings)
    found.write(tmp_path / "findings.json")
    draft = postmortem_command(tmp_path, fmt="md")
    opened = next(i for i in found.items if i.id == "latency_cliff/open-invocations")
    assert all(row["orphaned"] for row in opened.rows)
    impact = _section(draft, "Impact")
    assert f"all {len(opened.rows)} orphaned: their worker died" in impact
    assert "each still held a thread" not in draft
    killed = truth["kill"]["worker"]
    assert f"**Trigger**: worker(s) {killed} stopped" in _section(draft, "Root cause and trigger")
    detection = _section(draft, "Detection")
    assert "stops renewing its leases" in detection and "open longer than 45 s" not in detection
    timeline = _section(draft, "Timeline")
    assert "died before it finished" in timeline and "still open at as_of" not in timeline
    assert "Apply the fix below" not in _section(draft, "Action items")
    # findings written before the orphaned field: a RUNNING row whose lease expired is one too
    old = json.loads((tmp_path / "findings.json").read_text())
    for item in old["items"]:
        for row in item["rows"]:
            for name in ("orphaned", "orphan_reason", "owner"):
                row.pop(name, None)
    old["summary"].pop("orphaned_invocations")
    (tmp_path / "findings.json").write_text(json.dumps(old))
    expired = sum(1 for row in opened.rows if row["lease_expired"])
    assert f"{expired} orphaned" in _section(postmortem_command(tmp_path, fmt="md"), "Impact")


def test_first_screen_notes_are_no_setting_and_waiting_runs_no_export() -> None:
    from incidentkit.findings import Finding, Provenance, Verdict
    from incidentkit.flows.orphans.postmortem import action_note as _export_hint
    from incidentkit.postmortem.appendix import _parameters
    from incidentkit.postmortem.collect import FlowFindings

    rows = [{"run_id": r, "action_kind": k} for r, k in [("a", "NONE"), ("b", "WAIT")]]
    item = Finding("orphans/live-leases", "INFO", "2 runs", "held", "None: wait", tuple(rows))
    parameters = {"app_name": "shop", "evidence_notes": ["the window holds no row"]}
    found = Findings("orphans", Verdict.CLEAN, {}, (item,), Provenance(parameters=parameters))
    ff = FlowFindings("orphans/findings.json", found)
    assert "evidence_notes" not in _parameters(ff) and "app_name" in _parameters(ff)
    assert _export_hint(ff, item) == ""  # a live lease or a wait is no run to act on
    parked = Finding(
        "orphans/crash-loops", "CRITICAL", "1 run", "d", "Park", ({"action_kind": "PARK"},)
    )
    assert "--kind PARK" in _export_hint(ff, parked)
