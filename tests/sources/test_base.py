"""The shared loader pieces: bulk JSON decoding leaves the garbage collector as it found it."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from incidentkit.sources.base import RejectSink, bulk_decoding, read_json_lines

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


def test_read_json_lines_decodes_with_the_collector_paused(
    collector_on: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    collector_states: list[bool] = []
    real_loads = json.loads

    def loads(text: str) -> Any:
        collector_states.append(gc.isenabled())
        return real_loads(text)

    monkeypatch.setattr(json, "loads", loads)
    sink = RejectSink("spans")
    records, _ = read_json_lines(DATA / "spans" / "ids.jsonl", sink, what="spans")
    assert len(collector_states) >= len(records) > 0
    assert not any(collector_states)
    assert gc.isenabled()
