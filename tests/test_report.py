from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from incidentkit.findings import Finding, Findings, Provenance, Severity
from incidentkit.report import findings_markdown, markdown_table, plain, record, summary_html, table


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
    text = findings_markdown(sample())
    assert text.startswith("## Findings — orphans: ACTION_NEEDED")
    assert text.index("CRITICAL: 1 run may have sent") < text.index("INFO: 1 live lease")
    assert "**What to do:** Ask billing for send-invoice:INV-7." in text
    assert "| r-1 | a\\|b c |" in text
    assert "counts: runs 3, orphans 1" in text and "crash_loops" not in text


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
    assert "| r-1 |" not in view._repr_markdown_()


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
