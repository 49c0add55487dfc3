"""The two thread dumps of ``latency_cliff``: 64 tool threads stuck, the rest moving.

Two harder cases sit beside the stall. A listener thread blocks in a socket read by design, the
same stack in both dumps (stuck by the letter of the test, idle by design). Three of the four
``kb-exec`` threads of the ``kb_search`` tool read from the knowledge base in one dump only:
slow for a moment, not stuck.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from incidentkit.simulate import threads as t
from incidentkit.simulate.model import at
from incidentkit.simulate.world import World

JVM_STARTED = at("01:20:07")
KB_POOL = 4


@dataclass(frozen=True)
class Listener:
    """A thread that waits on a long-lived socket by design."""

    name: str
    number: int
    frames: tuple[str, ...]
    reason: str

    @property
    def app_frame(self) -> str:
        """The first application frame (not the JDK's)."""
        return next(f for f in self.frames if t.JDK not in f)


LISTENERS = (
    Listener(
        "audit-feed-listener",
        72,
        t.AUDIT_FEED,
        "waits on the audit feed's long-lived socket for the next record; blocks by design, "
        "names no tool",
    ),
)


@dataclass(frozen=True)
class KbRead:
    """One ``kb_search`` call on pool thread ``thread``: read ``[start, end)``, parsed by
    ``parsed`` (epoch ms)."""

    thread: int
    start: int
    end: int
    parsed: int


def _kb_stack(reads: list[KbRead], thread: int, at_ms: int) -> tuple[str, tuple[str, ...]]:
    """(state, frames) of ``kb-exec-<thread>`` at ``at_ms``."""
    for read in reads:
        if read.thread == thread and read.start <= at_ms < read.end:
            return "RUNNABLE", t.KB_READ
        if read.thread == thread and read.end <= at_ms < read.parsed:
            return "RUNNABLE", t.KB_PARSE
    return "WAITING (parking)", t.KB_PARKED


def _pool(
    prefix: str, count: int, first: int, stacks: tuple[tuple[str, tuple[str, ...]], ...], shift: int
) -> list[tuple[str, int, bool, str, tuple[str, ...]]]:
    """Threads of one pool whose (state, frames) rotate through ``stacks`` between dumps."""
    return [
        (f"{prefix}-{n}", first + n, True, *stacks[(n + shift) % len(stacks)])
        for n in range(1, count + 1)
    ]


def dumps(
    world: World, times: tuple[int, int], stuck: list[int], kb: list[KbRead]
) -> Iterator[t.Dump]:
    """Two dumps at ``times``; ``stuck`` pool threads sit in the socket read in both, the
    listeners wait on their sockets, the ``kb-exec`` threads are where ``kb`` puts them."""
    rng = world.rng
    serving = (("RUNNABLE", t.SERVING), ("WAITING (parking)", t.PARKED_QUEUE))
    rx = (("RUNNABLE", t.RX_WORKING), ("TIMED_WAITING (parking)", t.RX_IDLE))
    cpu = {name: rng.uniform(50, 4000) for name in ("main", "http", "rx", "tool")}
    for number, taken in enumerate(times, start=1):
        shift = number - 1
        threads = [
            ("main", 1, False, "WAITING (parking)", t.MAIN),
            ("Reference Handler", 9, True, "RUNNABLE", t.REFERENCE),
            ("Signal Dispatcher", 11, True, "RUNNABLE", ()),
            *_pool("http-nio-8080-exec", 4, 40, serving, shift),
            *_pool("RxComputationThreadPool", 2, 60, rx, shift),
            *_pool("RxCachedThreadScheduler", 2, 63, rx, shift + 1),
            ("grpc-default-worker-ELG-1-1", 70, True, "RUNNABLE", t.EPOLL),
            ("grpc-default-worker-ELG-1-2", 71, True, "RUNNABLE", t.EPOLL),
            *[(x.name, x.number, True, "RUNNABLE", x.frames) for x in LISTENERS],
            *[
                (f"tool-exec-{n}", 80 + n, True, "RUNNABLE", t.SOCKET_READ)
                if n in stuck
                else (f"tool-exec-{n}", 80 + n, True, "WAITING (parking)", t.PARKED_QUEUE)
                for n in range(1, 65)
            ],
            *[
                (f"kb-exec-{n}", 144 + n, True, *_kb_stack(kb, n, taken))
                for n in range(1, KB_POOL + 1)
            ],
        ]
        yield t.Dump(
            file=f"threads/dump-{number}.txt",
            taken=taken,
            started=JVM_STARTED,
            threads=tuple(
                t.JThread(
                    name,
                    num,
                    100 + num,
                    daemon,
                    state,
                    frames,
                    cpu[name.split("-")[0] if name.startswith(("tool", "http")) else "rx"]
                    + 7.5 * num
                    + 13.1 * number,
                )
                for name, num, daemon, state, frames in threads
            ),
        )
