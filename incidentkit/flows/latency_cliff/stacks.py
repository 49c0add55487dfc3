"""Stuck and spinning threads from two or more JVM thread dumps, grouped by stack and tied to
the open calls.

A thread is **unchanged** when the same thread (its name and ``nid``) is in the same state with
the same top frames in every dump. Its CPU time then tells blocked from busy: the header's
``cpu=`` gained between the first and the last dump, per ``elapsed=`` gained (``cpu_share``, of
one core). A thread that gained :data:`BUSY_SHARE` or more **spins** (the same frames, but on
the CPU: a busy-wait, a hot loop); the others are **stuck**. Without ``cpu=``
(``Thread.dump_to_file``, JDKs before 11) the share is unknown and every unchanged thread counts
as stuck, unless a JFR recording sampled it running between the dumps.

Stuck threads are grouped by their top frame, first application frame and state. A group whose
frames name the tool of an open call (``ShippingTools.carrierRates`` for ``carrierRates``, any
case, separators ignored) is the stall; so is a group that holds a lock other threads wait for
(:mod:`.locks`: the owner is the cause, named first, tied to its waiters' tool). Groups idle by
design (pool workers waiting for work, JVM threads, event loops and acceptors waiting for I/O,
the main thread waiting for shutdown, and a socket read no open call explains and no waiter
depends on, such as a listener's) are shown apart.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from incidentkit.flows._frames import as_columns
from incidentkit.frames import BOOL, FLOAT, INT, OBJ, STR

NAN = float("nan")
TOP_FRAMES = 8
"""How many frames from the top two dumps of a thread must share."""
BUSY_SHARE = 0.1
"""CPU time gained between the first and last dump, per wall time, from which an unchanged
thread was running, not blocked (a tenth of one core; a blocked thread gains next to none)."""

LIBRARY_PREFIXES = (
    *("java.", "javax.", "jdk.", "sun.", "com.sun.", "jakarta.", "kotlin.", "kotlinx.", "scala."),
    *("io.reactivex.", "reactor.", "io.netty.", "io.grpc.", "io.vertx.", "io.undertow."),
    *("org.apache.", "org.eclipse.", "org.springframework.", "org.glassfish.", "org.jboss."),
    *("okhttp3.", "okio.", "retrofit2.", "feign.", "com.fasterxml.", "com.google."),
    *("io.opentelemetry.", "io.micrometer.", "ch.qos.", "org.slf4j.", "com.zaxxer."),
    *("org.postgresql.", "com.mysql.", "org.mariadb.", "org.hibernate.", "software.amazon."),
    *("com.amazonaws.", "io.lettuce.", "redis.clients.", "com.datastax."),
)
"""Packages of the JDK and common libraries: any other frame is the application's."""

_WAITS_FOR_WORK = (
    "ThreadPoolExecutor.getTask",
    "ForkJoinPool.awaitWork",
    "ScheduledThreadPoolExecutor$DelayedWorkQueue.take",
    "SynchronousQueue",
    "ForkJoinPool.runWorker",
)
_EVENT_LOOP = (
    "epollWait",
    "EPoll.wait",
    "EPollSelectorImpl.doSelect",
    "KQueue",
    "SelectorImpl.select",
    "ServerSocket.accept",
    "ServerSocketChannelImpl.accept",
    "Acceptor.run",
    "Net.accept",
)
_JVM_THREAD = re.compile(
    r"^(?:VM |GC |G1 |C1 |C2 |Reference Handler|Finalizer|Signal Dispatcher|Common-Cleaner|"
    r"Attach Listener|Service Thread|Notification Thread|Monitor Deflation|Sweeper|"
    r"VM Periodic|JFR |process reaper|DestroyJavaVM|Cleaner-)"
)
_JVM_FRAMES = ("Reference.waitForReferencePendingList", "CleanerImpl.run", "ReferenceQueue.remove")
SOCKET_READ = (
    "SocketInputStream.read",
    "NioSocketImpl.read",
    "SocketDispatcher.read",
    "socketRead0",
    "SocketChannelImpl.read",
    "Net.poll",
    "SSLSocketImpl$AppInputStream.read",
)
_POOL_SUFFIX = re.compile(r"(?:[-_ #]\d+)+$")
_WORD = re.compile(r"[^0-9a-z]")


def pool_of(name: str) -> str:
    """A thread's pool: its name without the trailing numbers (``tool-exec-8`` → ``tool-exec``,
    ``pool-3-thread-7`` → ``pool-3-thread``)."""
    return _POOL_SUFFIX.sub("", name) or name


def method_of(frame: str) -> str:
    """``pkg.Class.method`` of a frame, without the file part."""
    return frame.split("(", 1)[0].strip()


def class_of(frame: str) -> str:
    """The class of a frame (``com.acme.CarrierClient`` of ``com.acme.CarrierClient.get(...)``)."""
    return method_of(frame).rsplit(".", 1)[0]


_MODULE = re.compile(r"^[a-z][\w.]*(?:@[\w.+-]+)?/(?=[a-z])")
"""``java.base/`` or ``java.base@21/`` before a class, as ``Thread.dump_to_file`` prints it; a
lambda's hidden class (``Foo$$Lambda$14/0x00007f...``) has its slash after the class name."""


def is_application(frame: str) -> bool:
    """Whether ``frame`` is the application's: no JDK or known library package."""
    name = _MODULE.sub("", method_of(frame), count=1)
    return not name.startswith(LIBRARY_PREFIXES)


def first_application_frame(frames: Sequence[str]) -> str | None:
    """The first frame of a stack, from the top, that is the application's (None if none is)."""
    return next((f for f in frames if is_application(f)), None)


def _normal(text: str) -> str:
    return _WORD.sub("", text.lower())


def names_tool(frame: str, tool: str) -> bool:
    """Whether an application frame names ``tool``: its method is the tool, or its class
    holds the tool's name (``OrderLookupClient`` for ``order_lookup``); case and separators
    are ignored."""
    wanted = _normal(tool)
    if len(wanted) < 3 or not is_application(frame):
        return False
    method = method_of(frame)
    cls, _, name = method.rpartition(".")
    simple = cls.rsplit(".", 1)[-1]
    return _normal(name) == wanted or wanted in _normal(simple)


def unchanged_threads(threads: pd.DataFrame, *, top: int = TOP_FRAMES) -> pd.DataFrame:
    """The threads in the same state with the same top frames in every dump, one row each (its
    row of the last dump), with ``cpu_ms_gained``, ``over_ms`` (the ``elapsed=`` between its
    first and last dump) and ``cpu_share`` (their ratio; NaN when a header lacks them).

    Empty when fewer than two dumps are present: one dump cannot tell stuck from busy.
    """
    dumps = threads["dump"].nunique()
    if dumps < 2:
        nothing = pd.Series([], dtype=FLOAT)
        return threads.iloc[0:0].assign(cpu_ms_gained=nothing, over_ms=nothing, cpu_share=nothing)
    identity = threads["thread"].astype(object) + "\x1f" + threads["nid"].fillna("").astype(object)
    signature = (
        threads["state"].fillna("").astype(object)
        + "\x1f"
        + threads["frames"].map(lambda frames: "\x1f".join(frames[:top]))
    )
    keyed = threads.assign(_id=identity, _sig=signature)
    grouped = keyed.groupby("_id", sort=False)
    same = grouped["dump"].nunique().eq(dumps) & grouped["_sig"].nunique().eq(1)
    clock = ["cpu_ms", "elapsed_ms"]
    timed = keyed if set(clock) <= set(keyed.columns) else keyed.assign(cpu_ms=NAN, elapsed_ms=NAN)
    first = timed.groupby("_id", sort=False)[clock].first(skipna=False)
    last = timed.groupby("_id", sort=False)[clock].last(skipna=False)
    gained = (last["cpu_ms"] - first["cpu_ms"]).where(lambda d: d >= 0)
    over = (last["elapsed_ms"] - first["elapsed_ms"]).where(lambda d: d > 0)
    unchanged = keyed.loc[keyed["_id"].isin(same.index[same])]
    unchanged = unchanged.drop_duplicates("_id", keep="last")
    ids = unchanged["_id"]
    return unchanged.assign(
        cpu_ms_gained=ids.map(gained).astype(FLOAT),
        over_ms=ids.map(over).astype(FLOAT),
        cpu_share=ids.map(gained / over).astype(FLOAT),
    ).drop(columns=["_id", "_sig"])


def busy(unchanged: pd.DataFrame, executed: Mapping[str, int] | None = None) -> pd.Series:
    """Which unchanged threads ran between the dumps: ``cpu_share`` of :data:`BUSY_SHARE` or
    more, or (share unknown) a JFR execution sample between them (``executed``: thread name →
    samples). Threads with no frames (the JVM's own) are never called busy."""
    samples = unchanged["thread"].map(dict(executed or {})).fillna(0)
    share = unchanged["cpu_share"]
    ran = share.ge(BUSY_SHARE) | (share.isna() & samples.gt(0))
    return ran & unchanged["frames"].map(len).gt(0)


def stuck_threads(threads: pd.DataFrame, *, top: int = TOP_FRAMES) -> pd.DataFrame:
    """The unchanged threads that did not run between the dumps (:func:`unchanged_threads`
    less :func:`busy`), one row each.

    Empty when fewer than two dumps are present: one dump cannot tell stuck from busy.
    """
    unchanged = unchanged_threads(threads, top=top)
    return unchanged.loc[~busy(unchanged)]


def idle_reason(
    name: str, state: str, frames: Sequence[str], *, explained: bool, blocking: int = 0
) -> str | None:
    """Why a stuck thread is idle by design, or None when it may be the stall.

    ``explained`` says whether some open call's tool ties to another group: then a socket read
    that names no open tool is a listener waiting for data, not the stall. A thread that holds
    a lock ``blocking`` other threads wait for is never idle: whatever it waits on, they wait
    on too.
    """
    if blocking:
        return None
    text = " ".join(frames)
    if not frames or _JVM_THREAD.match(name) or any(f in text for f in _JVM_FRAMES):
        return "a JVM thread"
    if any(f in text for f in _WAITS_FOR_WORK):
        return "a pool worker waiting for work"
    if any(f in text for f in _EVENT_LOOP):
        return "an event loop or acceptor waiting for I/O"
    if name == "main" and state.startswith(("WAITING", "TIMED_WAITING")):
        return "the main thread waiting for shutdown"
    if explained and any(f in text for f in SOCKET_READ):
        return "a socket read no open call explains (a listener waiting for data)"
    return None


DUMPS, JFR, BOTH = "thread dumps", "JFR samples", "thread dumps and JFR samples"
"""What backs a stuck thread (the ``evidence`` of each stuck-thread group)."""


def _backed_by(evidence: set[str]) -> str:
    if BOTH in evidence or {DUMPS, JFR} <= evidence:
        return BOTH
    return next(iter(evidence)) if evidence else DUMPS


GROUP_COLUMNS: Mapping[str, str] = {
    "top_frame": STR,
    "app_frame": STR,
    "state": STR,
    "threads": OBJ,
    "count": INT,
    "tool": STR,
    "pool": STR,
    "client": STR,
    "tool_frame": STR,
    "idle": BOOL,
    "idle_reason": STR,
    "evidence": STR,
    "blocking": INT,
    "waits_for": STR,
    "lock_class": STR,
    "lock_frame": STR,
}
"""One row per stuck-thread group. ``blocking``: threads (of any group) that wait for a lock
the group's threads hold; ``waits_for``: the thread holding the lock this group waits for, and
``lock_class`` that lock's class, ``lock_frame`` where a lock owner took it (:mod:`.locks`)."""


def client_of(frames: Sequence[str]) -> str | None:
    """The client class a blocked stack reads through: the first application frame, from the
    top, whose class is a client (``...Client``), else the first library one, else the class
    of the first application frame."""
    for candidates in ([f for f in frames if is_application(f)], list(frames)):
        for frame in candidates:
            if "client" in class_of(frame).rsplit(".", 1)[-1].lower():
                return class_of(frame)
    first = first_application_frame(frames)
    return None if first is None else class_of(first)


def group_stuck(
    stuck: pd.DataFrame, tools: Iterable[str], owners: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Stuck threads grouped by (top frame, first application frame, state), with their names,
    pool and count; tied to the open calls' ``tools``. ``owners`` (:func:`.locks.lock_owners`)
    ties a group holding a lock others wait for to its waiters' tool, with ``blocking`` and the
    client of its own frames. Order: lock owners tied to a tool, the other tied groups, the
    other stalls by size, then the groups idle by design. ``evidence`` says what backs each
    group (the rows' own ``evidence`` column, else thread dumps)."""
    wanted = sorted({str(t) for t in tools if isinstance(t, str) and t})
    if stuck.empty:
        return as_columns(pd.DataFrame(columns=list(GROUP_COLUMNS)), GROUP_COLUMNS)
    known = owners if owners is not None and len(owners) else None
    waits_for, blocking, owner_tool, lock_class = _lock_roles(known)
    taken = {} if known is None else dict(zip(known["owner"], known["lock_frame"], strict=True))
    frames = stuck["frames"]
    app = frames.map(first_application_frame)
    keyed = stuck.assign(app_frame=app, _top=stuck["top_frame"].fillna(""), _app=app.fillna(""))
    rows = []
    for (_, _), group in keyed.groupby(["_top", "_app"], sort=False):
        first = group.iloc[0]
        stack: tuple[str, ...] = first["frames"]
        tied = [(tool, frame) for tool in wanted for frame in stack if names_tool(frame, tool)]
        names = sorted(group["thread"].astype(str), key=natural_key)
        pools = sorted({pool_of(n) for n in names})
        blocks = sum(blocking.get(n, 0) for n in names)
        inherited = next((owner_tool[n] for n in names if owner_tool.get(n)), None)
        tool = tied[0][0] if tied else inherited if blocks else None
        held_for = next((waits_for[n] for n in names if n in waits_for), None)
        rows.append(
            {
                "top_frame": first["top_frame"],
                "app_frame": first["app_frame"],
                "state": first["state"],
                "threads": tuple(names),
                "count": len(group),
                "tool": tool,
                "pool": ", ".join(pools),
                "client": client_of(stack) if tool else None,
                "tool_frame": tied[0][1] if tied else None,
                "evidence": _backed_by(
                    set(group["evidence"].dropna()) if "evidence" in group else set()
                ),
                "blocking": blocks,
                "waits_for": held_for,
                "lock_class": next((lock_class[n] for n in names if n in lock_class), None),
                "lock_frame": next((taken[n] for n in names if blocks and n in taken), None),
                "_stack": stack,
                "_name": names[0],
            }
        )
    out = pd.DataFrame(rows)
    explained = bool(out["tool"].notna().any())
    reasons = [
        idle_reason(name, str(state), stack, explained=explained, blocking=int(blocks))
        if pd.isna(tool)
        else None
        for name, state, stack, tool, blocks in zip(
            out["_name"], out["state"], out["_stack"], out["tool"], out["blocking"], strict=True
        )
    ]
    out["idle_reason"] = reasons
    out["idle"] = out["idle_reason"].notna()
    tied_group = out["tool"].notna()
    order = np.select([tied_group & out["blocking"].gt(0), tied_group, ~out["idle"]], [0, 1, 2], 3)
    out = out.assign(_order=order).sort_values(
        ["_order", "count", "top_frame"], ascending=[True, False, True], kind="stable"
    )
    return as_columns(out, GROUP_COLUMNS)


def _lock_roles(
    owners: pd.DataFrame | None,
) -> tuple[dict[str, str], dict[str, int], dict[str, str], dict[str, str]]:
    """From :func:`.locks.lock_owners`: each waiter's owner, each owner's waiter count, each
    owner's waiters' tool, and the lock class of each thread on either side."""
    if owners is None:
        return {}, {}, {}, {}
    named = owners.loc[owners["owner"].notna()]
    waits_for = {
        str(waiter): str(owner)
        for owner, waiters in zip(named["owner"], named["waiters"], strict=True)
        for waiter in waiters
    }
    counts = named.groupby("owner")["count"].sum()
    blocking = {str(owner): int(n) for owner, n in counts.items()}
    tools = named.loc[named["tool"].notna()].drop_duplicates("owner")
    owner_tool = dict(zip(tools["owner"].astype(str), tools["tool"].astype(str), strict=True))
    classes = dict(zip(named["owner"].astype(str), named["lock_class"], strict=True))
    classes.update(
        {w: str(c) for c, ws in zip(named["lock_class"], named["waiters"], strict=True) for w in ws}
    )
    return waits_for, blocking, owner_tool, {k: v for k, v in classes.items() if isinstance(v, str)}


def natural_key(name: str) -> tuple[object, ...]:
    """Sort key that puts ``tool-exec-2`` before ``tool-exec-10``."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))
