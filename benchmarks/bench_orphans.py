"""Benchmark orphan classification: the vectorised kit against the seed's per-run sweeper.

    .venv/bin/python benchmarks/bench_orphans.py [--runs N] [--seed S]   # synthetic, 100000 runs
    .venv/bin/python benchmarks/bench_orphans.py --pack DIR [--all-runs] # an evidence folder

Synthetic mode (the default) builds canonical frames in memory: two runs per session, the
first a finished invoicing flow (user message, 9 lookups, draft, sendInvoice, billing text,
notification; 26 events), the second killed at a random point (NOT_STARTED, MODEL_INFLIGHT,
TOOL_UNANSWERED, PAUSED on an approval, or ACTUALLY_DONE with the ledger still RUNNING), some
with a null ledger invocation id, some over the attempts cap, with journal entries by
business key, by call id, or none. 100k runs give about 1.97M events and 40k open runs.

``--pack DIR`` loads an evidence folder through ``incidentkit.open_evidence`` (load time and
memory are reported apart), e.g. one made by ``incidentkit simulate crash_recovery --out DIR
--scale N``: about 13 + 29.5 N runs of 5.6 events each (scale 680: 21k runs, 117k events;
scale 3390: 105k runs, 586k events), of which only about 1.4 % are open (RUNNING or
PAUSED); the rest is finished background traffic. ``as_of``, the terminal agents, the key
templates and the attempts cap come from the pack's ``truth.json`` unless given.

Three timings over the same frames:

- ``kit (all)``: ``classify_orphans``, everything: the class of every ledger run, and for
  the non-terminal ones unanswered calls, journal verdicts, actions and reasons, crash
  loops, duplicate effects, status disagreements, live leases, per-owner counts;
- ``kit (classes)``: the kit's classification step alone (``read_log``, ``locate``,
  ``answered``, ``unanswered``, ``classify``) over the baseline's runs: the baseline's work;
- ``baseline``: a straightforward per-run port of the seed's ``classify()`` (one session's
  events per run, looped over as the Java does): class and unanswered call ids only, of
  the open runs (``--all-runs``: of every ledger row, a heavier like-for-like load when
  few runs are open).

Both kit timings are checked against the baseline (same class and unanswered calls for
every run both cover); the like-for-like ratio is baseline / kit (classes). Every phase
loads the whole events frame, so with few open runs fixed costs dominate both sides.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

import incidentkit
from incidentkit import frames
from incidentkit.flows.orphans.classes import answered, classify, locate, read_log, unanswered
from incidentkit.flows.orphans.triage import OrphanReport, classify_orphans
from incidentkit.frames import conform

T0 = pd.Timestamp("2026-11-29T03:00:00Z")
AS_OF = T0 + pd.Timedelta(hours=2)
TERMINAL = "notify_agent"
TEMPLATES = {"sendInvoice": "send-invoice:{invoiceId}", "sendNotification": "notify:{invoiceId}"}
LOOKUPS = 9
FRAMES = ("runs", "events", "calls", "responses", "journal")
T = TypeVar("T")

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
            "long_running_tool_ids": lr_ids,
            "final_response": (kinds == "final") | lr,
            "text": pd.Series("done", index=range(total)).where(kinds == "final"),
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
            "invocation_id": pd.Series(invocation).mask(null_inv),
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
        "events": frames.build("events", events),
        "calls": conform("calls", calls),
        "responses": conform("responses", responses),
        "journal": conform("journal", journal),
    }


@dataclass(frozen=True)
class Params:
    """The judgement's parameters: as_of, terminal agents, key templates, attempts cap."""

    as_of: pd.Timestamp
    terminal: tuple[str, ...]
    templates: dict[str, str]
    attempts_cap: int


SYNTHETIC = Params(AS_OF, (TERMINAL,), TEMPLATES, 3)
OPEN = ("RUNNING", "PAUSED")
"""The statuses the baseline classifies (the kit's non-terminal rows, for these inputs)."""
Classes = dict[str, tuple[str, tuple[Any, ...]]]


def load_pack(folder: Path, args: argparse.Namespace) -> tuple[dict[str, pd.DataFrame], Params]:
    """The frames of an evidence folder and the parameters (options, else ``truth.json``)."""
    evidence = incidentkit.open_evidence(folder)
    frames = {name: evidence.frame(name) for name in FRAMES}
    for section in ("ledger", "events", "journal"):  # only these: .rejects loads every source
        loaded = evidence.source(section)
        if loaded is not None and len(loaded.rejects):
            print(f"  {section}: {len(loaded.rejects):,} rejects while loading")
    truth_path = folder / "truth.json"
    truth = json.loads(truth_path.read_text()) if truth_path.exists() else {}
    expected = truth.get("expected", {})
    as_of = args.as_of or expected.get("as_of")
    terminal = args.terminal_agent or expected.get("terminal_agents")
    if not as_of or not terminal:
        raise SystemExit(f"give --as-of and --terminal-agent: {truth_path} does not say them")
    templates = dict(t.split("=", 1) for t in args.key_template or ())
    params = Params(
        pd.Timestamp(as_of),
        tuple(terminal),
        templates or expected.get("key_templates", {}),
        args.attempts_cap or expected.get("attempts_cap", 3),
    )
    return frames, params


def kit_all(frames: dict[str, pd.DataFrame], params: Params) -> OrphanReport:
    """``classify_orphans``: classes, verdicts, actions and every view."""
    return classify_orphans(
        frames["runs"],
        frames["events"],
        frames["calls"],
        frames["responses"],
        frames["journal"],
        as_of=params.as_of,
        terminal_agent=params.terminal,
        key_templates=params.templates,
        attempts_cap=params.attempts_cap,
    )


def chosen(runs: pd.DataFrame, every: bool) -> pd.DataFrame:
    """The runs both classifiers take: the open ones, or every ledger row."""
    return runs if every else runs[runs["status"].isin(OPEN)]


def kit_classes(frames: dict[str, pd.DataFrame], params: Params, every: bool) -> pd.DataFrame:
    """The kit's classification step alone, over the baseline's runs."""
    runs, calls = frames["runs"], frames["calls"]
    log = read_log(frames["events"])
    located = locate(chosen(runs, every), log).merge(
        log.invocations, on=["sk", "invocation_id"], how="left"
    )
    open_calls = unanswered(located, calls, answered(calls, frames["responses"]))
    return classify(located, open_calls, params.terminal)


def per_run(frames: dict[str, pd.DataFrame], terminal: tuple[str, ...], every: bool) -> Classes:
    """The seed's sweeper, literally: for each open run (or every run), load its session and
    loop."""
    runs, events = chosen(frames["runs"], every), frames["events"]
    sessions = events.groupby("session_id", sort=False)  # the session service's index
    calls = frames["calls"].groupby("session_id", sort=False)
    responses = frames["responses"].groupby("session_id", sort=False)
    out: Classes = {}
    for row in runs.itertuples(index=False):
        out[row.run_id] = classify_one(row, sessions, calls, responses, terminal)
    return out


def classify_one(
    row: Any, sessions: Any, calls: Any, responses: Any, terminal: tuple[str, ...]
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
        return "UNKNOWN", ()  # the seed's mine.get(-1) throws here
    last = mine[-1]
    if len(last.long_running_tool_ids) > 0:
        return "PAUSED", _open(row.session_id, inv, calls, responses)
    if last.final_response and last.author in terminal:
        return "ACTUALLY_DONE", _open(row.session_id, inv, calls, responses)
    unanswered_ = _open(row.session_id, inv, calls, responses)
    return ("TOOL_UNANSWERED" if unanswered_ else "MODEL_INFLIGHT"), unanswered_


def _open(session: str, inv: str, calls: Any, responses: Any) -> tuple[Any, ...]:
    try:
        mine = [
            c for c in calls.get_group(session).itertuples(index=False) if c.invocation_id == inv
        ]
    except KeyError:
        return ()
    try:
        answered_ = {
            r.call_id if isinstance(r.call_id, str) else ""
            for r in responses.get_group(session).itertuples(index=False)
            if r.invocation_id == inv
        }
    except KeyError:
        answered_ = set()
    return tuple(
        c.call_id
        for c in mine
        if (c.call_id if isinstance(c.call_id, str) else "") not in answered_
    )


def as_classes(frame: pd.DataFrame) -> Classes:
    return {
        run_id: (cls, tuple(calls))
        for run_id, cls, calls in zip(
            frame["run_id"], frame["orphan_class"], frame["unanswered_calls"], strict=True
        )
    }


def check(name: str, got: Classes, expected: Classes) -> None:
    """Exit when ``got`` differs from the baseline's classes for any open run."""
    wrong = {k: (got.get(k), v) for k, v in expected.items() if got.get(k) != v}
    extra = set(got) - set(expected)
    if wrong or extra:
        sample = list(wrong.items())[:5]
        raise SystemExit(
            f"MISMATCH ({name}): {len(wrong)} runs differ (e.g. {sample}); extra {len(extra)}"
        )


def timed(fn: Callable[[], T]) -> tuple[T, float, float]:
    """``fn()``, its wall time and the peak RSS while it ran (MB)."""
    gc.collect()
    reset_peak()
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start, rss_mb()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000, help="synthetic ledger rows")
    parser.add_argument("--seed", type=int, default=7, help="random seed (synthetic)")
    parser.add_argument("--pack", type=Path, help="an evidence folder instead of synthetic frames")
    parser.add_argument("--as-of", help="pack: the judgement's now (default: truth.json)")
    parser.add_argument("--terminal-agent", action="append", help="pack: repeatable")
    parser.add_argument("--key-template", action="append", help="pack: TOOL=TEMPLATE, repeatable")
    parser.add_argument("--attempts-cap", type=int, help="pack: default truth.json, else 3")
    parser.add_argument(
        "--all-runs",
        action="store_true",
        help="baseline and kit (classes) classify every ledger row, terminal ones too",
    )
    parser.add_argument(
        "--no-baseline",
        action="store_true",
        help="time the kit only (the per-run sweeper needs about 3 ms an open run)",
    )
    args = parser.parse_args()

    start = time.perf_counter()
    if args.pack:
        frames, params = load_pack(args.pack, args)
        how = f"loaded {args.pack} through open_evidence"
    else:
        frames, params = build(args.runs, args.seed), SYNTHETIC
        how = "built synthetic frames"
    load_s = time.perf_counter() - start
    sizes = ", ".join(f"{name} {len(frame):,}" for name, frame in frames.items())
    gc.collect()
    held = rss_mb("VmRSS")
    n_open = int(frames["runs"]["status"].isin(OPEN).sum())
    print(f"{how} in {load_s:.1f} s (peak RSS {rss_mb():,.0f} MB): {sizes}; {n_open:,} open runs")
    print(f"  RSS holding the frames {held:,.0f} MB")

    report, all_s, all_rss = timed(lambda: kit_all(frames, params))
    print(
        f"kit (all: classes of every run; unanswered calls, journal verdicts, actions and "
        f"views of the non-terminal ones): {all_s:.2f} s; "
        f"peak RSS {all_rss:,.0f} MB (+{all_rss - held:,.0f})"
    )
    print("  orphans by class:", report.class_counts())
    print(
        f"  in flight {len(report.in_flight):,}, unanswered calls {len(report.calls):,}, "
        f"crash loops {len(report.crash_loops):,}, duplicate effects "
        f"{len(report.duplicate_effects):,}, disagreements {len(report.status_disagreements):,}"
    )
    which = "ledger" if args.all_runs else "open"
    step, cls_s, cls_rss = timed(lambda: kit_classes(frames, params, args.all_runs))
    print(
        f"kit (classes: class and unanswered calls of the {len(step):,} {which} runs): "
        f"{cls_s:.2f} s; peak RSS {cls_rss:,.0f} MB (+{cls_rss - held:,.0f})"
    )
    figures = f"runs {len(frames['runs']):,}, events {len(frames['events']):,}, open {n_open:,}"
    figures += f", classified {len(step):,}"
    figures += f"; load {load_s:.1f} s, kit all {all_s:.2f} s, kit classes {cls_s:.2f} s"
    if args.no_baseline:
        print(f"summary: {figures}")
        return

    expected, base_s, base_rss = timed(lambda: per_run(frames, params.terminal, args.all_runs))
    print(
        f"baseline (per-run seed classify(): class and unanswered calls of the "
        f"{len(expected):,} {which} runs): {base_s:.2f} s; peak RSS {base_rss:,.0f} MB"
    )
    open_ids = set(chosen(frames["runs"], False)["run_id"])
    check(
        "kit all",
        as_classes(pd.concat([report.orphans, report.in_flight])),
        {k: v for k, v in expected.items() if k in open_ids},
    )
    check("kit classes", as_classes(step), expected)
    print(f"same classes and unanswered calls for all {len(expected):,} {which} runs")
    print(
        f"summary: {figures}, baseline {base_s:.2f} s; baseline / kit classes "
        f"{base_s / cls_s:.1f}x (like for like), baseline / kit all {base_s / all_s:.1f}x; "
        f"peak RSS {max(all_rss, cls_rss, base_rss):,.0f} MB"
    )


if __name__ == "__main__":
    main()
