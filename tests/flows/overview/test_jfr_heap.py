"""Slow death in the committed real JFR recording: heap after GC and the old objects."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from incidentkit.evidence import Evidence
from incidentkit.flows.overview.heap import (
    heap_after_gc,
    heap_text,
    leak_candidates,
    old_object_text,
)
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
    assert top["class"] == "[B" and top["holder"] == "RunnerCache$Entry" and top["stack"]
    assert pd.isna(top["culprit"])  # RunnerCache is the program's own: no ADK class, no culprit


DEFAULT = EXPORT.parent / "orders-default.json.gz"
"""A default-settings recording (jcmd <pid> JFR.start, default.jfc) of the leaking JVM of
tests/data/threads/jvm-orders: old-object samples without a stack."""


def default_recording() -> Evidence:
    return Evidence(parse_manifest({"jfr": {"path": str(DEFAULT)}}, base=DEFAULT.parent))


def test_old_objects_without_a_stack_say_so_instead_of_a_site() -> None:
    evidence = default_recording()
    old = evidence.jfr_old_objects
    assert len(old) and old["frames"].map(len).eq(0).all()  # default.jfc keeps no stack
    leaks = leak_candidates(old)
    top = leaks.iloc[0]
    assert top["class"] == "[B" and not top["stack"]
    assert pd.isna(top["allocated_in"]) and pd.isna(top["holder"])
    text = old_object_text(leaks)
    assert text is not None and "no allocation stack was recorded" in text
    assert "allocated in" not in text


def test_the_overview_finding_names_no_invented_allocation_site() -> None:
    from incidentkit.flows.common import Frames
    from incidentkit.flows.overview.card import Profile
    from incidentkit.flows.overview.findings import overview_findings
    from incidentkit.flows.overview.triage import triage_overview

    evidence = default_recording()
    report = triage_overview(
        Frames(), as_of=evidence.jfr_heap["ts"].max(), profile=Profile(),
        jfr_heap=evidence.jfr_heap, jfr_old_objects=evidence.jfr_old_objects,
    )  # fmt: skip
    item = next(i for i in overview_findings(report).items if i.id == "overview/heap-growth")
    assert "[B allocated in [B" not in item.title
    assert "no allocation stack was recorded" in item.title


@pytest.mark.parametrize("gcs", [1, 2])
def test_fewer_than_three_gcs_say_nothing_either_way(gcs: int) -> None:
    heap = default_recording().jfr_heap
    kept = heap.loc[heap["gc_id"].isin(sorted(heap["gc_id"].unique())[:gcs])]
    (row,) = heap_after_gc(kept).to_dict("records")
    assert row["gcs"] == gcs and not row["judged"] and not row["growing"]
    text = heap_text(heap_after_gc(kept))
    assert "not judged" in text and "does not grow" not in text and "grows" not in text


def test_three_gcs_or_more_are_judged() -> None:
    trend = heap_after_gc(default_recording().jfr_heap)
    (row,) = trend.to_dict("records")
    assert row["judged"] and row["gcs"] >= 3
    assert heap_text(trend).startswith(
        "heap used after GC grows" if row["growing"] else "heap used after GC does not grow"
    )
