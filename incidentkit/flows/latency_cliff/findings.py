"""The latency cliff flow's findings: the cliff, the open invocations, the stuck threads, the fix.

Item ids and row fields are a contract (``docs/findings.md``); scripts read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Unpack

import pandas as pd

from incidentkit.findings import ROW_LIMIT, Finding, Findings, FindingsContext, Severity, rows_of
from incidentkit.flows._resume import resumed_item, run_twice_item
from incidentkit.flows.latency_cliff.fixes import fix_text
from incidentkit.flows.latency_cliff.hangs import Orphaned, by_last_event
from incidentkit.flows.latency_cliff.latency import SOURCE_LABELS
from incidentkit.flows.latency_cliff.thread_findings import (
    lock_owner_items,
    seconds,
    spinning_item,
    stuck_items,
)
from incidentkit.flows.latency_cliff.triage import LatencyReport

FLOW = "latency_cliff"
CLIFF_ROW = [
    *("at", "p50_before_ms", "p95_before_ms", "p50_after_ms", "p95_after_ms"),
    *("runs_before", "runs_after", "errors_before", "errors_after", "source"),
    "error_rate_changed",
]
OPEN_ROW = [
    *("invocation_id", "run_id", "session_id", "started_at", "open_for_s"),
    *("last_event_kind", "tool", "call_id", "lease_expired", "orphaned", "orphan_reason", "owner"),
]
BY_LAST_EVENT_ROW = ["last_event_kind", "tool", "count", "invocation_ids"]
CONTENTION_ROW = [
    *("class", "kind", "threads", "count", "blocked_ms", "max_ms", "owners", "app_frame"),
    *("first", "last"),
]


def clock(at: pd.Timestamp) -> str:
    """A UTC time as ``03:10 UTC`` (with the date when it is not midnight-aligned)."""
    return pd.Timestamp(at).strftime("%Y-%m-%d %H:%M UTC")


def _cliff(report: LatencyReport) -> Finding | None:
    if not report.has_cliff:
        return None
    row = report.cliff.iloc[0]
    errors = f"errors {row['errors_before']} before, {row['errors_after']} after"
    failed = (
        "the error rate changed too"
        if row["error_rate_changed"]
        else "nothing failed, things waited"
    )
    queued = (
        " The runs that ended got slower too: healthy requests queued behind the stuck ones "
        "(a tool blocking threads of a bounded pool)."
        if report.queued
        else ""
    )
    return Finding(
        f"{FLOW}/cliff",
        Severity.CRITICAL,
        f"latency cliff at {clock(row['at'])}: p95 {seconds(row['p95_before_ms'])} -> "
        f"{seconds(row['p95_after_ms'])}, p50 {seconds(row['p50_before_ms'])} -> "
        f"{seconds(row['p50_after_ms'])}; {errors}: {failed}",
        f"A change point in per-invocation latency ({SOURCE_LABELS[str(row['source'])]}, "
        f"open invocations at their age): {row['runs_before']} runs before, "
        f"{row['runs_after']} since.{queued}"
        + (f" {report.baseline_text}" if report.baseline is not None else ""),
        "Find what the open invocations wait on and which threads are stuck (below).",
        rows_of(report.cliff, CLIFF_ROW),
    )


def _open(report: LatencyReport, limit: int | None, parameters: Mapping[str, Any]) -> list[Finding]:
    hung = report.open
    if hung.empty:
        return []
    groups = report.by_last_event
    hangs, dead = report.hangs, report.orphans
    top = by_last_event(hangs).iloc[0] if len(hangs) else groups.iloc[0]
    on = (
        f"on an unanswered call to {top['tool']}"
        if top["last_event_kind"] == "unanswered_function_call"
        else f"with last event shape {top['last_event_kind']}"
    )
    share = (
        f" ({report.open_share:.1%} of the {report.run_starts_since_cliff} run.starts since the "
        "cliff)"
        if report.has_cliff
        else ""
    )
    past = f"{len(hung)} invocation(s) open past the {report.client_timeout_s:g} s client timeout"
    if dead.empty:
        most = "all" if top["count"] == len(hung) else f"{top['count']}"
        title, severity = f"{past}{share}; {most} {on}", Severity.CRITICAL
    elif hangs.empty:
        title = (
            f"{past}; the worker died: all {len(dead)} are orphans ({_why_dead(dead)}), not hangs"
        )
        severity = Severity.WARNING
    else:
        title = (
            f"{past}{share}: {len(hangs)} hang, {top['count']} {on}; {len(dead)} are orphans of "
            f"a dead worker ({_why_dead(dead)})"
        )
        severity = Severity.CRITICAL
    detail = (
        "A run.start with no run.end (else a RUNNING ledger row, else no final event) older "
        "than the client timeout: the user gave up."
    )
    if len(hangs):
        detail += f" {len(hangs)} hang: each still holds its thread."
    if len(dead):
        detail += (
            f" {len(dead)} belong to a worker that died: {_dead_detail(dead)} Nothing of theirs "
            "holds a thread any more, so no timeout fixes them; they are orphans for the "
            "orphans flow (the rows' orphaned, orphan_reason, owner)."
        )
    return [
        Finding(
            f"{FLOW}/open-invocations",
            severity,
            title,
            detail,
            _open_action(report, parameters),
            rows_of(hung, OPEN_ROW, limit=limit),
            len(hung),
        ),
        Finding(
            f"{FLOW}/open-by-last-event",
            Severity.INFO,
            f"{len(groups)} last-event shape(s) among the open invocations",
            "unanswered_function_call: a tool never returned; model_call_in_flight: the last "
            "event is the user's message or a function response; no_events: none stored.",
            "None: the open invocations above carry the action.",
            rows_of(groups, BY_LAST_EVENT_ROW, limit=limit),
            len(groups),
        ),
    ]


def _why_dead(dead: pd.DataFrame) -> str:
    """The orphans' reasons in a few words: ``9 leases expired, 3 runs re-driven since``."""
    counts = dead["orphan_reason"].value_counts()
    words = {
        Orphaned.LEASE_EXPIRED.value: "ledger lease(s) expired",
        Orphaned.REDRIVEN.value: "run(s) re-driven since",
        Orphaned.SESSION_SILENT.value: "session(s) silent while the app went on, no ledger",
    }
    return ", ".join(f"{n} {words.get(str(reason), str(reason))}" for reason, n in counts.items())


def _dead_detail(dead: pd.DataFrame) -> str:
    owners = sorted(set(dead["owner"].dropna().astype(str)))
    parts = []
    reason = dead["orphan_reason"]
    if reason.eq(Orphaned.LEASE_EXPIRED).any():
        by = f" held by {', '.join(owners)}" if owners else ""
        parts.append(
            "their ledger runs are RUNNING with a lease" + by + " that expired before as_of "
            "(a live worker renews it)"
        )
    if reason.eq(Orphaned.REDRIVEN).any():
        parts.append(
            "their runs were claimed again and run another invocation since (a sweeper claims "
            "a run only once its lease ran out)"
        )
    if reason.eq(Orphaned.SESSION_SILENT).any():
        parts.append(
            "with no ledger, their sessions showed no event for longer than the client timeout "
            "while other sessions of the app went on (presumed: a ledger row whose lease "
            "expired would prove it)"
        )
    return "; ".join(parts) + "."


def _open_action(report: LatencyReport, parameters: Mapping[str, Any]) -> str:
    """What to do: the fix for the hangs (or how to find it), the orphans flow for the rest."""
    app = parameters.get("app_name")
    orphans_flow = "incidentkit run orphans --evidence EVIDENCE --out out/orphans" + (
        f" -p app_name {app}" if isinstance(app, str) and app else ""
    )
    steps = []
    if len(report.hangs):
        if len(report.fix):
            steps.append(
                "Apply the fix below; then dispose each abandoned invocation (or restart the "
                "worker)."
            )
        else:
            steps.append(
                "Find what the hung invocations wait on: take two thread dumps ten seconds "
                "apart (jcmd <pid> Thread.print -l) while they hang, then dispose each "
                "abandoned invocation (or restart the worker)."
            )
    if len(report.orphans):
        runs = report.orphans["run_id"].dropna().nunique()
        what = f"the {runs} ledger run(s) they belong to" if runs else "their runs"
        steps.append(
            f"The worker died: no timeout fix applies to its {len(report.orphans)} "
            f"invocation(s). Recover {what} with the orphans flow ({orphans_flow}), which "
            "says which to re-drive, park or mark done, and find why the worker stopped (its "
            "exit code, an out-of-memory kill, a deploy)."
        )
    return " ".join(steps)


def _contention(report: LatencyReport, limit: int | None) -> Finding | None:
    locks = report.contention
    if locks.empty:
        return None
    top = locks.iloc[0]
    threads = ", ".join(top["threads"])
    return Finding(
        f"{FLOW}/lock-contention",
        Severity.WARNING,
        f"{len(locks)} contended lock(s); {top['class']} ({top['kind']}) blocked "
        f"{top['count']} time(s), {seconds(top['blocked_ms'])} in total, of {threads}",
        "From the JFR recording: threads blocked entering a synchronized monitor "
        "(jdk.JavaMonitorEnter) or parked acquiring a java.util.concurrent lock "
        "(jdk.ThreadPark), each longer than the recording's threshold (20 ms by default); "
        "owners are the threads that held a monitor before.",
        "Shorten what runs while the lock is held (no I/O or sleep inside it), or split the "
        "lock; the app_frame is where the threads wait.",
        rows_of(locks, CONTENTION_ROW, limit=limit),
        len(locks),
    )


def _fix(report: LatencyReport) -> Finding | None:
    fix = report.fix
    if fix.empty:
        return None
    first = fix.iloc[0]
    via = f" and its client {first['client']}" if pd.notna(first["client"]) else ""
    return Finding(
        f"{FLOW}/fix",
        Severity.CRITICAL,
        f"the fix: {len(fix)} changes to {first['tool']}{via}, in this order",
        "A tool that makes a blocking call with no read timeout to a slowed dependency holds "
        "its thread; in a bounded pool every other invocation queues behind it.",
        fix_text(fix),
        rows_of(fix, None),
    )


def _no_source(report: LatencyReport) -> Finding | None:
    if report.source is not None:
        return None
    return Finding(
        f"{FLOW}/no-latency-source",
        Severity.WARNING,
        "no source times an invocation of this app",
        " ".join(report.notes),
        "Add the diagnostics log (run.start/run.end), the spans, the ledger or the event "
        "log to the manifest, and check its window and app_name.",
    )


def _disagreements(report: LatencyReport, limit: int | None) -> Finding | None:
    disagree = report.disagreements
    if disagree.empty:
        return None
    return Finding(
        f"{FLOW}/source-disagreements",
        Severity.WARNING,
        f"{len(disagree)} invocation(s) timed differently by two sources",
        "One source has the invocation open and the other ended, or their latencies "
        "differ by more than 2 s and 20 %: a lost ledger update, a clock skew, or an "
        "invocation the plugin did not see end.",
        "Check each row's sources before trusting the latency above.",
        rows_of(disagree, None, limit=limit),
        len(disagree),
    )


def latency_findings(report: LatencyReport, **context: Unpack[FindingsContext]) -> Findings:
    """The findings of the latency cliff flow, from :func:`.triage.triage_latency`, with
    ``context`` (:class:`~incidentkit.findings.FindingsContext`).

    Verdict: INCOMPLETE_EVIDENCE when ``rejects`` (unread rows of the flow's sources) is not
    empty or no source times an invocation; else ACTION_NEEDED when any finding needs action
    (a cliff, an invocation open past the client timeout, stuck or spinning threads, a lock
    owner, a disagreement, lock contention, a call run again after a crash that the journal
    shows ran twice or cannot tell); else CLEAN.
    """
    limit = context.get("row_limit", ROW_LIMIT)
    items = (
        _no_source(report),
        _cliff(report),
        *_open(report, limit, context.get("parameters") or {}),
        *lock_owner_items(report, limit),
        *stuck_items(report, limit),
        spinning_item(report, limit),
        _fix(report),
        _contention(report, limit),
        _disagreements(report, limit),
        resumed_item(FLOW, report.resumed, limit),
        run_twice_item(FLOW, report.calls_run_twice, limit),
    )
    series = report.series
    summary = {
        "runs": len(series),
        "open_invocations": len(report.open),
        "orphaned_invocations": len(report.orphans),
        "run_starts_since_cliff": report.run_starts_since_cliff,
        "stuck_threads": int(report.stalls["count"].sum()),
        "errors": int(series["error"].sum()),
        "idle_threads": int(report.idle_threads["count"].sum()),
        "spinning_threads": int(report.spinning["count"].sum()),
        "lock_owners": int(report.lock_owners["owner"].notna().sum()),
        "dumps": report.dumps,
        "jfr_recordings": report.recordings,
        "contended_locks": len(report.contention),
        "source_disagreements": len(report.disagreements),
        "resumed_invocations": len(report.resumed),
        "calls_run_twice": len(report.calls_run_twice),
    }
    return Findings.build(
        FLOW, items, summary, incomplete=report.source is None, as_of=report.as_of, **context
    )
