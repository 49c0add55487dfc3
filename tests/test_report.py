from __future__ import annotations

import json
from pathlib import Path

from incidentkit.findings import Finding, Findings, Provenance
from incidentkit.report import findings_markdown, markdown_table, record


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
    assert json.loads((tmp_path / "findings.json").read_text())["verdict"] == "ACTION_NEEDED"
    assert view._repr_markdown_() == findings_markdown(sample())
