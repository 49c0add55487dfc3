"""Each step of the latency cliff flow on small hand-built frames: latency from every source,
the cross-check, buckets, open invocations by last event, stuck threads and their ties."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from incidentkit.flows.latency_cliff import Frames, triage_latency
from incidentkit.flows.latency_cliff.hangs import by_last_event, open_invocations
from incidentkit.flows.latency_cliff.latency import (
    cross_check,
    from_diagnostics,
    from_events,
    from_ledger,
    from_spans,
    per_bucket,
)
from incidentkit.flows.latency_cliff.stacks import (
    client_of,
    group_stuck,
    names_tool,
    pool_of,
    stuck_threads,
)
from incidentkit.frames import build

T0 = pd.Timestamp("2026-11-29T03:00:00Z")


def at(seconds: float) -> pd.Timestamp:
    return T0 + pd.Timedelta(seconds=seconds)


def diag(*lines: tuple[str, str, float, dict[str, Any]]) -> pd.DataFrame:
    """Diagnostics lines: (kind, invocation, seconds after T0, other fields)."""
    return build(
        "diagnostics",
        [
            {"kind": kind, "invocation_id": inv, "ts": at(s), "app_name": "support", **fields}
            for kind, inv, s, fields in lines
        ],
    )


def test_diagnostics_latency_pairs_start_and_end_and_marks_the_open_and_failed() -> None:
    got = from_diagnostics(
        diag(
            ("run.start", "e-1", 0, {"session_id": "s1"}),
            ("run.end", "e-1", 4.2, {"ms": 4150, "outcome": "ok"}),
            ("run.start", "e-2", 1, {"session_id": "s2"}),
            ("run.start", "e-3", 2, {"session_id": "s3"}),
            ("run.error", "e-3", 3, {}),
            ("run.end", "e-3", 3, {"outcome": "error"}),
            ("run.end", "e-9", 5, {"ms": 100, "outcome": "ok"}),  # its start is not in the log
        )
    )
    assert got["invocation_id"].tolist() == ["e-1", "e-2", "e-3"]
    assert got["ms"].tolist()[0] == 4150.0  # ms= as logged wins over the time between
    assert np.isnan(got["ms"].iloc[1]) and got["open"].tolist() == [False, True, False]
    assert got["ms"].iloc[2] == 1000.0  # no ms=: the time between the lines
    assert got["error"].tolist() == [False, False, True]
    assert got["session_id"].tolist() == ["s1", "s2", "s3"]
    assert got["source"].eq("diagnostics").all()


def test_spans_ledger_and_events_time_invocations_too() -> None:
    spans = build(
        "spans",
        [
            {
                "kind": "invocation",
                "invocation_id": "e-1",
                "start": at(0),
                "end": at(4),
                "duration_ms": 4000.0,
                "status": "OK",
            },
            {
                "kind": "call_llm",
                "invocation_id": "e-1",
                "start": at(0),
                "end": at(1),
                "duration_ms": 1000.0,
            },
            {
                "kind": "invocation",
                "invocation_id": "e-2",
                "start": at(1),
                "end": at(9),
                "duration_ms": 8000.0,
                "status": "ERROR",
            },
        ],
    )
    got = from_spans(spans)
    assert got[["invocation_id", "ms", "error", "open"]].values.tolist() == [
        ["e-1", 4000.0, False, False],
        ["e-2", 8000.0, True, False],
    ]
    runs = build(
        "runs",
        [
            {
                "run_id": "r1",
                "invocation_id": "e-1",
                "status": "DONE",
                "started_at": at(0),
                "updated_at": at(4.5),
            },
            {
                "run_id": "r2",
                "invocation_id": "e-2",
                "status": "RUNNING",
                "started_at": at(1),
                "updated_at": at(1),
            },
            {
                "run_id": "r3",
                "invocation_id": "e-3",
                "status": "PAUSED",
                "started_at": at(2),
                "updated_at": at(3),
            },
            {
                "run_id": "r4",
                "invocation_id": "e-4",
                "status": "FAILED",
                "started_at": at(2),
                "updated_at": at(5),
            },
        ],
    )
    ledger = from_ledger(runs)
    assert ledger["run_id"].tolist() == ["r1", "r2", "r4"]  # a paused run waits for a person
    assert ledger["ms"].tolist()[0] == 4500.0 and ledger["open"].tolist() == [False, True, False]
    assert ledger["error"].tolist() == [False, False, True]
    events = build(
        "events",
        [
            {
                "event_id": "a",
                "session_id": "s",
                "invocation_id": "e-1",
                "seq": 0,
                "ts": at(0),
                "author": "user",
            },
            {
                "event_id": "b",
                "session_id": "s",
                "invocation_id": "e-1",
                "seq": 1,
                "ts": at(3),
                "author": "agent",
                "final_response": True,
            },
            {
                "event_id": "c",
                "session_id": "s",
                "invocation_id": "e-2",
                "seq": 2,
                "ts": at(5),
                "author": "user",
            },
            {
                "event_id": "d",
                "session_id": "s",
                "invocation_id": "e-2",
                "seq": 3,
                "ts": at(6),
                "author": "agent",
            },
        ],
    )
    calls = build(
        "calls",
        [
            {
                "event_id": "d",
                "invocation_id": "e-2",
                "call_id": "c1",
                "name": "order_lookup",
                "session_id": "s",
                "seq": 3,
            }
        ],
    )
    logged = from_events(events, calls, build("responses", []))
    assert logged[["invocation_id", "ms", "open"]].values.tolist()[0] == ["e-1", 3000.0, False]
    assert logged["open"].tolist() == [False, True]


def test_a_long_running_call_is_a_pause_not_a_hang() -> None:
    events = build(
        "events",
        [
            {"event_id": "a", "session_id": "s", "invocation_id": "e-1", "seq": 0, "ts": at(0)},
            {
                "event_id": "b",
                "session_id": "s",
                "invocation_id": "e-1",
                "seq": 1,
                "ts": at(1),
                "final_response": True,
                "long_running_tool_ids": ("c1",),
            },
        ],
    )
    calls = build(
        "calls",
        [
            {
                "event_id": "b",
                "invocation_id": "e-1",
                "call_id": "c1",
                "name": "approve",
                "long_running": True,
            }
        ],
    )
    assert from_events(events, calls, build("responses", []))["open"].tolist() == [False]


def _latency(rows: list[dict[str, Any]], source: str) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    frame["source"] = source
    frame["started_at"] = at(0)
    frame["error"] = frame.get("error", False)
    return frame


def test_cross_check_names_what_disagrees_and_forgives_what_is_expected() -> None:
    best = _latency(
        [
            {"invocation_id": "e-1", "ms": 4000.0, "open": False},
            {"invocation_id": "e-2", "ms": 4000.0, "open": False},
            {"invocation_id": "e-3", "ms": np.nan, "open": True},
            {"invocation_id": "e-4", "ms": 4000.0, "open": False},
            {"invocation_id": "e-5", "ms": 4000.0, "open": False, "error": True},
        ],
        "diagnostics",
    )
    spans = _latency(
        [
            {"invocation_id": "e-1", "ms": 4100.0, "open": False},  # within tolerance
            {"invocation_id": "e-2", "ms": 9000.0, "open": False},  # far apart
        ],
        "spans",
    )
    ledger = _latency(
        [
            {"invocation_id": "e-1", "ms": 600_000.0, "open": False},  # a run spans more
            {"invocation_id": "e-4", "ms": np.nan, "open": True},  # a lost ledger update
        ],
        "ledger",
    )
    events = _latency(
        [
            {"invocation_id": "e-3", "ms": 3000.0, "open": False},  # answered, no run.end
            {"invocation_id": "e-5", "ms": np.nan, "open": True},  # failed: no final event
        ],
        "events",
    )
    got = cross_check(best, {"spans": spans, "ledger": ledger, "events": events})
    found = dict(zip(got["invocation_id"] + "/" + got["other_source"], got["detail"], strict=True))
    assert found == {
        "e-2/spans": "diagnostics says 4000 ms, spans 9000 ms",
        "e-3/events": "open in diagnostics, ended in events",
        "e-4/ledger": "ended in diagnostics, open in ledger",
    }


def test_buckets_give_percentiles_of_ended_runs_and_list_empty_buckets() -> None:
    latency = pd.DataFrame(
        {
            "started_at": [at(0), at(10), at(20), at(130)],
            "ms": [1000.0, 3000.0, np.nan, 5000.0],
            "open": [False, False, True, False],
            "error": [False, True, False, False],
        }
    )
    got = per_bucket(latency, pd.Timedelta(minutes=1))
    assert got["bucket"].tolist() == [at(0), at(60), at(120)]
    assert got[["runs", "ended", "open", "errors"]].values.tolist() == [
        [3, 2, 1, 1],
        [0, 0, 0, 0],
        [1, 1, 0, 0],
    ]
    assert got["p50_ms"].iloc[0] == 2000.0 and np.isnan(got["p50_ms"].iloc[1])
    assert got["p95_ms"].iloc[0] == pytest.approx(2900.0)


def _events_calls() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    events = build(
        "events",
        [
            {"event_id": "u1", "session_id": "s1", "invocation_id": "e-1", "seq": 0, "ts": at(0)},
            {"event_id": "m1", "session_id": "s1", "invocation_id": "e-1", "seq": 1, "ts": at(1)},
            {"event_id": "u2", "session_id": "s2", "invocation_id": "e-2", "seq": 0, "ts": at(2)},
            {"event_id": "m2", "session_id": "s2", "invocation_id": "e-2", "seq": 1, "ts": at(3)},
            {"event_id": "r2", "session_id": "s2", "invocation_id": "e-2", "seq": 2, "ts": at(4)},
        ],
    )
    calls = build(
        "calls",
        [
            {
                "event_id": "m1",
                "session_id": "s1",
                "invocation_id": "e-1",
                "seq": 1,
                "call_id": "c1",
                "name": "order_lookup",
            },
            {
                "event_id": "m2",
                "session_id": "s2",
                "invocation_id": "e-2",
                "seq": 1,
                "call_id": "c2",
                "name": "order_lookup",
            },
        ],
    )
    responses = build(
        "responses",
        [
            {
                "event_id": "r2",
                "session_id": "s2",
                "invocation_id": "e-2",
                "call_id": "c2",
                "name": "order_lookup",
            }
        ],
    )
    return events, calls, responses


def test_open_invocations_past_the_timeout_with_the_shape_of_their_last_event() -> None:
    events, calls, responses = _events_calls()
    latency = pd.DataFrame(
        {
            "invocation_id": ["e-1", "e-2", "e-3", "e-4", "e-5"],
            "run_id": ["r1", "r2", "r3", "r4", "r5"],
            "session_id": ["s1", "s2", "s3", "s4", "s5"],
            "started_at": [at(0), at(2), at(5), at(200), at(1)],
            "open": [True, True, True, True, False],
            "source": "diagnostics",
        }
    )
    runs = build("runs", [{"run_id": "r3", "status": "RUNNING", "lease_until": at(30)}])
    got = open_invocations(
        latency, events, calls, responses, as_of=at(240), older_than_s=60, runs=runs
    )
    assert got["invocation_id"].tolist() == ["e-1", "e-2", "e-3"]  # e-4 is younger than 60 s
    assert got["last_event_kind"].tolist() == [
        "unanswered_function_call",
        "model_call_in_flight",
        "no_events",
    ]
    assert got["tool"].tolist()[0] == "order_lookup" and got["call_id"].tolist()[0] == "c1"
    assert got["open_for_s"].tolist() == [240.0, 238.0, 235.0]
    assert got["lease_expired"].tolist() == [False, False, True]
    groups = by_last_event(got)
    assert groups[["last_event_kind", "count"]].values.tolist() == [
        ["model_call_in_flight", 1],
        ["no_events", 1],
        ["unanswered_function_call", 1],
    ]
    assert groups.set_index("last_event_kind").loc[
        "unanswered_function_call", "invocation_ids"
    ] == ("e-1",)


READ = (
    "sun.nio.ch.Net.poll(java.base@21.0.5/Native Method)",
    "java.net.Socket$SocketInputStream.read(java.base@21.0.5/Socket.java:1099)",
    "com.acme.shipping.CarrierClient.get(CarrierClient.java:41)",
    "com.acme.shipping.ShippingTools.carrierRates(ShippingTools.java:23)",
    "com.google.adk.tools.FunctionTool.call(FunctionTool.java:262)",
    "java.lang.Thread.run(java.base@21.0.5/Thread.java:1583)",
)
LISTEN = (
    "sun.nio.ch.Net.poll(java.base@21.0.5/Native Method)",
    "java.net.Socket$SocketInputStream.read(java.base@21.0.5/Socket.java:1099)",
    "com.acme.shipping.AuditFeedListener.awaitNext(AuditFeedListener.java:30)",
    "java.lang.Thread.run(java.base@21.0.5/Thread.java:1583)",
)
IDLE = (
    "jdk.internal.misc.Unsafe.park(java.base@21.0.5/Native Method)",
    "java.util.concurrent.ThreadPoolExecutor.getTask(java.base@21.0.5/ThreadPoolExecutor.java:1070)",
)


def threads(*dumps: list[tuple[str, str, str, tuple[str, ...]]]) -> pd.DataFrame:
    """Dumps of (thread, nid, state, frames)."""
    return build(
        "threads",
        [
            {
                "dump": f"dump-{i}",
                "taken_at": at(10 * i),
                "thread": name,
                "nid": nid,
                "state": state,
                "top_frame": frames[0] if frames else None,
                "frames": frames,
            }
            for i, dump in enumerate(dumps, start=1)
            for name, nid, state, frames in dump
        ],
    )


def test_a_thread_is_stuck_only_when_unmoved_in_every_dump() -> None:
    first = [
        ("tool-exec-1", "0x1", "RUNNABLE", READ),
        ("tool-exec-2", "0x2", "RUNNABLE", READ),
        ("tool-exec-3", "0x3", "RUNNABLE", READ),
        ("tool-exec-4", "0x4", "RUNNABLE", READ),
    ]
    second = [
        ("tool-exec-1", "0x1", "RUNNABLE", READ),
        ("tool-exec-2", "0x9", "RUNNABLE", READ),  # same name, another OS thread
        ("tool-exec-3", "0x3", "WAITING", READ),  # moved on: another state
        ("tool-exec-4", "0x4", "RUNNABLE", READ[1:]),  # another top frame
        ("tool-exec-5", "0x5", "RUNNABLE", READ),  # seen in one dump only
    ]
    got = stuck_threads(threads(first, second))
    assert got["thread"].tolist() == ["tool-exec-1"]
    assert got["dump"].tolist() == ["dump-2"]
    assert stuck_threads(threads(first)).empty  # one dump cannot tell stuck from busy
    three = stuck_threads(threads(first, first, [("tool-exec-1", "0x1", "RUNNABLE", READ)]))
    assert three["thread"].tolist() == ["tool-exec-1"]


def test_groups_tie_to_the_open_calls_tool_and_set_the_idle_apart() -> None:
    dump = [
        *[(f"tool-exec-{n}", f"0x{n}", "RUNNABLE", READ) for n in (1, 2, 10)],
        ("audit-feed-listener", "0x20", "RUNNABLE", LISTEN),
        ("pool-1-thread-1", "0x30", "WAITING", IDLE),
        ("VM Thread", "0x40", "UNKNOWN", ()),
        ("main", "0x50", "WAITING", ("jdk.internal.misc.Unsafe.park(Native Method)",)),
    ]
    stuck = stuck_threads(threads(dump, dump))
    got = group_stuck(stuck, ["carrier_rates"])
    tied = got.iloc[0]
    assert (tied["tool"], tied["count"], tied["pool"], tied["state"]) == (
        "carrier_rates",
        3,
        "tool-exec",
        "RUNNABLE",
    )
    assert tied["threads"] == ("tool-exec-1", "tool-exec-2", "tool-exec-10")
    assert tied["app_frame"] == "com.acme.shipping.CarrierClient.get(CarrierClient.java:41)"
    assert tied["client"] == "com.acme.shipping.CarrierClient"
    assert not tied["idle"]
    idle = got.loc[got["idle"]].set_index("pool")["idle_reason"].to_dict()
    assert idle == {
        "audit-feed-listener": "a socket read no open call explains (a listener waiting for data)",
        "pool-1-thread": "a pool worker waiting for work",
        "VM Thread": "a JVM thread",
        "main": "the main thread waiting for shutdown",
    }
    # with no open call to explain them, both socket reads may be the stall
    untied = group_stuck(stuck, [])
    assert untied.loc[~untied["idle"], "pool"].tolist() == ["tool-exec", "audit-feed-listener"]


@pytest.mark.parametrize(
    ("frame", "tool", "named"),
    [
        (
            "com.acme.shipping.ShippingTools.carrierRates(ShippingTools.java:23)",
            "carrierRates",
            True,
        ),
        (
            "com.acme.shipping.ShippingTools.carrierRates(ShippingTools.java:23)",
            "carrier_rates",
            True,
        ),
        (
            "com.example.support.tools.OrderLookupClient.fetch(OrderLookupClient.java:58)",
            "order_lookup",
            True,
        ),
        (
            "com.example.support.tools.OrderLookupTool.orderLookup(OrderLookupTool.java:31)",
            "ORDER-LOOKUP",
            True,
        ),
        (
            "com.acme.shipping.ShippingTools.carrierRates(ShippingTools.java:23)",
            "order_lookup",
            False,
        ),
        ("java.util.HashMap.get(java.base@21/HashMap.java:1)", "get", False),
        ("sun.net.www.protocol.http.HttpURLConnection.getInputStream(X.java:1)", "http_url", False),
    ],
)
def test_a_frame_names_a_tool_by_method_or_class_any_case(
    frame: str, tool: str, named: bool
) -> None:
    assert names_tool(frame, tool) is named


def test_pools_and_clients_are_read_off_names_and_frames() -> None:
    assert pool_of("tool-exec-8") == "tool-exec"
    assert pool_of("pool-3-thread-7") == "pool-3-thread"
    assert pool_of("grpc-default-worker-ELG-1-2") == "grpc-default-worker-ELG"
    assert pool_of("main") == "main"
    assert client_of(READ) == "com.acme.shipping.CarrierClient"
    library = (
        "sun.nio.ch.Net.poll(Native Method)",
        "jdk.internal.net.http.HttpClientImpl.send(HttpClientImpl.java:900)",
        "com.acme.Rates.fetch(Rates.java:9)",
    )
    assert client_of(library) == "jdk.internal.net.http.HttpClientImpl"


def test_the_triage_finds_the_cliff_the_hangs_and_the_fix_from_diagnostics_alone() -> None:
    rng = np.random.default_rng(1)
    lines: list[tuple[str, str, float, dict[str, Any]]] = []
    for i in range(40):  # healthy: about 4 s
        ms = float(np.exp(rng.normal(np.log(4000), 0.2)))
        lines += [
            ("run.start", f"e-{i}", i * 10.0, {}),
            ("run.end", f"e-{i}", i * 10 + ms / 1000, {"ms": round(ms), "outcome": "ok"}),
        ]
    for i in range(40, 80):  # after 400 s: about 55 s, and every tenth never ends
        start = 400 + (i - 40) * 5.0
        lines.append(("run.start", f"e-{i}", start, {}))
        if i % 10:
            ms = float(rng.uniform(48_000, 56_000))
            lines.append(
                ("run.end", f"e-{i}", start + ms / 1000, {"ms": round(ms), "outcome": "ok"})
            )
    report = triage_latency(Frames(diagnostics=diag(*lines)), as_of=at(900), client_timeout_s=60)
    assert report.source == "diagnostics"
    cliff = report.cliff.iloc[0]
    assert cliff["at"] == at(360)  # the 06:00 bucket holds the first slow start (06:40)
    assert (cliff["runs_before"], cliff["runs_after"]) == (40, 40)
    assert cliff["p95_after_ms"] > 10 * cliff["p95_before_ms"]
    assert not cliff["error_rate_changed"]
    assert report.open["invocation_id"].tolist() == ["e-40", "e-50", "e-60", "e-70"]
    assert report.open["last_event_kind"].eq("no_events").all()  # no event log here
    assert report.open_share == pytest.approx(4 / 40)
    assert report.fix.empty  # no tool is known: no event log, no thread dump
    assert any("No thread verdict: no thread dumps" in note for note in report.notes)


def test_a_window_with_no_source_is_said_so() -> None:
    report = triage_latency(Frames(), as_of=at(0))
    assert report.source is None and report.cliff.empty and report.open.empty
    assert "No source times an invocation" in report.notes[0]


LINE = st.tuples(
    st.sampled_from(["run.start", "run.end", "run.error", "tool.error"]),
    st.sampled_from([f"e-{n}" for n in range(12)]),
    st.floats(min_value=0, max_value=3000, allow_nan=False),
    st.fixed_dictionaries(
        {},
        optional={
            "ms": st.integers(min_value=-5, max_value=10**9),
            "outcome": st.sampled_from(["ok", "error", "weird"]),
            "session_id": st.sampled_from(["s1", "s2"]),
        },
    ),
)


@pytest.mark.slow
@settings(max_examples=80, deadline=None, derandomize=bool(os.environ.get("CI")))
@given(st.lists(LINE, max_size=60), st.floats(min_value=0, max_value=4000, allow_nan=False))
def test_any_diagnostics_log_triages_without_error(
    lines: list[tuple[str, str, float, dict[str, Any]]], as_of_s: float
) -> None:
    """Duplicated, missing, reordered and nonsensical lines: the triage still answers, and
    its frames keep their invariants."""
    frame = diag(*lines).sort_values("ts", kind="stable").reset_index(drop=True)
    report = triage_latency(Frames(diagnostics=frame), as_of=at(as_of_s), client_timeout_s=60)
    first: dict[str, float] = {}  # the earliest run.start counts; a later as_of start is unseen
    for kind, inv, seconds, _ in lines:
        if kind == "run.start":
            first[inv] = min(seconds, first.get(inv, seconds))
    starts = {inv for inv, seconds in first.items() if at(seconds) <= at(as_of_s)}
    assert set(report.series["invocation_id"]) == starts
    assert set(report.open["invocation_id"]) <= set(
        report.series.loc[report.series["open"], "invocation_id"]
    )
    assert report.open["open_for_s"].gt(60).all()
    if report.has_cliff:
        row = report.cliff.iloc[0]
        assert row["runs_before"] + row["runs_after"] == len(report.series)
    assert int(report.buckets["runs"].sum()) == len(report.series)


THREAD = st.tuples(
    st.sampled_from(["tool-exec-1", "tool-exec-2", "main", "VM Thread", 'a"b', ""]),
    st.sampled_from(["0x1", "0x2", None]),
    st.sampled_from(["RUNNABLE", "WAITING", "UNKNOWN"]),
    st.lists(st.sampled_from([*READ, *LISTEN, *IDLE, "x(y", "(", "a/b.c(d)"]), max_size=6).map(
        tuple
    ),
)


@settings(max_examples=80, deadline=None, derandomize=bool(os.environ.get("CI")))
@given(
    st.lists(st.lists(THREAD, max_size=8), min_size=1, max_size=3), st.lists(st.text(max_size=8))
)
def test_any_set_of_dumps_groups_without_error(
    dumps: list[list[tuple[str, str, str, tuple[str, ...]]]], tools: list[str]
) -> None:
    frame = threads(*dumps)
    stuck = stuck_threads(frame)
    groups = group_stuck(stuck, tools)
    assert int(groups["count"].sum()) == len(stuck)
    dumps = [dump for dump in dumps if dump]  # a dump with no thread leaves no row
    if len(dumps) < 2:
        assert stuck.empty
    for name in stuck["thread"]:
        assert all(any(t[0] == name for t in dump) for dump in dumps)
    tied = groups["tool"].notna().to_numpy()
    assert not (tied[1:] > tied[:-1]).any()  # the tied groups come first
