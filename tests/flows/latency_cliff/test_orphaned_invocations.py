"""Open invocations whose worker died are orphans, not hangs: told by the ledger (a lease that
ran out, a run re-driven since), else by a session gone silent while the app went on; on small
hand-built frames, then on the bundled hang with its ledger and dumps taken away."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from incidentkit.flows.common import frames_of
from incidentkit.flows.latency_cliff import setup, triage_latency
from incidentkit.flows.latency_cliff.hangs import Orphaned, alive, open_invocations
from incidentkit.frames import build, empty

T0 = pd.Timestamp("2026-11-29T03:00:00Z")
AS_OF = T0 + pd.Timedelta(minutes=10)
FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"


def at(seconds: float) -> pd.Timestamp:
    return T0 + pd.Timedelta(seconds=seconds)


def latency(*rows: tuple[str, str, float]) -> pd.DataFrame:
    """Open invocations: (invocation, session, start in seconds after T0)."""
    return pd.DataFrame(
        {
            "invocation_id": [r[0] for r in rows],
            "run_id": pd.Series([None] * len(rows), dtype="str"),
            "session_id": [r[1] for r in rows],
            "started_at": [at(r[2]) for r in rows],
            "open": True,
            "source": "diagnostics",
        }
    )


def runs(*rows: dict[str, Any]) -> pd.DataFrame:
    return build("runs", [{"app_name": "shop", "attempts": 0} | row for row in rows])


def events(*rows: tuple[str, str, float]) -> pd.DataFrame:
    """Events: (invocation, session, seconds after T0)."""
    return build(
        "events",
        [
            {"event_id": f"ev-{n}", "invocation_id": i, "session_id": s, "ts": at(t), "seq": n}
            for n, (i, s, t) in enumerate(rows)
        ],
    )


def calls(*rows: tuple[str, str, str]) -> pd.DataFrame:
    """Unanswered calls: (invocation, session, tool)."""
    return build(
        "calls",
        [
            {"event_id": f"c-{n}", "invocation_id": i, "session_id": s, "call_id": f"c-{n}"}
            | {"name": tool, "ts": at(1)}
            for n, (i, s, tool) in enumerate(rows)
        ],
    )


def judged(frame: pd.DataFrame, ev: pd.DataFrame, cl: pd.DataFrame, ledger: pd.DataFrame) -> Any:
    got = open_invocations(
        frame, ev, cl, empty("responses"), as_of=AS_OF, older_than_s=60, runs=ledger
    )
    return got.set_index("invocation_id")


def test_the_ledger_tells_a_dead_worker_from_a_live_one() -> None:
    got = judged(
        latency(("e-dead", "s1", 0), ("e-live", "s2", 5), ("e-w2", "s3", 9), ("e-late", "s4", 20)),
        empty("events"),
        empty("calls"),
        runs(
            {"run_id": "r1", "session_id": "s1", "invocation_id": "e-dead", "status": "RUNNING"}
            | {"owner": "w-3", "lease_until": at(60), "started_at": at(0)},
            {"run_id": "r2", "session_id": "s2", "invocation_id": "e-live", "status": "RUNNING"}
            | {"owner": "w-1", "lease_until": at(620), "started_at": at(5)},
            # W2: the ledger never saw the invocation id; its session and start name the run
            {"run_id": "r3", "session_id": "s3", "status": "RUNNING", "owner": "w-3"}
            | {"lease_until": at(69), "started_at": at(8.9)},
            # a run of the session that started well after the invocation is not its run
            {"run_id": "r4", "session_id": "s4", "status": "RUNNING", "owner": "w-3"}
            | {"lease_until": at(100), "started_at": at(60)},
        ),
    )
    assert got.loc["e-dead", ["orphaned", "orphan_reason", "owner", "lease_expired"]].tolist() == [
        True,
        Orphaned.LEASE_EXPIRED,
        "w-3",
        True,
    ]
    assert not got.loc["e-live", "orphaned"] and pd.isna(got.loc["e-live", "orphan_reason"])
    assert got.loc["e-w2", ["run_id", "orphan_reason"]].tolist() == ["r3", Orphaned.LEASE_EXPIRED]
    assert not got.loc["e-late", "orphaned"] and pd.isna(got.loc["e-late", "run_id"])


def test_a_run_claimed_again_left_its_earlier_invocation_orphaned() -> None:
    got = judged(
        latency(("e-first", "s1", 0), ("e-other", "s2", 0)),
        empty("events"),
        empty("calls"),
        runs(
            {"run_id": "r1", "session_id": "s1", "invocation_id": "e-second", "status": "DONE"}
            | {"owner": "w-2", "attempts": 1, "started_at": at(-0.01), "lease_until": at(500)},
            # attempts 0: another invocation of the run, not a re-drive; nothing to conclude
            {"run_id": "r2", "session_id": "s2", "invocation_id": "e-next", "status": "DONE"}
            | {"owner": "w-2", "attempts": 0, "started_at": at(-0.01), "lease_until": at(500)},
        ),
    )
    assert got.loc["e-first", ["orphaned", "orphan_reason", "run_id"]].tolist() == [
        True,
        Orphaned.REDRIVEN,
        "r1",
    ]
    assert pd.isna(got.loc["e-first", "owner"])  # the ledger names the worker that re-drove it
    assert not got.loc["e-other", "orphaned"]


def test_without_a_ledger_a_session_silent_while_others_go_on_is_a_presumed_orphan() -> None:
    frame = latency(("e-1", "s1", 0), ("e-2", "s2", 10), ("e-3", "s3", 20))
    ev = events(
        ("e-1", "s1", 1),  # silent since 1 s
        ("e-2", "s2", 11),
        ("e-2", "s2", 400),  # s2 went on: its invocation is open, but its session is not silent
        ("e-9", "s9", 200),  # another session went on well past e-1's timeout
        ("e-3", "s3", 21),
    )
    got = judged(frame, ev, empty("calls"), empty("runs"))
    assert got.loc["e-1", "orphan_reason"] == Orphaned.SESSION_SILENT
    assert got.loc["e-3", "orphan_reason"] == Orphaned.SESSION_SILENT
    assert not got.loc["e-2", "orphaned"]
    # the evidence ends with the silence: nothing went on, nothing is concluded
    quiet = judged(
        frame, events(("e-1", "s1", 1), ("e-3", "s3", 21)), empty("calls"), empty("runs")
    )
    assert not quiet["orphaned"].any()


def test_a_tool_that_hangs_at_times_apart_is_a_stalled_dependency_not_a_dead_worker() -> None:
    frame = latency(("e-1", "s1", 0), ("e-2", "s2", 200), ("e-3", "s3", 30))
    ev = events(("e-1", "s1", 1), ("e-2", "s2", 201), ("e-3", "s3", 31), ("e-9", "s9", 500))
    cl = calls(("e-1", "s1", "order_lookup"), ("e-2", "s2", "order_lookup"), ("e-3", "s3", "pay"))
    got = judged(frame, ev, cl, empty("runs"))
    assert not got.loc["e-1", "orphaned"] and not got.loc["e-2", "orphaned"]
    assert got.loc["e-3", "orphaned"]  # one call to pay, silent while the app went on
    hung = got.reset_index()
    revived = alive(hung, hung["tool"].eq("pay"))
    assert not revived["orphaned"].any()  # stuck threads tied to its tool: a live JVM's hang


def test_the_bundled_hang_without_ledger_or_dumps_is_still_a_hang() -> None:
    incident, settings = setup(FIXTURES / "latency_cliff", app_name="support")
    frames = frames_of(
        incident, ("runs", "events", "calls", "responses", "spans", "diagnostics", "threads")
    )
    full = triage_latency(frames, as_of=settings.as_of)
    assert full.orphans.empty and len(full.hangs) and len(full.fix)
    # no ledger and no dumps: the hung sessions are silent while others go on, but the runs
    # that ended after the cliff queued behind them: a stalled dependency, not a dead worker
    bare = replace(frames, runs=empty("runs"), threads=empty("threads"))
    got = triage_latency(bare, as_of=settings.as_of)
    assert got.orphans.empty and got.has_cliff
    assert sorted(got.hangs["invocation_id"]) == sorted(full.hangs["invocation_id"])
