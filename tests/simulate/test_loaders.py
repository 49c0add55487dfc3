"""Every committed pack loads through the kit with zero rejects and the counts of its truth."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from simloaders import require_loaders
from simpacks import FIXTURES, PACKS, ledger, log, truth

from incidentkit import open_evidence
from incidentkit.simulate import simulate
from incidentkit.simulate.shards import SHARD_FROM_SCALE


@pytest.mark.parametrize("name", PACKS)
def test_pack_loads_with_zero_rejects(name: str) -> None:
    require_loaders()
    evidence = open_evidence(FIXTURES / name)
    rejects = evidence.rejects
    assert rejects.empty, rejects.head(10).to_string()
    counts = truth(FIXTURES / name)["counts"]
    assert {frame: len(evidence.frame(frame)) for frame in counts} == counts


@pytest.mark.parametrize("name", PACKS)
def test_loaded_ids_and_times_are_the_packs(name: str) -> None:
    require_loaders()
    pack = FIXTURES / name
    evidence = open_evidence(pack)
    runs = evidence.runs
    assert sorted(runs["run_id"]) == sorted(row["run_id"] for row in ledger(pack))
    doc = truth(pack)
    for frame, column in (("events", "ts"), ("spans", "start"), ("diagnostics", "ts")):
        times = evidence.frame(frame)[column]
        assert str(times.dtype) == "datetime64[ns, UTC]"
        assert times.min() >= pd.Timestamp(doc["window"]["start"])
    orphans = {o["run_id"] for o in doc["expected"].get("orphans", [])}
    assert orphans <= set(runs["run_id"])


def test_local_jvm_times_load_as_their_utc_instants() -> None:
    """latency_cliff's JVM runs in Europe/Berlin: dump headers and log lines are local."""
    require_loaders()
    pack = FIXTURES / "latency_cliff"
    evidence = open_evidence(pack)
    dumps = truth(pack)["expected"]["threads"]["dumps"]
    taken = evidence.threads.groupby("dump", sort=True)["taken_at"].unique()
    assert [list(t) for t in taken] == [[pd.Timestamp(d["taken_at"])] for d in dumps]
    written = sorted(pd.Timestamp(r.ts) for r in log(pack))
    assert sorted(evidence.diagnostics["ts"]) == written


@pytest.mark.parametrize(
    ("scenario", "events_format"),
    [
        ("crash_recovery", "adk-java"),
        ("vanished_state", "adk-python"),
        ("latency_cliff", "adk-java"),
    ],
)
def test_sharded_pack_loads_with_zero_rejects(
    scenario: str, events_format: str, tmp_path: Path
) -> None:
    require_loaders()
    pack = simulate(scenario, tmp_path / "big", scale=SHARD_FROM_SCALE, events_format=events_format)
    evidence = open_evidence(pack)
    assert evidence.rejects.empty, evidence.rejects.head(10).to_string()
    counts = truth(pack)["counts"]
    assert {frame: len(evidence.frame(frame)) for frame in counts} == counts
    assert evidence.journal["key"].is_unique and evidence.runs["run_id"].is_unique
    times = evidence.diagnostics["ts"]
    assert times.is_monotonic_increasing
