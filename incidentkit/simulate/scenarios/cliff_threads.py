"""The two thread dumps of ``latency_cliff``: 64 tool threads stuck, the rest moving."""

from __future__ import annotations

from collections.abc import Iterator

from incidentkit.simulate import threads as t
from incidentkit.simulate.model import at
from incidentkit.simulate.world import World

JVM_STARTED = at("01:20:07")


def _pool(
    prefix: str, count: int, first: int, stacks: tuple[tuple[str, tuple[str, ...]], ...], shift: int
) -> list[tuple[str, int, bool, str, tuple[str, ...]]]:
    """Threads of one pool whose (state, frames) rotate through ``stacks`` between dumps."""
    return [
        (f"{prefix}-{n}", first + n, True, *stacks[(n + shift) % len(stacks)])
        for n in range(1, count + 1)
    ]


def dumps(world: World, times: tuple[int, int], stuck: list[int]) -> Iterator[t.Dump]:
    """Two dumps at ``times``; ``stuck`` pool threads sit in the socket read in both."""
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
            *[
                (f"tool-exec-{n}", 80 + n, True, "RUNNABLE", t.SOCKET_READ)
                if n in stuck
                else (f"tool-exec-{n}", 80 + n, True, "WAITING (parking)", t.PARKED_QUEUE)
                for n in range(1, 65)
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
