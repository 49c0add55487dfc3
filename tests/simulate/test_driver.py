"""simulate(): same arguments, same bytes; clear errors for what it cannot do."""

from __future__ import annotations

import filecmp
import json
from pathlib import Path

import pytest

from incidentkit.errors import SimulationError
from incidentkit.simulate import SCENARIOS, simulate
from incidentkit.simulate import shards as shard_module
from incidentkit.simulate.fixtures import comparable
from incidentkit.simulate.scenarios import crash_recovery


def _tree(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): comparable(p) for p in sorted(folder.rglob("*")) if p.is_file()
    }


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_same_seed_gives_the_same_bytes(scenario: str, tmp_path: Path) -> None:
    first = simulate(scenario, tmp_path / "a", seed=7)
    second = simulate(scenario, tmp_path / "b", seed=7)
    assert _tree(first) == _tree(second)
    assert not filecmp.dircmp(first, second).diff_files


def test_python_format_is_reproducible_table_by_table(tmp_path: Path) -> None:
    first = simulate("crash_recovery", tmp_path / "a", events_format="adk-python")
    second = simulate("crash_recovery", tmp_path / "b", events_format="adk-python")
    assert _tree(first) == _tree(second)
    assert (first / "sessions.db").exists() and not (first / "events.jsonl").exists()


def test_another_seed_gives_another_incident(tmp_path: Path) -> None:
    first = simulate("healthy", tmp_path / "a", seed=1)
    second = simulate("healthy", tmp_path / "b", seed=2)
    assert (first / "events.jsonl").read_bytes() != (second / "events.jsonl").read_bytes()


def test_both_formats_describe_the_same_world(tmp_path: Path) -> None:
    java = simulate("vanished_state", tmp_path / "java")
    python = simulate("vanished_state", tmp_path / "python", events_format="adk-python")
    assert (java / "ledger.csv").read_bytes() == (python / "ledger.csv").read_bytes()
    assert (java / "journal.jsonl").read_bytes() == (python / "journal.jsonl").read_bytes()
    java_counts = json.loads((java / "truth.json").read_text())["counts"]
    python_counts = json.loads((python / "truth.json").read_text())["counts"]
    assert python_counts["events"] == java_counts["events"] - 2  # two partial events
    assert python_counts["spans"] == java_counts["spans"]


def test_shards_give_the_same_bytes_on_one_core_or_two(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scale = shard_module.SHARD_FROM_SCALE
    parallel = simulate("crash_recovery", tmp_path / "parallel", scale=scale)
    monkeypatch.setattr(shard_module.os, "cpu_count", lambda: 1)
    serial = simulate("crash_recovery", tmp_path / "serial", scale=scale)
    assert _tree(parallel) == _tree(serial)
    counts = json.loads((serial / "truth.json").read_text())["counts"]
    assert counts["runs"] > scale * crash_recovery.SESSIONS  # every session runs at least once
    assert not (serial / ".parts").exists()


def test_scale_multiplies_the_background(tmp_path: Path) -> None:
    one = json.loads((simulate("healthy", tmp_path / "1") / "truth.json").read_text())
    three = json.loads((simulate("healthy", tmp_path / "3", scale=3) / "truth.json").read_text())
    assert 2.4 < three["counts"]["runs"] / one["counts"]["runs"] < 3.6


def test_a_previous_pack_is_replaced(tmp_path: Path) -> None:
    folder = simulate("healthy", tmp_path / "pack", events_format="adk-python")
    simulate("healthy", folder)
    assert (folder / "events.jsonl").exists() and not (folder / "sessions.db").exists()


def test_a_folder_holding_other_files_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SimulationError, match="not empty and holds no simulated pack"):
        simulate("healthy", tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scenario": "meltdown"}, "unknown scenario: 'meltdown'"),
        ({"events_format": "adk-go"}, "unknown events format"),
        ({"scale": 0}, "scale must be a whole number of at least 1"),
        ({"scale": 1.5}, "scale must be a whole number"),
        ({"seed": "x"}, "seed must be a whole number"),
    ],
)
def test_bad_arguments_raise(kwargs: dict[str, object], message: str, tmp_path: Path) -> None:
    args: dict[str, object] = {"scenario": "healthy", **kwargs}
    scenario = str(args.pop("scenario"))
    with pytest.raises(SimulationError, match=message):
        simulate(scenario, tmp_path / "out", **args)  # type: ignore[arg-type]


def test_an_output_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(SimulationError, match="output path is a file"):
        simulate("healthy", target)
