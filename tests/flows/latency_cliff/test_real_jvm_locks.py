"""Real JDK 17 and 25 dumps of ``tests/data/threads/jvm-orders``: a thread spinning on
Thread.yield is not stuck, and the thread holding the lock others wait for is the cause.

The dumps were written by ``jcmd <pid> Thread.print [-l]`` and ``Thread.dump_to_file`` of a
running JVM (``scripts/make_jvm_evidence``), not by the simulator; ``truth.json`` holds what
they show, read from the files themselves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from incidentkit.flows.latency_cliff import Frames, triage_latency
from incidentkit.flows.latency_cliff.findings import latency_findings
from incidentkit.flows.latency_cliff.locks import lock_owners
from incidentkit.flows.latency_cliff.stacks import (
    BUSY_SHARE,
    group_stuck,
    stuck_threads,
    unchanged_threads,
)
from incidentkit.frames import build
from incidentkit.manifest import Filters, SourceSpec
from incidentkit.sources.jvm import threads as loader

JVM = Path(__file__).resolve().parents[2] / "data" / "threads" / "jvm-orders"
TRUTH: dict[str, Any] = json.loads((JVM / "truth.json").read_text())
TOOLS: list[str] = TRUTH["tools"]


def dumps(kind: str = "with_l") -> pd.DataFrame:
    spec = SourceSpec(
        "threads",
        paths=tuple(JVM / name for name in TRUTH["dumps"][kind]),
        naive_timestamps=TRUTH["timezone"],
    )
    loaded = loader.load(spec, Filters())
    assert loaded.rejects.empty and loaded.warnings.empty, loaded.warnings
    return loaded.frames["threads"]


def hanging(threads: pd.DataFrame) -> Frames:
    """The dumps with invocations open past the client timeout: six calls of quote_price and
    three of reserve_stock that never returned, as the tool threads in the dumps show."""
    start = threads["taken_at"].min() - pd.Timedelta(minutes=5)
    tools = ["quote_price"] * 6 + ["reserve_stock"] * 3
    ids = [f"i-{n}" for n in range(1, len(tools) + 1)]
    diagnostics = build(
        "diagnostics",
        [
            {"kind": "run.start", "invocation_id": i, "session_id": f"s-{i}", "ts": start}
            for i in ids
        ],
    )
    events = build(
        "events",
        [
            {"event_id": f"e-{i}", "session_id": f"s-{i}", "invocation_id": i, "seq": 0}
            | {"ts": start + pd.Timedelta(seconds=1)}
            for i in ids
        ],
    )
    calls = build(
        "calls",
        [
            {"event_id": f"e-{i}", "session_id": f"s-{i}", "invocation_id": i, "seq": 0}
            | {"call_id": f"c-{i}", "name": tool}
            for i, tool in zip(ids, tools, strict=True)
        ],
    )
    return Frames(diagnostics=diagnostics, events=events, calls=calls, threads=threads)


def test_headers_give_cpu_and_elapsed_and_the_spinner_gains_a_core() -> None:
    spin = TRUTH["spinning"]
    frame = dumps()
    rows = frame.loc[frame["thread"].eq(spin["thread"])]
    assert rows["cpu_ms"].tolist() == spin["cpu_ms"]
    assert rows["elapsed_ms"].tolist() == pytest.approx([s * 1000 for s in spin["elapsed_s"]])
    (row,) = (
        unchanged_threads(frame).loc[lambda f: f["thread"].eq(spin["thread"])].to_dict("records")
    )
    assert row["cpu_share"] == pytest.approx(spin["cpu_share"], abs=0.001)
    blocked = unchanged_threads(frame).set_index("thread").loc[TRUTH["monitor"]["waiters"]]
    assert blocked["cpu_share"].lt(0.01).all()  # a blocked thread's cpu= barely moves


@pytest.mark.parametrize("kind", ["with_l", "without_l", "jdk25_with_l"])
def test_a_thread_spinning_in_place_is_not_stuck(kind: str) -> None:
    spin = TRUTH["spinning"]
    report = triage_latency(hanging(dumps(kind)), as_of=dumps(kind)["taken_at"].max())
    stuck = {name for names in report.thread_groups["threads"] for name in names}
    assert spin["thread"] not in stuck
    assert spin["thread"] not in set(stuck_threads(dumps(kind))["thread"])
    (row,) = report.spinning.to_dict("records")
    assert row["threads"] == (spin["thread"],) and row["cpu_share"] >= BUSY_SHARE
    items = {item.id: item for item in latency_findings(report).items}
    spinning = items["latency_cliff/spinning-threads"]
    assert spin["thread"] in spinning.rows[0]["threads"]
    assert "InventoryPoller.awaitRestock" in spinning.title and "of a core" in spinning.title
    assert spin["thread"] not in json.dumps(items["latency_cliff/stuck-threads"].rows)


def test_without_cpu_the_spinner_keeps_the_old_reading_and_a_note_says_why() -> None:
    threads = dumps("jdk25_plain")
    report = triage_latency(hanging(threads), as_of=threads["taken_at"].max())
    assert report.spinning.empty
    stuck = {name for names in report.stalls["threads"] for name in names}
    assert TRUTH["spinning"]["thread"] in stuck  # unknown share: unchanged means stuck
    assert any("no cpu= and elapsed=" in note for note in report.notes)


@pytest.mark.parametrize("kind", ["with_l", "without_l", "jdk25_with_l", "jdk25_plain"])
def test_the_monitor_owner_is_named_first_with_its_socket_read(kind: str) -> None:
    truth = TRUTH["monitor"]
    threads = dumps(kind)
    owners = lock_owners(threads, TOOLS, unchanged=stuck_threads(threads)["thread"])
    row = owners.set_index("owner").loc[truth["owner"]]
    assert list(row["waiters"]) == truth["waiters"]
    assert (row["lock_class"], row["lock_wait"], row["activity"]) == (
        truth["lock_class"],
        truth["lock_wait"],
        truth["activity"],
    )
    assert (row["owner_app_frame"], row["client"], row["tool"]) == (
        truth["owner_app_frame"],
        truth["client"],
        truth["tool"],
    )
    assert row["unchanged"] and row["dumps"] == 2 and row["lock_frame"] == truth["lock_frame"]
    groups = group_stuck(stuck_threads(threads), TOOLS, owners)
    first = groups.iloc[0]
    assert first["threads"] == (truth["owner"],)
    assert (first["blocking"], first["client"], first["idle"]) == (6, truth["client"], False)
    waiters = groups.loc[groups["waits_for"].eq(truth["owner"])].iloc[0]
    assert list(waiters["threads"]) == truth["waiters"] and waiters["state"] == "BLOCKED"


def test_the_lock_owner_is_the_finding_and_the_fix_names_its_client() -> None:
    truth = TRUTH["monitor"]
    threads = dumps()
    report = triage_latency(hanging(threads), as_of=threads["taken_at"].max())
    found = latency_findings(report)
    ids = [item.id for item in found.items]
    assert ids.index("latency_cliff/lock-owner") < ids.index("latency_cliff/stuck-threads")
    owner = found.items[ids.index("latency_cliff/lock-owner")]
    assert owner.title.startswith(f"{truth['owner']} holds the lock 6 thread(s)")
    assert "a socket read" in owner.title and "PriceFeedClient.fetchAll" in owner.title
    assert owner.rows[0]["client"] == truth["client"]
    stuck = found.items[ids.index("latency_cliff/stuck-threads")]
    assert stuck.rows[0]["threads"] == [truth["owner"]] and "holding the lock" in stuck.title
    idle = [row for row in report.idle_threads.to_dict("records")]
    assert all(truth["owner"] not in row["threads"] for row in idle)
    assert report.fix["client"].eq(truth["client"]).all()
    changes = " ".join(report.fix["change"])
    assert truth["client"] in changes and "outside the com.acme.orders.PriceCache lock" in changes
    assert f"(in {truth['lock_frame']})" in changes
    assert f"Give {truth['wrong_client']} " not in changes


def test_a_reentrant_lock_owner_needs_thread_print_l() -> None:
    truth = TRUTH["ownable"]
    named = lock_owners(dumps("with_l"), TOOLS).set_index("owner").loc[truth["owner"]]
    assert list(named["waiters"]) == truth["waiters"]
    assert (named["lock_class"], named["client"], named["activity"]) == (
        truth["lock_class"],
        truth["client"],
        truth["activity"],
    )
    assert named["lock_frame"] == truth["lock_frame"]
    threads = dumps("without_l")
    unknown = lock_owners(threads, TOOLS)
    (row,) = unknown.loc[unknown["owner"].isna()].to_dict("records")
    assert list(row["waiters"]) == truth["waiters"] and row["waiter_frame"] == truth["waiter_frame"]
    report = triage_latency(hanging(threads), as_of=threads["taken_at"].max())
    items = {item.id: item for item in latency_findings(report).items}
    assert "Thread.print -l" in items["latency_cliff/lock-owner-unknown"].action
    assert any("Thread.print -l" in note for note in report.notes)


def test_idle_by_design_stays_idle_beside_the_lock_owners() -> None:
    threads = dumps()
    stuck = stuck_threads(threads)
    groups = group_stuck(stuck, TOOLS, lock_owners(threads, TOOLS, unchanged=stuck["thread"]))
    reasons = {
        name: reason
        for names, reason in zip(groups["threads"], groups["idle_reason"], strict=True)
        for name in names
    }
    assert {name: reasons[name] for name in TRUTH["idle_by_design"]} == TRUTH["idle_by_design"]
