"""Bulk JSON decoding leaves the garbage collector as it found it, paused only while JSON lines
decode; freed memory goes back to the system."""

from __future__ import annotations

import gc
import platform
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from incidentkit.sources import json_files
from incidentkit.sources.json_files import iter_json_line_chunks, read_json_lines
from incidentkit.sources.loaded import RejectSink
from incidentkit.sources.process_memory import bulk_decoding, release_memory

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
    real_loads = json_files.loads

    def loads(text: str) -> Any:
        collector_states.append(gc.isenabled())
        return real_loads(text)

    monkeypatch.setattr(json_files, "loads", loads)
    sink = RejectSink("spans")
    records, _ = read_json_lines(DATA / "spans" / "ids.jsonl", sink, what="spans")
    assert len(collector_states) >= len(records) > 0
    assert not any(collector_states)
    assert gc.isenabled()


def test_json_line_chunks_leave_the_collector_on_between_chunks(collector_on: None) -> None:
    sink = RejectSink("events")
    path = DATA / "events" / "java_events.jsonl"
    states = [gc.isenabled() for _ in iter_json_line_chunks(path, sink, what="events", size=2)]
    assert len(states) > 1
    assert all(states)
