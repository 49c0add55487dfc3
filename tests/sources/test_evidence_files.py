"""Evidence files: a line past the length limit is a reject, and every file reader says the same
thing about a missing file or a folder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from incidentkit.errors import SourceError
from incidentkit.manifest import Filters, SourceSpec
from incidentkit.sources import diagnostics, events, evidence_files, spans
from incidentkit.sources.evidence_files import iter_lines
from incidentkit.sources.json_files import read_json_document
from incidentkit.sources.jvm import threads
from incidentkit.sources.loaded import RejectSink
from incidentkit.sources.sql import ledger


def test_a_line_of_the_limit_with_its_end_is_rejected_and_the_next_line_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line whose text is exactly the limit is over it with its line end: rejected, and the
    line after it read (the reader used to skip it too, as the rest of the long line)."""
    monkeypatch.setattr(evidence_files, "MAX_LINE_BYTES", 24)
    path = tmp_path / "lines.txt"
    path.write_bytes(b"x" * 24 + b"\nnext\n" + b"y" * 30 + b"\nafter\n" + b"z" * 24)
    sink = RejectSink("test")
    lines = list(iter_lines(path, what="test", sink=sink))
    assert lines == [(2, "next", True), (4, "after", True), (5, "z" * 24, False)]
    assert [(row["location"], row["raw"]) for row in sink.rows] == [
        ("lines.txt:1", "x" * 24 + "\n"),
        ("lines.txt:3", "y" * 25),  # the line's start, never the whole of it
    ]


READERS: dict[str, Callable[[Path], object]] = {
    "lines": lambda path: list(iter_lines(path, what="test")),
    "events": lambda path: events.load(SourceSpec("events", paths=(path,)), Filters()),
    "document": lambda path: read_json_document(path, what="test"),
    "ledger csv": lambda path: ledger.load(SourceSpec("ledger", paths=(path,)), Filters()),
    "spans": lambda path: spans.load(SourceSpec("spans", paths=(path,)), Filters()),
    "diagnostics": lambda path: diagnostics.load(
        SourceSpec("diagnostics", paths=(path,)), Filters()
    ),
    "threads": lambda path: threads.load(SourceSpec("threads", paths=(path,)), Filters()),
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_every_reader_says_a_file_is_missing(reader: str, tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"file not found: '.*gone\.csv'\. check the path"):
        READERS[reader](tmp_path / "gone.csv")


@pytest.mark.parametrize("reader", sorted(READERS))
def test_every_reader_says_a_folder_is_not_a_file(reader: str, tmp_path: Path) -> None:
    folder = tmp_path / "logs.csv"
    folder.mkdir()
    with pytest.raises(SourceError, match=r"the path is a folder, not a file: '.*logs\.csv'"):
        READERS[reader](folder)
