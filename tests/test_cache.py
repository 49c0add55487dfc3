"""Loaded once per incident: a file source is parsed once, then read from the user's cache,
and what comes back is exactly what the parse gave; narrowing is a filter on what was read."""

from __future__ import annotations

import json
import os
import shutil
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from incidentkit import cache, evidence
from incidentkit.cli import main
from incidentkit.evidence import Evidence, open_evidence
from incidentkit.frames import FRAMES
from incidentkit.manifest import Filters, Window, load_manifest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
PACKS = sorted(p.name for p in FIXTURES.iterdir() if (p / "evidence.toml").is_file())


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A cache folder of the test's own, enabled whatever the caller's environment says."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    monkeypatch.delenv(cache.DISABLE_ENV, raising=False)
    monkeypatch.setattr(cache, "MIN_PARSE_SECONDS", 0.0)  # the fixtures parse in milliseconds
    yield cache.root()


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sections whose loader ran (a spy on the real loaders; they still run)."""
    ran: list[str] = []
    real = evidence.loader_for

    def spying(section: str, fmt: str | None = None) -> Any:
        load = real(section, fmt)

        def counted(*args: Any, **kwargs: Any) -> Any:
            ran.append(section)
            return load(*args, **kwargs)

        return counted

    monkeypatch.setattr(evidence, "loader_for", spying)
    return ran


def _copy(pack: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIXTURES / pack, tmp_path / pack))


def _all_frames(ev: Evidence) -> dict[str, pd.DataFrame]:
    return {name: ev.frame(name) for name in FRAMES if name not in ("rejects", "warnings")} | {
        "rejects": ev.rejects,
        "warnings": ev.warnings,
    }


def _same(got: dict[str, pd.DataFrame], want: dict[str, pd.DataFrame]) -> None:
    assert got.keys() == want.keys()
    for name, frame in want.items():
        pd.testing.assert_frame_equal(got[name], frame, check_exact=True, obj=name)


@pytest.mark.parametrize("pack", PACKS)
def test_a_cached_source_is_exactly_what_its_parse_gave(pack: str, parses: list[str]) -> None:
    fresh = _all_frames(open_evidence(FIXTURES / pack).load_all())
    parsed = list(parses)
    assert parsed, "the first load parses"
    again = _all_frames(open_evidence(FIXTURES / pack).load_all())
    _same(again, fresh)
    cached = [
        s
        for s, spec in load_manifest(FIXTURES / pack).sources.items()
        if cache.key(spec, Filters())
    ]
    assert parses == parsed + [s for s in parsed if s not in cached], "cached sources parse once"
    assert [how for how, _, _ in cache.loads()].count("parse") == len(cached)


def test_the_cache_is_private_and_never_beside_the_evidence(tmp_path: Path) -> None:
    folder = _copy("crash_recovery", tmp_path)
    before = sorted(p.name for p in folder.rglob("*"))
    open_evidence(folder).load_all()
    assert sorted(p.name for p in folder.rglob("*")) == before
    root = cache.root()
    assert root.is_relative_to(tmp_path / "user-cache")
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(e.stat().st_mode) == 0o700 for e in root.iterdir() if e.is_dir())


def test_a_changed_file_is_parsed_again(tmp_path: Path, parses: list[str]) -> None:
    folder = _copy("crash_recovery", tmp_path)
    first = open_evidence(folder).events
    events = folder / "events.jsonl"
    lines = events.read_text(encoding="utf-8").splitlines(keepends=True)
    events.write_text("".join(lines[:-1]), encoding="utf-8")  # the last event is gone
    second = open_evidence(folder).events
    assert parses.count("events") == 2
    assert len(second) == len(first) - 1
    os.utime(events, ns=(1, 1))  # the same bytes with another time: read afresh all the same
    open_evidence(folder).events  # noqa: B018 - the load is the test
    assert parses.count("events") == 3


def test_a_database_source_is_never_kept(parses: list[str]) -> None:
    pack = FIXTURES / "crash_recovery-adk-python"
    manifest = load_manifest(pack)
    assert manifest.sources["events"].is_database
    for _ in range(2):
        open_evidence(pack).events  # noqa: B018
    assert parses.count("events") == 2
    assert "events" not in {section for _, section, _ in cache.loads()}


def test_a_database_source_is_kept_for_its_run_only(parses: list[str]) -> None:
    pack = FIXTURES / "crash_recovery-adk-python"
    manifest = load_manifest(pack)
    for run in ("run-a", "run-a", "run-b"):
        Evidence(manifest, run=run).events  # noqa: B018
    assert parses.count("events") == 2  # once for each run
    kept = [p.name for p in cache.root().iterdir() if p.name.startswith("run-")]
    assert len(kept) == 2
    assert cache.end_run("run-a") == 1
    assert [p.name for p in cache.root().iterdir() if p.name.startswith("run-")] == [
        name for name in kept if name.startswith("run-run-b-")
    ]
    Evidence(manifest, run="run-a").events  # noqa: B018 - its entries are gone: parsed again
    assert parses.count("events") == 3


def test_no_cache_reads_and_writes_nothing(
    monkeypatch: pytest.MonkeyPatch, parses: list[str]
) -> None:
    monkeypatch.setenv(cache.DISABLE_ENV, "1")
    for _ in range(2):
        open_evidence(FIXTURES / "runaway").events  # noqa: B018
    assert parses.count("events") == 2
    assert not cache.root().exists() or not any(cache.root().iterdir())


def test_narrowing_within_what_was_read_parses_nothing(parses: list[str]) -> None:
    whole = open_evidence(FIXTURES / "crash_recovery", app_name="invoicing")
    whole.load_all()
    parsed = list(parses)
    sessions = tuple(sorted(whole.events["session_id"].dropna().unique())[:3])
    span = whole.events["ts"]
    window = Window(span.min() + (span.max() - span.min()) / 3, span.max())
    for filters in (
        Filters(window=whole.filters.window, app_name="invoicing", session_ids=sessions),
        Filters(window=window, app_name="invoicing"),
    ):
        view = whole.narrowed(filters)
        got = _all_frames(view)
        assert parses == parsed, f"narrowed to {filters} parsed again"
        cache.clear()
        want = _all_frames(Evidence(whole.manifest, filters=filters).load_all())
        _same(got, want)
        parses[:] = parsed


def test_wider_filters_read_the_sources_again(parses: list[str]) -> None:
    narrow = open_evidence(FIXTURES / "crash_recovery", app_name="invoicing")
    narrow.events  # noqa: B018
    wider = narrow.narrowed(Filters(window=narrow.filters.window))
    assert len(wider.events) > len(narrow.events)
    assert parses.count("events") == 2


def test_two_loads_at_once_agree_and_leave_one_entry() -> None:
    results: list[pd.DataFrame] = []
    errors: list[BaseException] = []

    def load() -> None:
        try:
            results.append(open_evidence(FIXTURES / "crash_recovery").events)
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=load) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    for frame in results[1:]:
        pd.testing.assert_frame_equal(frame, results[0])
    entries = [e for e in cache.root().iterdir() if e.is_dir()]
    assert len(entries) == 1 and not entries[0].name.startswith(".")


def test_the_least_recently_used_entries_go_first(tmp_path: Path) -> None:
    for pack in ("runaway", "latency_cliff", "vanished_state"):
        open_evidence(FIXTURES / pack).events  # noqa: B018
    entries = {e.name: e for e in cache.root().iterdir() if e.is_dir()}
    assert len(entries) == 3
    open_evidence(FIXTURES / "runaway").events  # read again: the most recently used  # noqa: B018
    runaway = next(name for how, section, name in reversed(cache.loads()) if how == "read")
    sizes = {name: sum(p.stat().st_size for p in e.iterdir()) for name, e in entries.items()}
    gone = cache.evict(sizes[runaway])
    assert runaway not in gone and len(gone) == 2
    assert [e.name for e in cache.root().iterdir() if e.is_dir()] == [runaway]


def test_a_damaged_entry_is_parsed_again(parses: list[str]) -> None:
    first = open_evidence(FIXTURES / "runaway").events
    (entry,) = (e for e in cache.root().iterdir() if e.is_dir())
    (entry / "events.parquet").write_bytes(b"not parquet")
    again = open_evidence(FIXTURES / "runaway").events
    pd.testing.assert_frame_equal(again, first)
    assert parses.count("events") == 2


def test_a_quick_parse_is_not_kept(monkeypatch: pytest.MonkeyPatch, parses: list[str]) -> None:
    monkeypatch.setattr(cache, "MIN_PARSE_SECONDS", 3600.0)
    for _ in range(2):
        open_evidence(FIXTURES / "runaway").events  # noqa: B018
    assert parses.count("events") == 2
    assert not [e for e in cache.root().iterdir() if e.is_dir()]


def test_the_cache_command_says_what_it_holds_and_clears_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["inspect", str(FIXTURES / "runaway"), "--no-cache", "--quiet"]) == 0
    assert not cache.root().exists() or not any(cache.root().iterdir())
    os.environ.pop(cache.DISABLE_ENV, None)  # --no-cache set it for the kernels of its run
    assert main(["inspect", str(FIXTURES / "runaway"), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["cache", "info"]) == 0
    said = capsys.readouterr().out
    assert str(cache.root()) in said and "entries" in said and "parsed" in said
    assert main(["cache", "clear"]) == 0
    assert "cleared" in capsys.readouterr().out
    assert not [e for e in cache.root().iterdir() if e.is_dir()]
    assert cache.loads() == []


@pytest.mark.notebook
def test_run_all_parses_each_source_once_then_never(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file source is parsed once by the first run all and never by the second; a database
    source (here the ADK Python store) once by each run, for all its flows, and the entries
    kept for a run are gone when it ends."""
    monkeypatch.setattr(cache, "MIN_PARSE_SECONDS", 3600.0)  # only run all's own keeping counts
    pack = _copy("crash_recovery-adk-python", tmp_path)
    sources = load_manifest(pack).sources
    files = {section for section, spec in sources.items() if not spec.is_database}
    databases = set(sources) - files
    assert files and databases
    argv = ["run", "all", "--evidence", str(pack), "-p", "app_name", "invoicing", "--quiet"]
    assert main([*argv, "--out", str(tmp_path / "first")]) == 1
    first = cache.loads()
    parsed = [(section, entry) for how, section, entry in first if how == "parse"]
    assert sorted(section for section, _ in parsed) == sorted(files | databases)
    assert sum(how == "read" for how, _, _ in first) >= 3 * len(sources) - 1  # three flows read
    assert main([*argv, "--out", str(tmp_path / "second")]) == 1
    second = cache.loads()[len(first) :]
    assert sorted(section for how, section, _ in second if how == "parse") == sorted(databases)
    assert {section for how, section, _ in second if how == "read"} == files | databases
    assert not [p.name for p in cache.root().iterdir() if p.name.startswith("run-")]
    for flow in ("orphans", "latency_cliff", "runaway"):
        one, two = (
            json.loads((tmp_path / run / flow / "findings.json").read_text(encoding="utf-8"))
            for run in ("first", "second")
        )
        assert one["items"] == two["items"] and one["summary"] == two["summary"]
