"""JSON lines read whole or a chunk at a time; a truncated last line is a reject."""

from __future__ import annotations

from pathlib import Path

from incidentkit.sources.evidence_files import iter_lines
from incidentkit.sources.json_files import iter_json_line_chunks, read_json_lines
from incidentkit.sources.loaded import RejectSink

DATA = Path(__file__).resolve().parent.parent / "data"


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
