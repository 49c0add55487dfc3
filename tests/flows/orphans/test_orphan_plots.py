"""Plots render real PNGs headless, and draw exactly what their frames hold."""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from matplotlib.figure import Figure

from incidentkit.errors import ParameterError
from incidentkit.flows.orphans import plot_orphan_classes, plot_run_timeline
from incidentkit.flows.orphans.triage import classify_orphans
from incidentkit.frames import build, empty

T0 = pd.Timestamp("2026-11-29T03:00:00Z")


def at(seconds: float) -> pd.Timestamp:
    return T0 + pd.Timedelta(seconds=seconds)


def event(session: str, inv: str, seq: int, author: str, **f: Any) -> dict[str, Any]:
    return {
        "event_id": f"{session}-{seq}",
        "app_name": "a",
        "user_id": "u",
        "session_id": session,
        "invocation_id": inv,
        "seq": seq,
        "ts": at(seq + 1),
        "author": author,
        "long_running_tool_ids": (),
        **f,
    }


def part(ev: dict[str, Any], call_id: str, **f: Any) -> dict[str, Any]:
    keys = ("event_id", "session_id", "invocation_id", "seq", "ts", "author")
    return {**{k: ev[k] for k in keys}, "call_id": call_id, "name": "sendInvoice", **f}


def ledger(run_id: str, session: str, inv: str) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "app_name": "a",
        "user_id": "u",
        "session_id": session,
        "invocation_id": inv,
        "request": {},
        "status": "RUNNING",
        "owner": "w1",
        "lease_until": at(60),
        "attempts": 1,
        "started_at": T0,
        "updated_at": T0,
    }


def png(ax: Any, path: Path) -> int:
    ax.figure.savefig(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return path.stat().st_size


def bar_totals(ax: Any) -> dict[str, float]:
    """Sum of bar widths per y tick label."""
    labels = [t.get_text() for t in ax.get_yticklabels()]
    totals: dict[str, float] = defaultdict(float)
    for patch in ax.patches:
        row = round(patch.get_y() + patch.get_height() / 2)
        totals[labels[row]] += patch.get_width()
    return dict(totals)


def test_orphan_classes_bars_equal_the_counts(tmp_path: Path) -> None:
    sessions = ["s1", "s2", "s3", "s4"]
    events = [event(s, f"i{n}", 0, "user") for n, s in enumerate(sessions)]
    events.append(event("s4", "i3", 1, "notify_agent", final_response=True))
    runs = [ledger(f"r{n}", s, f"i{n}") for n, s in enumerate(sessions)]
    runs.append(ledger("r9", "gone", "i9"))
    report = classify_orphans(
        build("runs", runs),
        build("events", events),
        empty("calls"),
        empty("responses"),
        empty("journal"),
        as_of=at(600),
        terminal_agent="notify_agent",
    )
    ax = plot_orphan_classes(report.orphans)
    assert bar_totals(ax) == {"MODEL_INFLIGHT": 3.0, "ACTUALLY_DONE": 1.0, "NOT_STARTED": 1.0}
    assert {t.get_text() for t in ax.get_legend().get_texts()} == {"REDRIVE", "MARK_DONE"}
    assert png(ax, tmp_path / "classes.png") > 10_000


def test_orphan_classes_on_given_axes_and_empty(tmp_path: Path) -> None:
    ax = Figure().add_subplot()
    empty_orphans = pd.DataFrame(
        {"orphan_class": pd.Series([], dtype="str"), "action_kind": pd.Series([], dtype="str")}
    )
    assert plot_orphan_classes(empty_orphans, ax=ax) is ax
    assert len(ax.patches) == 0
    assert "no orphans" in [t.get_text() for t in ax.texts]
    assert png(ax, tmp_path / "empty.png") > 5_000


def timeline_frames() -> dict[str, pd.DataFrame]:
    user = event("s1", "i1", 0, "user")
    call = event("s1", "i1", 1, "billing_agent")
    response = event("s1", "i1", 2, "billing_agent")
    call2 = event("s1", "i1", 3, "billing_agent")
    other = event("s1", "i0", 4, "user")  # another invocation of the session: not drawn
    spans = [
        {
            "trace_id": "t" * 32,
            "span_id": "a" * 16,
            "name": "invocation",
            "kind": "invocation",
            "start": at(0.5),
            "end": at(3.5),
            "status": "OK",
            "invocation_id": "i1",
        },
        {
            "trace_id": "t" * 32,
            "span_id": "b" * 16,
            "name": "execute_tool sendInvoice",
            "kind": "execute_tool",
            "start": at(4),
            "end": None,
            "status": "UNSET",
            "invocation_id": "i1",
        },
        {
            "trace_id": "t" * 32,
            "span_id": "c" * 16,
            "name": "invocation",
            "kind": "invocation",
            "start": at(5),
            "end": at(6),
            "status": "OK",
            "invocation_id": "i0",
        },
    ]
    journal = [
        {
            "key": "send-invoice:1",
            "invocation_id": "i1",
            "function_call_id": "c1",
            "status": "DONE",
            "created_at": at(2.1),
            "updated_at": at(2.2),
        },
        {
            "key": "send-invoice:2",
            "invocation_id": None,
            "function_call_id": "c2",
            "status": "INTENT",
            "created_at": at(4.1),
            "updated_at": at(4.1),
        },
        {
            "key": "send-invoice:3",
            "invocation_id": "i0",
            "function_call_id": "c9",
            "status": "DONE",
            "created_at": at(5),
            "updated_at": at(5),
        },
    ]
    return {
        "runs": build("runs", [ledger("r1", "s1", "i1")]),
        "events": build("events", [user, call, response, call2, other]),
        "calls": build("calls", [part(call, "c1"), part(call2, "c2")]),
        "responses": build("responses", [part(response, "c1")]),
        "journal": build("journal", journal),
        "spans": build("spans", spans),
    }


def test_run_timeline_draws_the_runs_lanes(tmp_path: Path) -> None:
    f = timeline_frames()
    ax = plot_run_timeline(
        "r1",
        f["runs"],
        f["events"],
        f["journal"],
        f["spans"],
        calls=f["calls"],
        responses=f["responses"],
    )
    points = {c.get_label(): len(c.get_offsets()) for c in ax.collections}
    assert points == {
        "acquired": 1,  # never renewed: no separate renewal mark
        "event: user": 1,
        "event: call": 2,
        "event: response": 1,
        "journal INTENT": 2,
        "journal DONE": 1,
    }
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == [
        "ledger lease\nRUNNING · w1 · attempts 1",
        "events",
        "journal",
        "invocation",
        "execute_tool sendInvoice",
    ]
    # The x axis is the UTC clock (days since 1970), zoomed to the run's 0-4.1 s of evidence:
    # the lease's expiry at 60 s is named at the edge, not drawn 15 times wider than the run.
    left, right = (_utc_seconds(x) for x in ax.get_xlim())
    assert -1.5 < left < 0 and 4.1 < right < 6  # 1 s beyond the last journal entry
    assert any("lease expires 03:01:00" in t.get_text() for t in ax.texts)
    totals = {k: v * 86_400 for k, v in bar_totals(ax).items()}
    assert totals["invocation"] == pytest.approx(3.0, abs=1e-3)
    assert totals[labels[0]] == pytest.approx(right, abs=1e-3)  # held from acquiry to the edge
    assert totals["execute_tool sendInvoice"] == pytest.approx(right - 4.0, abs=1e-3)
    assert [p.get_hatch() for p in ax.patches] == [None, None, "//"]
    clock = ax.xaxis.get_major_formatter()
    assert clock(T0.timestamp() / 86_400 + 1.5 / 86_400, 0) == "03:00:01.500"  # UTC, with ms
    assert png(ax, tmp_path / "timeline.png") > 20_000


def test_markers_at_the_same_moment_are_kept_apart() -> None:
    f = timeline_frames()
    events = f["events"].copy()
    events["ts"] = T0 + pd.Timedelta(seconds=1)  # every event of the run at one instant
    ax = plot_run_timeline(
        "r1", f["runs"], events, f["journal"], f["spans"], calls=f["calls"],
        responses=f["responses"],
    )  # fmt: skip
    lanes = [
        tuple(y for _, y in c.get_offsets()) for c in ax.collections if "event" in c.get_label()
    ]
    ys = [y for lane in lanes for y in lane]
    assert len(ys) == 4 and len(set(ys)) == 4  # four events, four heights in the lane
    assert all(0.5 < y < 1.5 for y in ys)


def _utc_seconds(x: float) -> float:
    """An x position as seconds after T0."""
    return x * 86_400 - T0.timestamp()


def test_run_timeline_without_calls_and_for_an_unknown_run() -> None:
    f = timeline_frames()
    ax = plot_run_timeline("r1", f["runs"], f["events"], f["journal"], f["spans"])
    points = {c.get_label(): len(c.get_offsets()) for c in ax.collections}
    assert points["event: text"] == 3  # calls and responses cannot be told apart
    assert points["journal INTENT"] == 1  # only the entry naming the invocation
    with pytest.raises(ParameterError, match="run not in the ledger: 'r404'"):
        plot_run_timeline("r404", f["runs"], f["events"], f["journal"], f["spans"])


def test_plots_never_load_pyplot() -> None:
    code = (
        "import sys, pandas as pd\n"
        "from incidentkit.flows.orphans.plots import plot_orphan_classes\n"
        "ax = plot_orphan_classes(pd.DataFrame({'orphan_class': ['PAUSED'],"
        " 'action_kind': ['WAIT']}))\n"
        "ax.figure.savefig(sys.argv[1])\n"
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot was imported'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "/dev/null"],
        capture_output=True,
        text=True,
        env={"MPLBACKEND": "TkAgg", "PATH": ""},
        check=False,
    )
    assert done.returncode == 0, done.stderr
