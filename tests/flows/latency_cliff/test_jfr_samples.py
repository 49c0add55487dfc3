"""Stuck threads and lock contention from the committed real JFR recording."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from incidentkit.evidence import Evidence
from incidentkit.flows.common import Frames
from incidentkit.flows.latency_cliff.findings import latency_findings
from incidentkit.flows.latency_cliff.samples import contention, executed_between, sampled_stuck
from incidentkit.flows.latency_cliff.triage import triage_latency
from incidentkit.frames import build
from incidentkit.manifest import parse_manifest

EXPORT = Path(__file__).resolve().parents[2] / "data" / "jfr" / "stalled-agent.json.gz"


def recording() -> Evidence:
    return Evidence(parse_manifest({"jfr": {"path": str(EXPORT)}}, base=EXPORT.parent))


def test_threads_in_one_native_read_all_along_are_stuck() -> None:
    samples = recording().jfr_samples
    stuck = sampled_stuck(samples)
    tools = {f"tool-pool-1-thread-{n}" for n in range(1, 5)}
    assert tools <= set(stuck["thread"])
    assert "rate-table" not in set(stuck["thread"])  # on CPU: execution samples
    # the rule, checked against the samples themselves: one stack, only native samples
    for thread in stuck["thread"]:
        own = samples.loc[samples["thread"].eq(thread)]
        assert own["event_type"].eq("native").all() and len(set(own["frames"])) == 1


def test_a_thread_sampled_only_late_is_not_stuck() -> None:
    samples = recording().jfr_samples
    late = samples["ts"] > samples["ts"].quantile(0.5)
    one = samples["thread"].eq("tool-pool-1-thread-1")
    assert "tool-pool-1-thread-1" not in set(sampled_stuck(samples.loc[~one | late])["thread"])


def test_jfr_alone_gives_the_stuck_tool_group_and_dumps_are_corroborated() -> None:
    incident = recording()
    samples = incident.jfr_samples
    as_of = samples["ts"].max()
    alone = triage_latency(Frames(), as_of=as_of, jfr_samples=samples)
    top = alone.stalls.iloc[0]
    assert top["evidence"] == "JFR samples" and top["count"] == 4
    assert top["app_frame"].startswith("CarrierClient.fetchRates")
    # two dumps in which tool-pool-1-thread-1 did not move either
    last = samples.loc[samples["thread"].eq("tool-pool-1-thread-1")].iloc[-1]
    dump = {"thread": last["thread"], "nid": "0x1", "state": "RUNNABLE", "frames": last["frames"]}
    dumps = build("threads", [{**dump, "dump": "d1"}, {**dump, "dump": "d2"}])
    both = triage_latency(Frames(threads=dumps), as_of=as_of, jfr_samples=samples)
    evidence = dict(zip(both.stalls["threads"], both.stalls["evidence"], strict=True))
    assert evidence[("tool-pool-1-thread-1",)] == "thread dumps and JFR samples"
    assert evidence[tuple(f"tool-pool-1-thread-{n}" for n in (2, 3, 4))] == "JFR samples"
    findings = latency_findings(both)
    item = next(i for i in findings.items if i.id == "latency_cliff/stuck-threads")
    assert "in all 2 dumps and in one native call through the JFR recording" in item.title


def test_contention_sums_the_blocked_time_per_monitor() -> None:
    locks = recording().jfr_locks
    found = contention(locks).set_index("class")
    monitor = locks.loc[locks["event_type"].eq("monitor-enter")]
    assert found.loc["LedgerLock", "blocked_ms"] == pytest.approx(monitor["duration_ms"].sum())
    assert found.loc["LedgerLock", "kind"] == "monitor"
    assert found.loc["LedgerLock", "threads"] == ("ledger-writer-1", "ledger-writer-2")
    lock = "java.util.concurrent.locks.ReentrantLock$NonfairSync"
    assert found.loc[lock, "kind"] == "lock"
    report = triage_latency(Frames(), as_of=locks["ts"].max(), jfr_locks=locks)
    ids = [item.id for item in latency_findings(report).items]
    assert "latency_cliff/lock-contention" in ids


def test_no_recording_changes_nothing() -> None:
    as_of = pd.Timestamp("2026-12-02T16:00:00Z")
    report = triage_latency(Frames(), as_of=as_of)
    assert report.thread_groups.empty and report.contention.empty and report.recordings == 0


ORDERS = EXPORT.parent / "orders-default.json.gz"
"""A default-settings recording of tests/data/threads/jvm-orders: restock-poller spins on
Thread.yield, sampled (if at all) running or in the yield itself."""


def test_a_thread_sampled_in_thread_yield_is_running_not_stuck_in_a_native_call() -> None:
    samples = recording().jfr_samples
    one = samples.loc[samples["thread"].eq("tool-pool-1-thread-1")]
    assert "tool-pool-1-thread-1" in set(sampled_stuck(one)["thread"])
    spin = "java.lang.Thread.yield(Native Method)"  # the same samples, but in the yield
    yielding = one.assign(
        thread="spinner", top_frame=spin, frames=[(spin, *f[1:]) for f in one["frames"]]
    )
    assert sampled_stuck(yielding).empty
    assert executed_between(yielding, pd.Series([], dtype="datetime64[ns, UTC]")) == {
        "spinner": len(yielding)
    }


def test_execution_samples_between_the_dumps_make_an_unchanged_thread_busy() -> None:
    samples = recording().jfr_samples
    busy = samples.loc[samples["event_type"].eq("execution"), "thread"].mode().iloc[0]
    last = samples.loc[samples["thread"].eq(busy)].iloc[-1]
    dump = {"thread": busy, "nid": "0x9", "state": "RUNNABLE", "frames": last["frames"]}
    times = (samples["ts"].min(), samples["ts"].max())  # no cpu= in these dumps
    dumps = build(
        "threads",
        [{**dump, "dump": f"d{i}", "taken_at": t} for i, t in enumerate(times, start=1)],
    )
    report = triage_latency(Frames(threads=dumps), as_of=times[1], jfr_samples=samples)
    assert all(busy not in names for names in report.thread_groups["threads"])
    (row,) = report.spinning.to_dict("records")
    assert row["threads"] == (busy,) and row["jfr_samples"] > 0 and pd.isna(row["cpu_share"])
    item = next(i for i in latency_findings(report).items if i.id.endswith("spinning-threads"))
    assert "JFR execution sample(s) between the dumps" in item.title


def test_the_default_recording_has_no_stuck_spinner() -> None:
    evidence = Evidence(parse_manifest({"jfr": {"path": str(ORDERS)}}, base=ORDERS.parent))
    stuck = set(sampled_stuck(evidence.jfr_samples)["thread"])
    assert "restock-poller" not in stuck
    assert {"price-refresher", "stock-sync"} <= stuck  # in their socket reads all along
