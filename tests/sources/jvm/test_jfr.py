"""JFR recordings: the committed real recording (tests/data/jfr, made by scripts/make_jfr) read
from its JSON export and, when a JDK is present, through the real ``jfr`` tool."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from incidentkit.errors import SourceError
from incidentkit.evidence import Evidence
from incidentkit.frames import FRAMES
from incidentkit.manifest import Filters, parse_manifest
from incidentkit.sources.jvm import jfr
from incidentkit.sources.jvm.jfr_events import EVENT_TYPES, FRAME_OF

DATA = Path(__file__).resolve().parents[2] / "data" / "jfr"
EXPORT = DATA / "stalled-agent.json.gz"
RECORDING = DATA / "stalled-agent.jfr"
JFR_FRAMES = ("jfr_samples", "jfr_allocations", "jfr_old_objects", "jfr_heap", "jfr_locks")


def needs_jdk() -> None:
    if shutil.which("jfr") is None:
        pytest.skip("no JDK: jfr not on the PATH")


def open_jfr(path: Path, **section: Any) -> Evidence:
    manifest = parse_manifest({"jfr": {"path": str(path), **section}}, base=path.parent)
    return Evidence(manifest)


def exported_events() -> list[dict[str, Any]]:
    """The export's events, read with the standard library: the oracle the loader must match."""
    with gzip.open(EXPORT, "rt", encoding="utf-8") as handle:
        events: list[dict[str, Any]] = json.load(handle)["recording"]["events"]
    return events


def write_export(path: Path, events: list[Any]) -> Path:
    path.write_text(json.dumps({"recording": {"events": events}}), encoding="utf-8")
    return path


def test_export_rows_match_the_events_of_each_type() -> None:
    incident = open_jfr(EXPORT)
    counts = Counter(event["type"] for event in exported_events())
    for frame in JFR_FRAMES:
        wanted = sum(n for kind, n in counts.items() if FRAME_OF.get(kind) == frame)
        assert wanted > 0, f"the fixture has no event for {frame}: run scripts/make_jfr"
        assert len(incident.frame(frame)) == wanted, frame
        assert list(incident.frame(frame).columns) == FRAMES[frame].names
    assert incident.rejects.empty and incident.warnings.empty


def test_the_stalled_tool_threads_are_sampled_in_a_native_socket_read() -> None:
    samples = open_jfr(EXPORT).jfr_samples
    tools = samples.loc[samples["thread"].str.startswith("tool-pool-1-thread-")]
    assert tools["thread"].nunique() == 4
    assert tools["event_type"].eq("native").all()
    assert tools["top_frame"].str.startswith("sun.nio.ch.SocketDispatcher.read0").all()
    assert tools["frames"].map(lambda fs: any("ShippingTools.carrierRates" in f for f in fs)).all()
    assert samples["ts"].dt.tz is not None and samples["ts"].is_monotonic_increasing


def test_heap_after_gc_grows_and_old_objects_name_the_cache() -> None:
    incident = open_jfr(EXPORT)
    after = incident.jfr_heap.loc[incident.jfr_heap["when"].eq("after"), "heap_used"]
    assert after.iloc[-1] > 2 * after.iloc[0]
    old = incident.jfr_old_objects
    top = old["top_frame"].value_counts().index[0]
    assert top.startswith("RunnerCache$Entry.<init>")
    assert (old["allocated_at"] <= old["ts"]).all()


def test_locks_hold_the_monitor_and_the_parks() -> None:
    locks = open_jfr(EXPORT).jfr_locks
    monitor = locks.loc[locks["event_type"].eq("monitor-enter")]
    assert set(monitor["class"]) == {"LedgerLock"}
    assert set(monitor["previous_owner"].dropna()) <= {"ledger-writer-1", "ledger-writer-2"}
    assert (locks["duration_ms"] >= 20).all()  # the recording's threshold


def test_the_recording_through_jfr_gives_the_export_frames() -> None:
    needs_jdk()
    binary, export = open_jfr(RECORDING), open_jfr(EXPORT)
    for frame in JFR_FRAMES:
        got = binary.frame(frame).drop(columns="recording")
        pd.testing.assert_frame_equal(got, export.frame(frame).drop(columns="recording"))
    assert binary.rejects.empty


def test_format_is_detected_and_a_wrong_one_refused(tmp_path: Path) -> None:
    assert jfr.detect(RECORDING) == "jfr" and jfr.detect(EXPORT) == "jfr-json"
    with pytest.raises(SourceError, match=r"is a binary recording, but .* format = 'jfr-json'"):
        open_jfr(RECORDING, format="jfr-json").load_all()
    with pytest.raises(SourceError, match=r"is a JSON export, not a binary .* format = 'jfr'"):
        open_jfr(EXPORT, format="jfr").load_all()
    other = tmp_path / "spans.json"
    other.write_text('{"resourceSpans": []}', encoding="utf-8")
    with pytest.raises(SourceError, match="not the output of jfr print --json"):
        open_jfr(other).load_all()


def test_no_jdk_is_a_clear_error(tmp_path: Path) -> None:
    spec = parse_manifest({"jfr": {"path": str(RECORDING)}}, base=DATA).sources["jfr"]
    secret = tmp_path / "s3cr3t-tools" / "bin"
    with pytest.raises(SourceError, match=r"no JDK was found.*jfr-json") as raised:
        jfr.load(spec, Filters(), environ={"PATH": f"{secret}:{tmp_path}"})
    assert "s3cr3t" not in str(raised.value)  # the PATH names the host's folders: never shown
    assert "2 PATH folders searched" in str(raised.value)


def fake_jfr(folder: Path, body: str) -> dict[str, str]:
    """A real ``jfr`` executable on a PATH of its own, doing what ``body`` says."""
    tool = folder / "jfr"
    tool.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    tool.chmod(0o755)
    return {"PATH": f"{folder}:/usr/bin:/bin"}


def test_a_failing_jfr_reports_its_first_line(tmp_path: Path) -> None:
    spec = parse_manifest({"jfr": {"path": str(RECORDING)}}, base=DATA).sources["jfr"]
    environ = fake_jfr(tmp_path, 'echo "Not a complete Chunk header" >&2\necho more >&2\nexit 1')
    with pytest.raises(SourceError, match=r"exit code 1\): Not a complete Chunk header"):
        jfr.load(spec, Filters(), environ=environ)


def test_a_jfr_that_hangs_is_killed(tmp_path: Path) -> None:
    environ = fake_jfr(tmp_path, "exec sleep 30")
    with (
        pytest.raises(SourceError, match=r"did not finish within 0\.5 s"),
        jfr.printed(RECORDING, environ=environ, timeout_s=0.5) as out,
    ):
        out.read()


def test_malformed_events_are_rejects_with_their_place(tmp_path: Path) -> None:
    good = {
        "type": "jdk.GCHeapSummary",
        "values": {
            "startTime": "2026-12-02T15:40:28Z",
            "gcId": 1,
            "when": "After GC",
            "heapUsed": 10,
        },
    }
    events = [
        good,
        {"type": "jdk.GCHeapSummary", "values": {"startTime": "2026-12-02T15:40:29Z"}},
        {"type": "jdk.ExecutionSample", "values": {"startTime": "2026-12-02T15:40:29Z"}},
        {"type": "jdk.ThreadPark", "values": []},
        {
            "type": "jdk.ObjectAllocationSample",
            "values": {"startTime": "yesterday", "objectClass": {"name": "[B"}, "weight": 5},
        },
        {"type": "jdk.CPULoad", "values": None},  # not read at all: no reject
        "not an event",
        {"type": "jdk.GCHeapSummary", "values": {**good["values"], "gcId": -(2**64)}},
        {"type": "jdk.GCHeapSummary", "values": {**good["values"], "heapUsed": 2**63}},
    ]
    incident = open_jfr(write_export(tmp_path / "bad.json", events))
    assert len(incident.jfr_heap) == 1
    rejects = incident.rejects.set_index("location")["reason"]
    assert rejects.to_dict() == {
        "bad.json:event 2": "jdk.GCHeapSummary: when is neither 'Before GC' nor 'After GC'",
        "bad.json:event 3": "jdk.ExecutionSample: no sampledThread",
        "bad.json:event 4": "jdk.ThreadPark: no values object",
        "bad.json:event 5": "startTime: not an ISO 8601 timestamp",
        "bad.json:event 8": "jdk.GCHeapSummary: gcId is out of range (past a Java long)",
        "bad.json:event 9": "jdk.GCHeapSummary: heapUsed is out of range (past a Java long)",
    }


def test_a_cut_export_keeps_the_events_before_the_cut(tmp_path: Path) -> None:
    text = gzip.decompress(EXPORT.read_bytes())
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(text[: len(text) // 2]))
    incident = open_jfr(cut)
    whole = open_jfr(EXPORT)
    kept = sum(len(incident.frame(f)) for f in JFR_FRAMES)
    assert 0 < kept < sum(len(whole.frame(f)) for f in JFR_FRAMES)
    (reason,) = incident.rejects["reason"]
    assert "cut or malformed" in reason


def test_memory_is_bounded_by_the_events_kept(tmp_path: Path) -> None:
    """80 000 events of a type the kit does not read (~25 MB of JSON) decode in a few MB."""
    filler = {
        "type": "jdk.ClassLoad",
        "values": {
            "startTime": "2026-12-02T15:40:28Z",
            "loadedClass": {"name": "x/" * 100},
            "padding": "p" * 100,
        },
    }
    big = write_export(tmp_path / "big.json", [filler] * 80_000)
    assert big.stat().st_size > 20_000_000
    tracemalloc.start()
    try:
        open_jfr(big).load_all()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < big.stat().st_size / 5


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
VALUE = st.fixed_dictionaries(
    {},
    optional={
        "startTime": st.sampled_from(["2026-12-02T15:40:28Z", "2026-12-02T16:40:28+01:00", "x"])
        | JSON,
        "sampledThread": st.fixed_dictionaries({"javaName": st.text(max_size=8)}) | JSON,
        "eventThread": st.fixed_dictionaries({"javaName": st.text(max_size=8)}) | JSON,
        "duration": st.sampled_from(["PT0.5S", "PT-1S", "bad"]) | JSON,
        "when": st.sampled_from(["Before GC", "After GC"]) | JSON,
        "gcId": st.integers() | JSON,
        "heapUsed": st.integers() | JSON,
        "weight": st.integers() | JSON,
        "objectClass": st.fixed_dictionaries({"name": st.text(max_size=8)}) | JSON,
        "object": st.fixed_dictionaries({"type": st.fixed_dictionaries({"name": st.text()})})
        | JSON,
        "stackTrace": JSON,
    },
)
EVENT = st.fixed_dictionaries(
    {
        "type": st.sampled_from([*EVENT_TYPES, "jdk.InitialEnvironmentVariable"]) | JSON,
        "values": VALUE | JSON,
    }
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(events=st.lists(EVENT, max_size=12))
def test_every_allowed_event_is_a_row_or_a_reject(tmp_path: Path, events: list[Any]) -> None:
    path = write_export(tmp_path / "any.json", events)
    spec = parse_manifest({"jfr": {"path": str(path)}}, base=tmp_path).sources["jfr"]
    loaded = jfr.load(spec, Filters())
    rows = sum(len(frame) for frame in loaded.frames.values())
    allowed = sum(isinstance(e["type"], str) and e["type"] in FRAME_OF for e in events)
    assert rows + len(loaded.rejects) == allowed
    for name, frame in loaded.frames.items():
        assert list(frame.columns) == FRAMES[name].names


SECRET_BEARING = {
    "jdk.InitialEnvironmentVariable",
    "jdk.InitialSystemProperty",
    "jdk.InitialSecurityProperty",
    "jdk.SystemProcess",
    "jdk.ProcessStart",
    "jdk.JVMInformation",
}


def test_the_committed_fixture_holds_no_secret_bearing_event() -> None:
    assert not SECRET_BEARING & {event["type"] for event in exported_events()}
    assert not SECRET_BEARING & set(EVENT_TYPES)
    needs_jdk()
    summary = subprocess.run(
        ["jfr", "summary", str(RECORDING)], capture_output=True, check=True, text=True
    ).stdout
    recorded = {line.split()[0] for line in summary.splitlines() if line.strip().startswith("jdk.")
                and line.split()[1] != "0"}  # fmt: skip
    assert recorded and not SECRET_BEARING & recorded


def test_a_recording_outside_the_window_says_so_not_that_it_is_empty(tmp_path: Path) -> None:
    manifest = parse_manifest(
        {
            "allow_outside": True,
            "window": {"start": "2026-11-29T02:55:00Z", "end": "2026-11-29T03:16:00Z"},
            "jfr": {"path": str(EXPORT)},
        },
        base=tmp_path,
    )
    evidence = Evidence(manifest)
    assert all(evidence.frame(name).empty for name in JFR_FRAMES)
    (reason,) = evidence.warnings["reason"]
    assert "falls outside the window" in reason and "2026-11-29T02:55:00" in reason
    assert "holds none" not in reason


DEFAULT = DATA / "orders-default.json.gz"
"""The export of a default-settings recording (scripts/make_jvm_evidence): the recording itself
holds the environment and system properties, so only its allowlisted types are committed."""


def test_the_default_settings_export_holds_only_the_types_the_kit_reads() -> None:
    with gzip.open(DEFAULT, "rt", encoding="utf-8") as handle:
        types = Counter(event["type"] for event in json.load(handle)["recording"]["events"])
    assert set(types) <= set(EVENT_TYPES) and not SECRET_BEARING & set(types)
    loaded = Evidence(parse_manifest({"jfr": {"path": str(DEFAULT)}}, base=DATA))
    old = loaded.jfr_old_objects
    assert len(old) == types["jdk.OldObjectSample"]
    assert old["frames"].map(len).eq(0).all() and old["top_frame"].isna().all()  # default.jfc
    assert loaded.rejects.empty and loaded.warnings.empty
