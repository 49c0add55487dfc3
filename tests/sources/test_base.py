"""The shared loader pieces: bulk JSON decoding leaves the garbage collector as it found it;
JSON lines read in chunks; every file reader says the same thing about a missing file or a
folder."""

from __future__ import annotations

import gc
import platform
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from incidentkit.errors import SourceError
from incidentkit.manifest import Filters, SourceSpec
from incidentkit.sources import base, diagnostics, events, ledger, spans, threads
from incidentkit.sources.base import (
    RejectSink,
    bulk_decoding,
    iter_json_line_chunks,
    iter_lines,
    read_json_document,
    read_json_lines,
    release_memory,
)

DATA = Path(__file__).resolve().parent.parent / "data"


@pytest.fixture
def collector_on() -> Iterator[None]:
    """The collector running at the start, and running again after the test whatever it did."""
    gc.enable()
    yield
    gc.enable()


def test_bulk_decoding_pauses_the_collector_and_nests(collector_on: None) -> None:
    with bulk_decoding():
        assert not gc.isenabled()
        with bulk_decoding():
            assert not gc.isenabled()
        assert not gc.isenabled()  # only the outermost exit turns it back on
    assert gc.isenabled()


def test_bulk_decoding_restores_the_collector_when_decoding_fails(collector_on: None) -> None:
    with pytest.raises(ValueError, match="bad record"), bulk_decoding():
        raise ValueError("bad record")
    assert gc.isenabled()


def test_bulk_decoding_leaves_a_paused_collector_paused(collector_on: None) -> None:
    gc.disable()
    with bulk_decoding():
        pass
    assert not gc.isenabled()


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's heap is what is trimmed")
def test_release_memory_hands_freed_heap_pages_back_to_the_system() -> None:
    blocks = [bytes(1000) + bytes([i % 256]) for i in range(200_000)]  # ~200 MB from malloc
    pinned = bytes(1000) + b"last"  # the heap's top stays in use, so free() cannot shrink it
    del blocks
    held = _rss_mb()
    release_memory()
    assert held - _rss_mb() > 100  # the freed blocks' pages are gone from the process
    assert pinned.endswith(b"last")


def test_read_json_lines_decodes_with_the_collector_paused(
    collector_on: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    collector_states: list[bool] = []
    real_loads = base.loads

    def loads(text: str) -> Any:
        collector_states.append(gc.isenabled())
        return real_loads(text)

    monkeypatch.setattr(base, "loads", loads)
    sink = RejectSink("spans")
    records, _ = read_json_lines(DATA / "spans" / "ids.jsonl", sink, what="spans")
    assert len(collector_states) >= len(records) > 0
    assert not any(collector_states)
    assert gc.isenabled()


def test_json_lines_in_chunks_are_the_whole_file_read_a_chunk_at_a_time() -> None:
    path = DATA / "events" / "rejects.jsonl"  # a malformed line, then a JSON list
    whole_sink, chunk_sink = RejectSink("events"), RejectSink("events")
    records, locations = read_json_lines(path, whole_sink, what="events")
    chunks = list(iter_json_line_chunks(path, chunk_sink, what="events", size=4))
    assert [len(chunk) for chunk, _ in chunks] == [4, 4, 4, 2]
    assert [rec for chunk, _ in chunks for rec in chunk] == records
    assert [loc for _, where in chunks for loc in where] == locations
    assert locations[0] == "rejects.jsonl:3"
    assert chunk_sink.rows == whole_sink.rows
    assert [row["location"] for row in chunk_sink.rows] == ["rejects.jsonl:1", "rejects.jsonl:2"]


def test_a_line_of_the_limit_with_its_end_is_rejected_and_the_next_line_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line whose text is exactly the limit is over it with its line end: rejected, and the
    line after it read (the reader used to skip it too, as the rest of the long line)."""
    monkeypatch.setattr(base, "MAX_LINE_BYTES", 24)
    path = tmp_path / "lines.txt"
    path.write_bytes(b"x" * 24 + b"\nnext\n" + b"y" * 30 + b"\nafter\n" + b"z" * 24)
    sink = RejectSink("test")
    lines = list(iter_lines(path, what="test", sink=sink))
    assert lines == [(2, "next", True), (4, "after", True), (5, "z" * 24, False)]
    assert [(row["location"], row["raw"]) for row in sink.rows] == [
        ("lines.txt:1", "x" * 24 + "\n"),
        ("lines.txt:3", "y" * 25),  # the line's start, never the whole of it
    ]


def test_json_line_chunks_reject_a_truncated_last_line() -> None:
    sink = RejectSink("events")
    path = DATA / "events" / "truncated.jsonl"
    chunks = list(iter_json_line_chunks(path, sink, what="events", size=1))
    assert [where for _, where in chunks] == [["truncated.jsonl:1"]]
    assert [(row["location"], row["reason"]) for row in sink.rows] == [
        ("truncated.jsonl:2", "truncated line: the file ends in the middle of a record")
    ]


def test_json_line_chunks_can_hand_over_text_rejecting_only_a_truncated_last_line() -> None:
    for name, rejected in (("rejects.jsonl", []), ("truncated.jsonl", ["truncated.jsonl:2"])):
        path = DATA / "events" / name
        sink = RejectSink("events")
        chunks = list(iter_json_line_chunks(path, sink, what="events", size=4, decode=False))
        lines = [(f"{name}:{n}", text) for n, text, _ in iter_lines(path, what="events")]
        kept = [line for line in lines if line[0] not in rejected]
        handed = [pair for texts, where in chunks for pair in zip(where, texts, strict=True)]
        assert handed == kept
        assert [row["location"] for row in sink.rows] == rejected  # malformed lines stay text


def test_json_line_chunks_leave_the_collector_on_between_chunks(collector_on: None) -> None:
    sink = RejectSink("events")
    path = DATA / "events" / "java_events.jsonl"
    states = [gc.isenabled() for _ in iter_json_line_chunks(path, sink, what="events", size=2)]
    assert len(states) > 1
    assert all(states)


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
