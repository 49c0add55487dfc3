"""Lock chains in thread dumps: which thread holds the lock the others wait for.

A thread ``BLOCKED`` on a monitor (``- waiting to lock <0x..>``) or parked on a
``java.util.concurrent`` lock (``- parking to wait for <0x..>``) waits for the thread that
holds it (``- locked <0x..>``, or listed under ``Locked ownable synchronizers``, which only
``jcmd <pid> Thread.print -l`` prints). Chains are followed to the thread that waits for no
held lock (the root): its frames are the cause, whatever state the waiters are in. A chain that
comes back to a thread is a deadlock.

Read in the last dump; an owner holding the same lock in every dump with the same frames
(``unchanged``) has not moved between them. A waiter parked on a ``ReentrantLock`` or
``ReentrantReadWriteLock`` whose owner no thread lists, in a dump taken without ``-l``, has an
unknown owner (a row with no ``owner``). JFR ``jdk.JavaMonitorEnter`` events whose previous
owner is the owner, on the same monitor class, corroborate it (``jfr_enters``,
``jfr_blocked_ms``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import dropwhile
from typing import Any

import pandas as pd

from incidentkit.flows._frames import as_columns
from incidentkit.flows.latency_cliff.stacks import (
    SOCKET_READ,
    TOP_FRAMES,
    class_of,
    client_of,
    first_application_frame,
    is_application,
    names_tool,
    natural_key,
    pool_of,
)
from incidentkit.frames import BOOL, FLOAT, INT, OBJ, STR

OWNER_COLUMNS: Mapping[str, str] = {
    "owner": STR,
    "owner_state": STR,
    "activity": STR,
    "owner_top_frame": STR,
    "owner_app_frame": STR,
    "lock_frame": STR,
    "client": STR,
    "lock": STR,
    "lock_class": STR,
    "lock_wait": STR,
    "waiters": OBJ,
    "count": INT,
    "pool": STR,
    "waiter_frame": STR,
    "tool": STR,
    "chain": OBJ,
    "deadlock": BOOL,
    "unchanged": BOOL,
    "dumps": INT,
    "jfr_enters": INT,
    "jfr_blocked_ms": FLOAT,
}
"""One row per lock owner (the root of its chain) in the last dump: what it is doing
(``activity``: a socket read, running, parked, ...), where it took the lock (``lock_frame``: its
frame of the lock's class, else the application frame that called its client), the lock its
direct waiters wait for, the
waiters (every thread whose chain ends at it), their pool, first application frame and the open
call's tool their frames name, the owners in between (``chain``), whether it held that lock with
the same frames in every dump (``unchanged``) and in how many dumps it held it (``dumps``). A
row with no ``owner`` is a ``java.util.concurrent`` lock whose owner the dump does not list."""
OWNABLE = (
    "java.util.concurrent.locks.ReentrantLock$",
    "java.util.concurrent.locks.ReentrantReadWriteLock$",
)
"""Lock classes whose owner only ``Thread.print -l`` lists."""
MAX_CHAIN = 64


def activity(state: str, frames: Sequence[str]) -> str:
    """What a thread is doing, as people say it: ``a socket read``, ``running``, ``parked``..."""
    text = " ".join(frames[:TOP_FRAMES])
    top = frames[0] if frames else ""
    if any(read in text for read in SOCKET_READ):
        return "a socket read"
    if state == "BLOCKED":
        return "waiting to lock a monitor"
    if "Thread.sleep" in top or "Thread.sleepNanos" in top:
        return "sleeping"
    if "Unsafe.park" in top:
        return "parked"
    if "Object.wait" in top:
        return "waiting in Object.wait"
    if state == "RUNNABLE":
        return "running" if frames else "runnable (no Java frames)"
    return state.lower() if state else "unknown"


@dataclass(frozen=True)
class _Thread:
    """One thread of one dump, as the lock chains need it."""

    name: str
    state: str
    frames: tuple[str, ...]
    awaited: str | None
    lock_class: str | None
    lock_wait: str | None


@dataclass(frozen=True)
class _Dump:
    """One dump: its threads by name, each held lock's holder, whether it lists ownable
    synchronizers (``Thread.print -l``)."""

    threads: Mapping[str, _Thread]
    holder: Mapping[str, str]
    listed: bool

    @classmethod
    def of(cls, dump: pd.DataFrame) -> _Dump:
        held = dump[["thread", "locks_held"]].explode("locks_held").dropna()
        held = held.drop_duplicates("locks_held")
        threads = {
            str(name): _Thread(
                str(name),
                _text(state) or "",
                tuple(frames),
                _text(awaited),
                _text(cls),
                _text(wait),
            )
            for name, state, frames, awaited, cls, wait in zip(
                dump["thread"],
                dump["state"],
                dump["frames"],
                dump["lock_awaited"],
                dump["lock_class"],
                dump["lock_wait"],
                strict=True,
            )
        }
        return cls(
            threads,
            dict(zip(held["locks_held"].astype(str), held["thread"].astype(str), strict=True)),
            bool(dump["synchronizers_listed"].any()),
        )

    def root(self, name: str) -> tuple[str | None, tuple[str, ...], str, bool]:
        """Where ``name``'s chain of waits ends: the root owner (None when nothing holds the
        lock it waits for), the owners in between, the lock of the root the chain waits for,
        and whether the chain comes back on itself (a deadlock)."""
        seen = [name]
        lock = self.threads[name].awaited or ""
        while len(seen) <= MAX_CHAIN:
            owner = self.holder.get(lock)
            if owner is None or owner == seen[-1]:
                return (seen[-1] if len(seen) > 1 else None), tuple(seen[1:-1]), lock, False
            if owner in seen:
                return owner, tuple(seen[1:]), lock, True
            seen.append(owner)
            found = self.threads.get(owner)
            nxt = found.awaited if found is not None else None
            if nxt is None or nxt not in self.holder:
                return owner, tuple(seen[1:-1]), lock, False
            lock = nxt
        return seen[-1], tuple(seen[1:-1]), lock, True

    def unowned(self, waiter: _Thread) -> bool:
        """Whether ``waiter`` is parked on a lock only ``Thread.print -l`` names the owner
        of, in a dump taken without it."""
        return (
            waiter.lock_wait == "park"
            and (waiter.lock_class or "").startswith(OWNABLE)
            and not self.listed
        )


def lock_frame(frames: Sequence[str], lock_class: str | None) -> str | None:
    """Where a stack took a lock: its first frame of the lock's class (a ``synchronized``
    method of the object locked), else the first application frame below its client's (the
    code that called the client while holding the lock), else None."""
    if lock_class:
        found = next((f for f in frames if class_of(f) == lock_class), None)
        if found is not None:
            return found
    client = client_of(frames)
    below = dropwhile(lambda f: class_of(f) != client, frames)
    return next((f for f in below if is_application(f) and class_of(f) != client), None)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def lock_owners(
    threads: pd.DataFrame,
    tools: Iterable[str] = (),
    *,
    unchanged: Iterable[str] = (),
    jfr_locks: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The owners of the locks threads wait for in the last dump (:data:`OWNER_COLUMNS`),
    the owner with the most waiters first. ``unchanged`` names the threads that did not move
    between the dumps; ``tools`` the open calls' tools the waiters' frames may name."""
    if threads.empty:
        return as_columns(pd.DataFrame(columns=list(OWNER_COLUMNS)), OWNER_COLUMNS)
    dumps = [_Dump.of(dump) for _, dump in threads.groupby("dump", sort=False)]
    last = dumps[-1]
    wanted = sorted({str(t) for t in tools if isinstance(t, str) and t})
    still = set(unchanged)
    rows: dict[tuple[str | None, str], dict[str, Any]] = {}
    for waiter in last.threads.values():
        if waiter.awaited is None:
            continue
        root, chain, lock, deadlock = last.root(waiter.name)
        if root is None and not last.unowned(waiter):
            continue  # a condition wait, a latch, a lock just released: nobody to name
        row = rows.setdefault((root, "" if root else lock), _row(root, lock, waiter, last, still))
        row["waiters"].append(waiter.name)
        row["chain"] = tuple(dict.fromkeys([*row["chain"], *chain]))
        row["deadlock"] = row["deadlock"] or deadlock
    if not rows:
        return as_columns(pd.DataFrame(columns=list(OWNER_COLUMNS)), OWNER_COLUMNS)
    for row in rows.values():
        waiters = tuple(sorted(row["waiters"], key=natural_key))
        first = last.threads[waiters[0]]
        row.update(
            waiters=waiters,
            count=len(waiters),
            pool=", ".join(sorted({pool_of(w) for w in waiters})),
            waiter_frame=first_application_frame(first.frames),
            tool=_tool_of([last.threads[w].frames for w in waiters], wanted),
            dumps=sum(_holds_in(dump, row["owner"], waiters) for dump in dumps),
        )
    out = _corroborated(pd.DataFrame(list(rows.values())), jfr_locks)
    out = out.sort_values(["count", "owner"], ascending=[False, True], kind="stable")
    return as_columns(out.reset_index(drop=True), OWNER_COLUMNS)


def _row(
    owner: str | None, lock: str, waiter: _Thread, dump: _Dump, still: set[str]
) -> dict[str, Any]:
    """A row's fields known from its owner and first waiter (the rest filled after)."""
    found = dump.threads.get(owner) if owner else None
    frames = found.frames if found is not None else ()
    direct = next((t for t in dump.threads.values() if t.awaited == lock and t.lock_class), waiter)
    return {
        "owner": owner,
        "owner_state": found.state if found is not None else None,
        "activity": activity(found.state, frames) if found is not None else None,
        "owner_top_frame": frames[0] if frames else None,
        "owner_app_frame": first_application_frame(frames),
        "lock_frame": lock_frame(frames, direct.lock_class),
        "client": client_of(frames) if frames else None,
        "lock": lock,
        "lock_class": direct.lock_class,
        "lock_wait": direct.lock_wait,
        "waiters": [],
        "chain": (),
        "deadlock": False,
        "unchanged": owner in still,
    }


def _tool_of(stacks: Sequence[tuple[str, ...]], tools: Sequence[str]) -> str | None:
    """The first open call's tool a waiter's frames name."""
    for frames in stacks:
        for tool in tools:
            if any(names_tool(frame, tool) for frame in frames):
                return tool
    return None


def _holds_in(dump: _Dump, owner: str | None, waiters: Sequence[str]) -> bool:
    """Whether, in ``dump``, a waiter's chain ends at ``owner`` (with no owner: whether a
    waiter waits at all)."""
    present = [w for w in waiters if w in dump.threads and dump.threads[w].awaited]
    if owner is None:
        return bool(present)
    return any(dump.root(w)[0] == owner for w in present)


def _corroborated(out: pd.DataFrame, jfr_locks: pd.DataFrame | None) -> pd.DataFrame:
    """``out`` with the JFR monitor enters of each lock's class whose previous owner is the
    row's owner: how many, and how long their threads were blocked in total."""
    if jfr_locks is None or jfr_locks.empty:
        return out.assign(jfr_enters=0, jfr_blocked_ms=float("nan"))
    enters = jfr_locks.loc[jfr_locks["event_type"].eq("monitor-enter")]
    stats = enters.groupby(["previous_owner", "class"])["duration_ms"].agg(["size", "sum"])
    counts = stats["size"].to_dict()
    blocked = stats["sum"].to_dict()
    keys = list(zip(out["owner"], out["lock_class"], strict=True))
    return out.assign(
        jfr_enters=[int(counts.get(key, 0)) for key in keys],
        jfr_blocked_ms=[float(blocked.get(key, float("nan"))) for key in keys],
    )
