"""The latency cliff flow's findings about threads: the lock owners, the stuck groups, the
threads idle by design and the spinning ones.

Item ids and row fields are a contract (``docs/findings.md``); scripts read them.
"""

from __future__ import annotations

import pandas as pd

from incidentkit.findings import Finding, Severity, rows_of
from incidentkit.flows.latency_cliff.spinning import share_text
from incidentkit.flows.latency_cliff.triage import LatencyReport

FLOW = "latency_cliff"
STUCK_ROW = [
    *("top_frame", "app_frame", "state", "threads", "count", "tool", "pool", "client"),
    *("evidence", "blocking", "waits_for", "lock_class", "lock_frame"),
]
SPIN_ROW = [
    *("top_frame", "app_frame", "state", "threads", "count", "pool", "cpu_ms", "over_s"),
    *("cpu_share", "jfr_samples", "tool"),
]
OWNER_ROW = [
    *("owner", "owner_state", "activity", "owner_top_frame", "owner_app_frame", "lock_frame"),
    "client",
    *("lock", "lock_class", "lock_wait", "waiters", "count", "pool", "waiter_frame", "tool"),
    *("chain", "deadlock", "unchanged", "dumps", "jfr_enters", "jfr_blocked_ms"),
]
IDLE_ROW = ["top_frame", "app_frame", "state", "threads", "count", "pool", "idle_reason"]


def seconds(ms: float) -> str:
    """Milliseconds as people read them: ``4.5 s``, ``59 s``, ``850 ms``."""
    if pd.isna(ms):
        return "n/a"
    if ms < 1000:
        return f"{ms:.0f} ms"
    return f"{ms / 1000:.1f} s" if ms < 10_000 else f"{ms / 1000:.0f} s"


def stuck_items(report: LatencyReport, limit: int | None) -> list[Finding]:
    """The stuck groups that may be the stall, and the ones idle by design."""
    items = []
    stalls, idle = report.stalls, report.idle_threads
    if len(stalls):
        top = stalls.iloc[0]
        where = top["app_frame"] if pd.notna(top["app_frame"]) else top["top_frame"]
        tied = f", the tool {top['tool']}" if pd.notna(top["tool"]) else ""
        holding = (
            f", holding the lock {top['blocking']} other thread(s) wait for"
            if top["blocking"] > 0
            else ""
        )
        items.append(
            Finding(
                f"{FLOW}/stuck-threads",
                Severity.CRITICAL if pd.notna(top["tool"]) else Severity.WARNING,
                f"{int(stalls['count'].sum())} thread(s) stuck {_backing(report, stalls)}; "
                f"{top['count']} of {top['pool']} in {where} ({top['state']}{tied}){holding}",
                "Thread dumps: the same thread (name and nid) in the same state with the same "
                "top frames in every dump, and no CPU gained between them (cpu=), so it waited "
                "there. JFR: every native-method sample of the thread, through the recording, "
                "in the same frames, and no execution sample. Each group's evidence says which "
                "backs it (both: the recording corroborates the dumps). Grouped by top frame "
                "and first application frame; a group holding a lock others wait for first "
                "(blocking), then the group tied to the open calls.",
                "Apply the fix below to the client in the first group's frames."
                + (" It holds the lock the others wait for: fix it, not them." if holding else "")
                if pd.notna(top["tool"])
                else "Read each group's frames: no open call's tool names them.",
                rows_of(stalls, STUCK_ROW, limit=limit),
                len(stalls),
            )
        )
    if len(idle):
        items.append(
            Finding(
                f"{FLOW}/idle-threads",
                Severity.INFO,
                f"{int(idle['count'].sum())} thread(s) unmoved but idle by design",
                "Pool workers waiting for work, JVM threads, event loops, the main thread, and "
                "socket reads no open call explains and no other thread waits on: not the stall.",
                "None.",
                rows_of(idle, IDLE_ROW, limit=limit),
                len(idle),
            )
        )
    return items


def lock_owner_items(report: LatencyReport, limit: int | None) -> list[Finding]:
    """The threads holding the locks others wait for (named first: they are the cause), and
    the waits whose owner the dumps do not name."""
    owners = report.lock_owners
    named = owners.loc[owners["owner"].notna()]
    items = []
    if len(named):
        top = named.iloc[0]
        seen = (
            f", unchanged in all {report.dumps} dumps"
            if top["unchanged"] and report.dumps >= 2
            else f", holding it in {top['dumps']} of {report.dumps} dump(s)"
        )
        where = (
            top["owner_app_frame"] if pd.notna(top["owner_app_frame"]) else top["owner_top_frame"]
        )
        client = f"; its client: {top['client']}" if pd.notna(top["client"]) else ""
        jfr = (
            f" The JFR recording corroborates it: {top['jfr_enters']} monitor enter(s) on "
            f"{top['lock_class']} waited {seconds(top['jfr_blocked_ms'])} for it."
            if top["jfr_enters"]
            else ""
        )
        deadlock = " The chain comes back to a thread: a deadlock." if top["deadlock"] else ""
        items.append(
            Finding(
                f"{FLOW}/lock-owner",
                Severity.CRITICAL
                if top["unchanged"] or pd.notna(top["tool"]) or top["deadlock"]
                else Severity.WARNING,
                f"{top['owner']} holds the lock {top['count']} thread(s) of {top['pool']} wait "
                f"for ({top['lock_class']}, {top['lock_wait']}): it is in {top['activity']} at "
                f"{where} ({top['owner_state']}{seen}){client}",
                "A thread BLOCKED on a monitor (waiting to lock) or parked on a "
                "java.util.concurrent lock waits for the thread that holds it (locked, or its "
                "locked ownable synchronizers, listed by Thread.print -l only); chains are "
                "followed to the thread that waits for no held lock. That owner's frames are "
                f"the cause; its waiters' frames ({top['waiter_frame']}) are where the symptom "
                f"shows.{jfr}{deadlock}",
                f"Fix the owner, not its waiters: its call in {where} blocks while it holds the "
                + (
                    f"lock it took in {top['lock_frame']}"
                    if pd.notna(top["lock_frame"])
                    else "lock"
                )
                + "; give "
                + (f"{top['client']}" if pd.notna(top["client"]) else "that call")
                + " a timeout and make the call outside the lock (the fix below).",
                rows_of(named, OWNER_ROW, limit=limit),
                len(named),
            )
        )
    unknown = owners.loc[owners["owner"].isna()]
    if len(unknown):
        first = unknown.iloc[0]
        items.append(
            Finding(
                f"{FLOW}/lock-owner-unknown",
                Severity.WARNING,
                f"{int(unknown['count'].sum())} thread(s) parked on a java.util.concurrent lock "
                f"whose owner the dumps do not name; {first['count']} of {first['pool']} on "
                f"{first['lock_class']} in {first['waiter_frame']}",
                "Only jcmd <pid> Thread.print -l lists each thread's locked ownable "
                "synchronizers (ReentrantLock, ReentrantReadWriteLock): without -l the thread "
                "holding the lock, the cause, cannot be named.",
                "Take two dumps with jcmd <pid> Thread.print -l, ten seconds apart, and run the "
                "flow again.",
                rows_of(unknown, OWNER_ROW, limit=limit),
                len(unknown),
            )
        )
    return items


def spinning_item(report: LatencyReport, limit: int | None) -> Finding | None:
    """The threads unchanged in every dump but on the CPU."""
    spin = report.spinning
    if spin.empty:
        return None
    top = spin.iloc[0]
    where = top["app_frame"] if pd.notna(top["app_frame"]) else top["top_frame"]
    ran = (
        f"{seconds(top['cpu_ms'])} of CPU in {top['over_s']:.1f} s ({share_text(top['cpu_share'])})"
        if pd.notna(top["cpu_ms"])
        else f"{top['jfr_samples']} JFR execution sample(s) between the dumps"
    )
    return Finding(
        f"{FLOW}/spinning-threads",
        Severity.WARNING,
        f"{int(spin['count'].sum())} thread(s) spin: the same frames in all {report.dumps} dumps, "
        f"but on the CPU; {top['count']} of {top['pool']} in {where} ({ran})",
        "The same thread in the same state with the same top frames in every dump looks stuck, "
        "but its cpu= grew with elapsed= between the dumps (a blocked thread's barely moves), "
        "or the JFR recording sampled it running Java code: it is busy in place (a busy-wait on "
        "Thread.yield or onSpinWait, a hot loop, a retry with no back-off), not blocked.",
        "Replace the busy-wait with a blocking wait (a Condition, a queue's take, a "
        "CompletableFuture) or back off between tries: a spinning thread burns a core and "
        "slows every other thread of the JVM.",
        rows_of(spin, SPIN_ROW, limit=limit),
        len(spin),
    )


def _backing(report: LatencyReport, stalls: pd.DataFrame) -> str:
    """Where the stuck threads were seen, for the title."""
    sources = set(stalls["evidence"])
    dumps = f"in all {report.dumps} dumps"
    jfr = "in one native call through the JFR recording"
    if sources == {"JFR samples"}:
        return jfr
    if "JFR samples" in sources or "thread dumps and JFR samples" in sources:
        return f"{dumps} and {jfr}"
    return dumps
