"""Benchmark orphan classification: the vectorised pass against the seed's per-run sweeper.

    .venv/bin/python benchmarks/bench_orphans.py [--runs N] [--seed S]   # default 100000 runs

Builds synthetic canonical frames in memory: two runs per session, the first a finished
invoicing flow (user message, 9 lookups, draft, sendInvoice, billing text, notification; 26
events), the second killed at a random point (NOT_STARTED, MODEL_INFLIGHT, TOOL_UNANSWERED,
PAUSED on an approval, or ACTUALLY_DONE with the ledger still RUNNING), some with a null
ledger invocation id, some over the attempts cap, with journal entries by business key, by
call id, or none. 100k runs give about 1.95M events.

Times ``classify_orphans`` (everything: classes, journal verdicts, actions, crash loops,
duplicates, disagreements) and a straightforward per-run implementation of the seed's
classify() (one session's events per run, looped over as the Java does; classes only),
checks both give the same class and unanswered calls for every non-terminal run, and prints
the ratio and peak RSS.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from incidentkit.frames import conform
from incidentkit.triage.orphans import classify_orphans

T0 = pd.Timestamp("2026-11-29T03:00:00Z")
AS_OF = T0 + pd.Timedelta(hours=2)
TERMINAL = "notify_agent"
TEMPLATES = {"sendInvoice": "send-invoice:{invoiceId}", "sendNotification": "notify:{invoiceId}"}
LOOKUPS = 9

# The finished flow, one event per row: (kind, author, tool).
FLOW: list[tuple[str, str, str | None]] = [("user", "user", None)]
for _ in range(LOOKUPS):
    FLOW += [("call", "draft_agent", "lookup"), ("response", "draft_agent", "lookup")]
FLOW += [
    ("final", "draft_agent", None),
    ("call", "billing_agent", "sendInvoice"),
    ("response", "billing_agent", "sendInvoice"),
    ("final", "billing_agent", None),
    ("call", "notify_agent", "sendNotification"),
    ("response", "notify_agent", "sendNotification"),
    ("final", "notify_agent", None),
]
SEND = FLOW.index(("call", "billing_agent", "sendInvoice"))


def rss_mb(field: str = "VmHWM") -> float:
    """Peak (VmHWM) or current (VmRSS) resident memory in MB; ru_maxrss off Linux."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_peak() -> None:
    """Start a new peak-RSS measurement (Linux: writing 5 to clear_refs resets VmHWM)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def build(n_runs: int, seed: int) -> dict[str, pd.DataFrame]:
    """Canonical runs, events, calls, responses and journal frames for ``n_runs`` runs."""
    rng = np.random.default_rng(seed)
    flow_len = len(FLOW)
    run = np.arange(n_runs)
    second = run % 2 == 1
    cut = np.where(second, rng.integers(0, flow_len + 1, n_runs), flow_len)
    paused = second & (rng.random(n_runs) < 0.05)
    cut = np.where(paused, SEND + 1, cut)
    counts = cut
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    total = int(counts.sum())
    ev_run = np.repeat(run, counts)
    pos = np.arange(total) - np.repeat(starts, counts)
    kinds = np.array([k for k, _, _ in FLOW], dtype=object)[pos]
    authors = np.array([a for _, a, _ in FLOW], dtype=object)[pos]
    tools = np.array([t for _, _, t in FLOW], dtype=object)[pos]
    lr = np.repeat(paused, counts) & (pos == SEND)
    tools[lr] = "approveInvoice"
    seq = pos + np.where(ev_run % 2 == 1, flow_len, 0)
    session = np.array([f"s{r // 2}" for r in range(n_runs)], dtype=object)
    invocation = np.array([f"i{r}" for r in range(n_runs)], dtype=object)
    base = T0 + pd.to_timedelta(run // 2 * 60, unit="s")
    ts = pd.DatetimeIndex(base[ev_run]) + pd.to_timedelta(seq, unit="s")
    event_id = np.array([f"e{k}" for k in range(total)], dtype=object)
    lr_ids = np.empty(total, dtype=object)
    for k in range(total):
        lr_ids[k] = (f"c{k}",) if lr[k] else ()
    events = pd.DataFrame(
        {
            "event_id": event_id,
            "app_name": "billing",
            "user_id": "u1",
            "session_id": session[ev_run],
            "invocation_id": invocation[ev_run],
            "seq": seq,
            "ts": ts,
            "author": authors,
            "branch": None,
            "partial": False,
            "turn_complete": False,
            "interrupted": False,
            "error_code": None,
            "error_message": None,
            "transfer_to_agent": None,
            "escalate": False,
            "long_running_tool_ids": lr_ids,
            "final_response": (kinds == "final") | lr,
            "text": np.where(kinds == "final", "done", None),
            "source_format": "java-json",
        }
    )

    def parts(kind: str) -> pd.DataFrame:
        where = np.flatnonzero(kinds == kind)
        r = ev_run[where]
        args = [
            {"q": int(p)} if t == "lookup" else {"invoiceId": f"INV-{rr}"}
            for p, t, rr in zip(pos[where], tools[where], r, strict=True)
        ]
        # a response answers the call just before it
        call_k = where if kind == "call" else where - 1
        return pd.DataFrame(
            {
                "event_id": event_id[where],
                "session_id": session[r],
                "invocation_id": invocation[r],
                "seq": seq[where],
                "ts": ts[where],
                "author": authors[where],
                "call_id": [f"c{k}" for k in call_k],
                "name": tools[where],
                "args": args,
                "args_key": "{}",
                "long_running": lr[where],
                "response": [{"ok": True}] * len(where),
            }
        )

    calls = parts("call")
    responses = parts("response")

    # Journal: every answered send is DONE by business key; an unanswered one is W3 (none),
    # W4 (INTENT), DONE (crash before the response) or the call-id-keyed trap.
    sends = calls[calls["name"] == "sendInvoice"]
    answered = (
        sends["call_id"]
        .isin(responses.loc[responses["name"] == "sendInvoice", "call_id"])
        .to_numpy()
    )
    fate = np.where(answered, 2, rng.integers(0, 4, len(sends)))
    keep = fate > 0
    keyed_by_call = fate == 3
    invoice = sends["args"].map(lambda a: f"send-invoice:{a['invoiceId']}").to_numpy()
    journal = pd.DataFrame(
        {
            "key": np.where(keyed_by_call, sends["call_id"].to_numpy(), invoice)[keep],
            "invocation_id": sends["invocation_id"].to_numpy()[keep],
            "function_call_id": sends["call_id"].to_numpy()[keep],
            "status": np.where(fate == 2, "DONE", "INTENT")[keep],
            "result": None,
            "created_at": sends["ts"].to_numpy()[keep],
            "updated_at": sends["ts"].to_numpy()[keep],
        }
    )

    first_ts = pd.DatetimeIndex(base) + pd.to_timedelta(np.where(second, flow_len, 0), unit="s")
    status = np.where(
        second,
        rng.choice(["RUNNING", "RUNNING", "RUNNING", "PAUSED", "DONE"], n_runs),
        "DONE",
    )
    status = np.where(paused & (run % 4 == 1), "PAUSED", np.where(paused, "RUNNING", status))
    live = second & (rng.random(n_runs) < 0.15)
    lease = np.where(live, AS_OF + pd.Timedelta(seconds=45), AS_OF - pd.Timedelta(minutes=5))
    null_inv = second & ((cut <= 1) | (rng.random(n_runs) < 0.1))
    runs = pd.DataFrame(
        {
            "run_id": [f"r{r:07d}" for r in range(n_runs)],
            "app_name": "billing",
            "user_id": "u1",
            "session_id": session,
            "invocation_id": np.where(null_inv, None, invocation),
            "request": [{"text": f"invoice INV-{r}"} for r in range(n_runs)],
            "status": status,
            "owner": [f"worker-{r % 7}" for r in range(n_runs)],
            "lease_until": pd.DatetimeIndex(lease),
            "attempts": rng.integers(0, 5, n_runs),
            "started_at": first_ts - pd.Timedelta(milliseconds=500),
            "updated_at": first_ts,
        }
    )
    return {
        "runs": conform("runs", runs),
        "events": conform("events", events),
        "calls": conform("calls", calls),
        "responses": conform("responses", responses),
        "journal": conform("journal", journal),
    }


def per_run(frames: dict[str, pd.DataFrame]) -> dict[str, tuple[str, tuple[Any, ...]]]:
    """The seed's sweeper, literally: for each non-terminal run, load its session and loop."""
    runs, events = frames["runs"], frames["events"]
    sessions = events.groupby("session_id", sort=False)  # the session service's index
    calls = frames["calls"].groupby("session_id", sort=False)
    responses = frames["responses"].groupby("session_id", sort=False)
    out: dict[str, tuple[str, tuple[Any, ...]]] = {}
    for row in runs.itertuples(index=False):
        if row.status not in ("RUNNING", "PAUSED"):
            continue
        out[row.run_id] = classify_one(row, sessions, calls, responses)
    return out


def classify_one(
    row: Any, sessions: Any, calls: Any, responses: Any
) -> tuple[str, tuple[Any, ...]]:
    try:
        s = sessions.get_group(row.session_id)
    except KeyError:
        return "NOT_STARTED", ()
    stored = list(s.itertuples(index=False))
    inv = row.invocation_id
    if pd.isna(inv):
        inv = next(
            (e.invocation_id for e in stored if e.author == "user" and e.ts >= row.started_at),
            None,
        )
    if inv is None:
        return "NOT_STARTED", ()
    mine = [e for e in stored if e.invocation_id == inv]
    if not mine:
        return "UNKNOWN", ()
    last = mine[-1]
    if len(last.long_running_tool_ids) > 0:
        return "PAUSED", _open(row.session_id, inv, calls, responses)
    if last.final_response and last.author == TERMINAL:
        return "ACTUALLY_DONE", _open(row.session_id, inv, calls, responses)
    unanswered = _open(row.session_id, inv, calls, responses)
    return ("TOOL_UNANSWERED" if unanswered else "MODEL_INFLIGHT"), unanswered


def _open(session: str, inv: str, calls: Any, responses: Any) -> tuple[Any, ...]:
    try:
        answered = {
            r.call_id if isinstance(r.call_id, str) else ""
            for r in responses.get_group(session).itertuples(index=False)
            if r.invocation_id == inv
        }
        mine = [
            c for c in calls.get_group(session).itertuples(index=False) if c.invocation_id == inv
        ]
    except KeyError:
        return ()
    return tuple(
        c.call_id for c in mine if (c.call_id if isinstance(c.call_id, str) else "") not in answered
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000, help="ledger rows (default 100000)")
    parser.add_argument("--seed", type=int, default=7, help="random seed")
    parser.add_argument(
        "--no-baseline",
        action="store_true",
        help="time classify_orphans only (the per-run sweeper needs about 3 ms a run)",
    )
    args = parser.parse_args()

    start = time.perf_counter()
    frames = build(args.runs, args.seed)
    built = time.perf_counter() - start
    sizes = ", ".join(f"{name} {len(frame):,}" for name, frame in frames.items())
    gc.collect()
    held = rss_mb("VmRSS")
    print(f"built in {built:.1f} s: {sizes}; RSS holding the frames {held:,.0f} MB")

    reset_peak()
    start = time.perf_counter()
    report = classify_orphans(
        frames["runs"],
        frames["events"],
        frames["calls"],
        frames["responses"],
        frames["journal"],
        as_of=AS_OF,
        terminal_agent=TERMINAL,
        key_templates=TEMPLATES,
    )
    fast = time.perf_counter() - start
    print(f"classify_orphans: {fast:.2f} s; peak RSS {rss_mb():,.0f} MB (+{rss_mb() - held:,.0f})")
    print("  orphans by class:", report.class_counts())
    print(
        f"  in flight {len(report.in_flight):,}, unanswered calls {len(report.calls):,}, "
        f"crash loops {len(report.crash_loops):,}, duplicate effects "
        f"{len(report.duplicate_effects):,}, disagreements {len(report.status_disagreements):,}"
    )

    if args.no_baseline:
        return
    gc.collect()
    reset_peak()
    start = time.perf_counter()
    expected = per_run(frames)
    slow = time.perf_counter() - start
    print(f"per-run sweeper (classes only): {slow:.2f} s; peak RSS {rss_mb():,.0f} MB")

    both = pd.concat([report.orphans, report.in_flight])
    got = {
        run_id: (cls, tuple(calls))
        for run_id, cls, calls in zip(
            both["run_id"], both["orphan_class"], both["unanswered_calls"], strict=True
        )
    }
    wrong = {k: (got.get(k), v) for k, v in expected.items() if got.get(k) != v}
    extra = set(got) - set(expected)
    if wrong or extra:
        sample = list(wrong.items())[:5]
        raise SystemExit(f"MISMATCH: {len(wrong)} runs differ (e.g. {sample}); extra {len(extra)}")
    print(f"same classes and unanswered calls for all {len(expected):,} non-terminal runs")
    print(f"speed-up: {slow / fast:.1f}x")


if __name__ == "__main__":
    main()
