"""Stuck threads in two real JDK 17 dumps (``tests/data/threads/jvm-carrier``): a tool pool blocked
in a socket read with no read timeout, a listener in the same read by design, threads that moved.

The dumps were taken from a running JVM with ``jcmd <pid> Thread.print`` (see the folder's
README and make_dumps.sh), not written by the simulator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from incidentkit.flows.latency_cliff.stacks import group_stuck, stuck_threads
from incidentkit.manifest import Filters, SourceSpec
from incidentkit.sources.jvm import threads as loader

JVM = Path(__file__).resolve().parents[2] / "data" / "threads" / "jvm-carrier"
TRUTH: dict[str, Any] = json.loads((JVM / "truth.json").read_text())


def _threads() -> pd.DataFrame:
    spec = SourceSpec(
        "threads",
        paths=(JVM / "dump-1.txt", JVM / "dump-2.txt"),
        naive_timestamps=TRUTH["timezone"],
    )
    loaded = loader.load(spec, Filters())
    assert loaded.rejects.empty and loaded.warnings.empty
    return loaded.frames["threads"]


def test_the_jvm_dumps_load_with_their_utc_times_and_hex_nids() -> None:
    frame = _threads()
    per_dump = frame.groupby("dump").size().to_dict()
    assert per_dump == {d["file"]: d["thread_blocks"] for d in TRUTH["dumps"]}
    taken = sorted(frame["taken_at"].unique())
    assert taken == [pd.Timestamp(d["utc_time"]) for d in TRUTH["dumps"]]
    tool = frame.loc[frame["thread"].eq("tool-exec-1")]
    nid = tool["nid"].iloc[0]
    assert tool["nid"].tolist() == [nid, nid] and nid.startswith("0x")


def test_only_the_unmoved_threads_are_stuck() -> None:
    stuck = stuck_threads(_threads())
    assert sorted(stuck["thread"]) == sorted(TRUTH["unchanged_threads"])
    assert not set(TRUTH["not_stuck"]) & set(stuck["thread"])


def test_the_tool_group_comes_first_and_the_listener_is_set_apart() -> None:
    truth = TRUTH["stuck"]
    groups = group_stuck(stuck_threads(_threads()), [truth["tool"]])
    first = groups.iloc[0]
    assert list(first["threads"]) == truth["threads"]
    assert (first["tool"], first["state"], first["top_frame"]) == (
        truth["tool"],
        truth["state"],
        truth["top_frame"],
    )
    assert (first["app_frame"], first["tool_frame"], first["client"]) == (
        truth["app_frame"],
        truth["tool_frame"],
        truth["client_class"],
    )
    idle = groups.loc[groups["idle"]]
    named = {name for names in idle["threads"] for name in names}
    assert {entry["thread"] for entry in TRUTH["idle_by_design"]} <= named
    assert groups.loc[~groups["idle"], "count"].sum() == len(truth["threads"])
    # one group per state: the frameless JVM threads split by their state
    assert not groups.duplicated(["top_frame", "app_frame", "state"]).any()
