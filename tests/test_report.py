from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pandas as pd
from hypothesis import given
from hypothesis import strategies as st
from nbconvert.filters.markdown_mistune import markdown2html_mistune

from incidentkit.findings import Finding, Findings, Provenance, Severity, Verdict
from incidentkit.report import (
    findings_markdown,
    markdown_table,
    markdown_text,
    plain,
    record,
    summary_html,
    table,
)

HOSTILE = (
    "<img src=x onerror=alert(1)></script><script>alert(1)</script></title>"
    "<script>alert(2)</script>`a` ``b`` [x](javascript:alert(3)) <javascript:alert(3)> "
    "*em* _u_ ~~s~~ $x$ | &lt; \\ https://example.com"
)


def rendered(markdown: str) -> str:
    """``markdown`` as nbconvert renders it into a report (raw HTML kept, as it does)."""
    return markdown2html_mistune(markdown)


def tags(page: str) -> set[str]:
    return {tag.lower() for tag in re.findall(r"<([a-zA-Z][\w-]*)", page)}


def shown(page: str) -> str:
    """The text a reader sees of ``page``, whitespace collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def sample() -> Findings:
    return Findings(
        "orphans",
        "ACTION_NEEDED",
        {"runs": 3, "orphans": 1, "crash_loops": 0},
        (
            Finding("orphans/live", "INFO", "1 live lease", "A worker holds it.", "None."),
            Finding(
                "orphans/w4",
                "CRITICAL",
                "1 run may have sent",
                "W4: intent only.",
                "Ask billing for send-invoice:INV-7.",
                ({"run_id": "r-1", "note": "a|b\nc"},),
            ),
        ),
        Provenance(
            "INC-7", ("2026-11-29T02:30:00Z", "2026-11-29T04:00:00Z"), "2026-11-29T04:00:00Z"
        ),
    )


def test_markdown_puts_the_most_severe_first_and_escapes_cells() -> None:
    page = rendered(findings_markdown(sample()))
    text = shown(page)
    assert text.startswith("Findings — orphans: ACTION_NEEDED ¶ Action needed:")
    assert text.index("CRITICAL: 1 run may have sent") < text.index("INFO: 1 live lease")
    assert "<strong>What to do:</strong> Ask billing for send-invoice:INV-7.</p>" in page
    assert "<td>r-1</td>\n  <td>a|b c</td>" in page  # the pipe and the line break in one cell
    assert "counts: runs 3, orphans 1" in text and "crash_loops" not in text
    assert tags(page) == {"h2", "h3", "a", "p", "ul", "li", "strong", "table"} | {
        "thead",
        "tbody",
        "tr",
        "th",
        "td",
    }  # the heading anchors are nbconvert's


@given(
    st.text(max_size=60) | st.text(alphabet="<>&[]()!`*_~\\$|#-+=.:/ \n\tajvs'\";1", max_size=60)
)
def test_markdown_text_renders_as_the_text_it_is(value: str) -> None:
    page = rendered("x " + markdown_text(value))
    assert tags(page) <= {"p"}  # no tag, link, code span or emphasis of its own
    assert shown(page) == " ".join(("x " + value).split())


def test_markdown_text_escapes_html_and_markdown_of_evidence() -> None:
    item = Finding("x/y", Severity.CRITICAL, HOSTILE, HOSTILE, HOSTILE, ({HOSTILE: HOSTILE},))
    document = Findings("x", Verdict.ACTION_NEEDED, {"runs": 1}, (item,), Provenance(HOSTILE))
    page = rendered(findings_markdown(document))
    assert tags(page) == {"h2", "h3", "a", "p", "ul", "li", "strong"} | {
        *("table", "thead", "tbody", "tr", "th", "td"),
    }
    assert all(link.startswith("#") for link in re.findall(r'href="([^"]*)"', page))
    assert shown(page).count(HOSTILE) == 6  # title, finding's title, why, what to do, row
    assert "&amp;lt;" in page and "<javascript" not in page


def test_markdown_table_says_how_many_rows_it_left_out() -> None:
    table = markdown_table([{"n": i} for i in range(12)], limit=10)
    assert table.count("\n| ") == 10 and "2 more rows" in table
    assert markdown_table([]) == ""


def test_record_writes_the_document_and_returns_a_display(tmp_path: Path) -> None:
    view = record(sample(), tmp_path / "findings.json")
    written = json.loads((tmp_path / "findings.json").read_text())
    assert written["verdict"] == "ACTION_NEEDED"
    assert written["items"][1]["rows"] == [{"run_id": "r-1", "note": "a|b\nc"}]  # all kept
    # The display has no row tables: the story's tables showed them, findings.json keeps them.
    assert view._repr_markdown_() == findings_markdown(sample(), limit=0)
    assert "<table>" not in rendered(view._repr_markdown_())


def test_a_long_text_is_never_cut() -> None:
    long = "x" * 500
    assert long in markdown_table([{"reason": long}])
    assert long in table(pd.DataFrame({"reason": [long]})).to_html()


def test_tables_for_people_have_no_index_no_nan_and_comma_lists() -> None:
    frame = pd.DataFrame(
        {
            "run_id": ["r-1", "r-2"],
            "calls": [("c-1", "c-2"), ()],
            "lease": [pd.Timestamp("2026-11-29T03:00:00.25Z"), pd.NaT],
            "attempts": [1.0, float("nan")],
        },
        index=[7, 9],
    )
    rendered = table(frame).to_html()
    assert "c-1, c-2" in rendered and "2026-11-29 03:00:00.250 UTC" in rendered
    assert "nan" not in rendered.lower() and "NaT" not in rendered and "()" not in rendered
    assert rendered.count("—") == 3  # the empty list, the missing time, the missing number
    assert ">7<" not in rendered and ">9<" not in rendered  # no index
    assert [plain(v) for v in (None, [], {"a": 1}, "x")] == ["—", "—", "a: 1", "x"]
    assert [plain(v) for v in (66763.84999999999, 0.002, 0.0, -0.000125)] == [
        "66763.85",
        "0.002",
        "0.0",
        "-0.000125",
    ]  # a small price keeps its digits


def test_the_summary_block_opens_with_verdict_app_counts_and_actions() -> None:
    findings = Findings(
        "orphans",
        "ACTION_NEEDED",
        {"runs": 3, "orphans": 1, "crash_loops": 0},
        sample().items,
        Provenance(
            "INC-7 <b>",
            ("2026-11-29T02:30:00Z", "2026-11-29T04:00:00Z"),
            "2026-11-29T04:00:00Z",
            {
                "app_name": "invoicing",
                "terminal_agent": ["notify_agent"],
                "settings_from": {"terminal_agent": "[apps.invoicing]"},
            },
        ),
    )
    block = summary_html(findings)
    assert block.index("ACTION_NEEDED") < block.index("What to do first")
    assert "INC-7 &lt;b&gt;" in block  # escaped
    assert "<td style='text-align:left'>invoicing</td>" in block
    assert "runs 3, orphans 1" in block and "crash_loops" not in block
    assert "Ask billing for send-invoice:INV-7." in block
    assert "1 live lease" not in block  # INFO items are not things to do
    assert "[apps.invoicing]" in block and "notify_agent" in block


def test_numbered_steps_of_an_action_become_a_list_in_the_summary() -> None:
    steps = Finding(
        "x/fix",
        Severity.CRITICAL,
        "the fix",
        "why",
        "1) Give <Client> a read timeout. 2) Return a structured result. 3) Alert at 45 s.",
    )
    one = Finding("x/one", Severity.WARNING, "one", "why", "See 2) below, then act.")
    block = summary_html(Findings("x", "ACTION_NEEDED", {}, (steps, one)))
    assert (
        "<ol style='margin:0.2em 0'><li>Give &lt;Client&gt; a read timeout.</li>"
        "<li>Return a structured result.</li><li>Alert at 45 s.</li></ol>"
    ) in block
    assert "See 2) below, then act." in block  # one number is no list of steps


def test_tables_escape_every_cell_and_header() -> None:
    frame = pd.DataFrame({"<b>tool</b>": [HOSTILE, "a & b", "plain"]})
    page = table(frame).to_html()
    assert tags(page) == {"style", "table", "thead", "tr", "th", "tbody", "td"}
    assert shown(page).count(HOSTILE) == 1 and "a &amp; b" in page and ">plain<" in page
    assert "&lt;b&gt;tool&lt;/b&gt;" in page and "&amp;amp;" not in page  # escaped once
    empty = table(frame.iloc[0:0])._repr_markdown_()
    assert shown(rendered(empty)) == "No rows (<b>tool</b>)."


def test_a_blank_line_in_a_value_cannot_end_the_summary_block() -> None:
    """The block reaches the report as a Markdown cell's HTML: a blank line in a value would
    end it, and the rest would be read as Markdown (a link)."""
    title = "INC-7\n\n[click](javascript:alert(1)) *x*\r\n\r\n<b>y</b>"
    action = "1) a\n\n[x](javascript:alert(2)) 2) b"
    item = Finding("x/y", Severity.CRITICAL, "t", "why", action)
    document = Findings("x", Verdict.ACTION_NEEDED, {}, (item,), Provenance(title))
    page = rendered(summary_html(document))
    assert "<a" not in page and "<em>" not in page and "<b>y" not in page
    assert "INC-7 [click](javascript:alert(1)) *x* <b>y</b>" in shown(page)


def test_a_long_list_in_a_table_shows_its_first_items_and_how_many_more() -> None:
    names = [f"tool-exec-{n}" for n in range(1, 65)]
    frame = pd.DataFrame({"count": [64, 2], "threads": [names, ["main", "gc"]]})
    html_text = table(frame).to_html()
    assert "tool-exec-1, tool-exec-2" in html_text and "tool-exec-8 … and 56 more" in html_text
    assert "tool-exec-9," not in html_text and "main, gc" in html_text
