"""Slow death in the committed real JFR recording: heap after GC and the old objects."""

from __future__ import annotations

from pathlib import Path

from incidentkit.evidence import Evidence
from incidentkit.flows.overview.growth import Culprit
from incidentkit.flows.overview.heap import heap_after_gc, leak_candidates
from incidentkit.manifest import parse_manifest

EXPORT = Path(__file__).resolve().parents[2] / "data" / "jfr" / "stalled-agent.json.gz"


def recording() -> Evidence:
    return Evidence(parse_manifest({"jfr": {"path": str(EXPORT)}}, base=EXPORT.parent))


def test_the_leaking_heap_grows_after_gc() -> None:
    heap = recording().jfr_heap
    (row,) = heap_after_gc(heap).to_dict("records")
    after = heap.loc[heap["when"].eq("after"), "heap_used"]
    assert row["growing"] and row["gcs"] == len(after)
    assert row["growth_bytes"] == after.iloc[-1] - after.iloc[0] > 0


def test_a_level_heap_is_not_growing() -> None:
    heap = recording().jfr_heap
    level = heap.assign(heap_used=heap["heap_used"].where(heap["when"].eq("before"), 1000))
    assert not heap_after_gc(level)["growing"].any()


def test_old_objects_name_the_cache_that_holds_them() -> None:
    top = leak_candidates(recording().jfr_old_objects).iloc[0]
    assert top["class"] == "[B" and top["holder"] == "RunnerCache$Entry"
    assert top["culprit"] == Culprit.RUNNERS.value
