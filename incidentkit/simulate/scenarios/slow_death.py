"""``slow_death``: slow death. The heap only grows; four class histograms an hour apart.

A support JVM keeps a ``com.example.agent.RunnerCache``: a map from session id to a
``com.google.adk.runner.Runner`` with its agent tree, never evicted, and runs ADK's
``InMemorySessionService`` in production, so every session, its state and its events stay on
the heap. A per-invocation tracker map is not cleaned on the error path, so it grows by the
failed invocations (a class first seen in the second histogram). The on-call engineer's cron job
ran ``date '+%F %T'; jcmd 4711 GC.class_histogram`` at 00:05, 01:05, 02:05 and 03:05 UTC into
``histograms/histo-<UTC time>.txt``; the host runs in Europe/Berlin, so the time line is its
local wall clock (the manifest says ``timezone``), the file name UTC.

Beside the leak: JVM classes that do not move, classes that move up and down with traffic, an
export buffer that grows for two hours then drains (not a leak), a warm-up cache that empties,
and ``HeapWatch`` warnings of full GCs in the diagnostics log, more frequent by the hour.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from incidentkit.simulate.model import Bundle, LogRecord, WallClock, at, iso
from incidentkit.simulate.plan import Plan, Spec
from incidentkit.simulate.traffic import Background
from incidentkit.simulate.world import World

WINDOW = (at("00:00"), at("03:30"))
TAKEN = (at("00:05"), at("01:05"), at("02:05"), at("03:05"))
JVM_ZONE = "Europe/Berlin"  # UTC+01:00 that day: the time lines read 01:05 for 00:05
PID = 4711
JDK = "java.base@21.0.5"
FOLDER = "histograms"
BACKGROUND = 6
SAMPLE = 0.3
HEADER = (
    " num     #instances         #bytes  class name (module)",
    "-------------------------------------------------------",
)
"""What HotSpot prints above the rows (``KlassInfoHisto::print_histo_on``)."""

RUNNERS = "runners or agent trees held in an unbounded map"
SESSIONS = "the in-memory session service in a production profile"
INVOCATIONS = "per-invocation maps not cleaned on the error path"
"""What holds each growing class, as a correct verdict names it (the truth states the overview
flow's words itself: the simulator imports no flow)."""
ADVICE = (
    "Bound every cache and give it a metric: a maximum size and an expiry on every map that "
    "holds runners, agents, sessions or per-invocation state, and its size and evictions on a "
    "dashboard. Build one Runner per app (not per session or tenant); use a database-backed "
    "session service in production, never InMemorySessionService; remove per-invocation entries "
    "in a finally block, so the error path cleans up too."
)
"""The advice a correct verdict gives for classes that grow."""


@dataclass(frozen=True)
class Klass:
    """One class of the histograms: name, module (None: the class path), bytes per instance,
    instances in each histogram, and what it is in this incident."""

    name: str
    module: str | None
    size: int
    counts: tuple[int, ...]
    role: str  # leak, companion, payload (the leak's text), stable, wave, shrinks
    culprit: str | None = None

    def size_at(self, k: int) -> int:
        """The bytes of its instances in histogram ``k``."""
        return self.counts[k] * self.size


def _classes(rng: random.Random) -> list[Klass]:
    """The classes of the four histograms; every count is drawn from ``rng``."""
    sessions = [0]
    for _ in TAKEN:
        sessions.append(sessions[-1] + rng.randint(105_000, 125_000))
    held = tuple(sessions[1:])  # sessions whose runner and session are on the heap
    events = tuple(s * 7 + rng.randint(0, 400) for s in held)
    failed = (0, *(rng.randint(3_800, 4_400) * k for k in range(1, len(TAKEN))))

    def jitter(base: int, spread: int) -> tuple[int, ...]:
        """Up, down, up: counts that move with traffic but never grow hour after hour."""
        d = [rng.randint(spread // 2, spread) for _ in range(3)]
        return (base, base + d[0], base - d[1], base + d[2])

    def plus(base: int, per: tuple[int, ...], times: int = 1) -> tuple[int, ...]:
        return tuple(base + times * n for n in per)

    return [
        Klass("com.example.agent.RunnerCache$Entry", None, 32, held, "leak", RUNNERS),
        Klass("com.google.adk.runner.Runner", None, 40, held, "leak", RUNNERS),
        Klass("com.example.agent.SupportAgent", None, 176, held, "leak", RUNNERS),
        Klass("com.google.adk.sessions.Session", None, 48, held, "leak", SESSIONS),
        Klass("com.google.adk.sessions.State", None, 24, held, "leak", SESSIONS),
        Klass("com.google.adk.events.Event", None, 96, events, "leak", SESSIONS),
        Klass("com.google.adk.events.EventActions", None, 56, events, "leak", SESSIONS),
        Klass("com.example.agent.InvocationTracker$Entry", None, 40, failed, "leak", INVOCATIONS),
        Klass("com.google.adk.agents.InvocationContext", None, 88, failed, "leak", INVOCATIONS),
        Klass("com.google.genai.types.Content", None, 32, events, "companion", SESSIONS),
        Klass("com.google.genai.types.Part", None, 64, events, "companion", SESSIONS),
        Klass("java.util.HashMap$Node", JDK, 32, plus(61_204, held), "companion", SESSIONS),
        Klass(
            "java.util.concurrent.ConcurrentHashMap$Node",
            JDK,
            32,
            plus(18_377, held, 3),
            "companion",
            SESSIONS,
        ),
        Klass(
            "java.util.concurrent.ConcurrentHashMap",
            JDK,
            64,
            plus(412, held),
            "companion",
            SESSIONS,
        ),
        Klass("[B", JDK, 88, plus(52_113, events, 2), "payload"),
        Klass("java.lang.String", JDK, 24, plus(49_870, events, 2), "payload"),
        Klass("java.lang.Class", JDK, 112, (9_214,) * 4, "stable"),
        Klass("[Ljava.lang.Object;", JDK, 40, jitter(22_015, 900), "stable"),
        Klass("java.util.HashMap", JDK, 48, (7_730,) * 4, "stable"),
        Klass("java.lang.invoke.MemberName", JDK, 32, (3_312,) * 4, "stable"),
        Klass("java.util.ArrayList", JDK, 24, jitter(6_140, 300), "stable"),
        Klass("[I", JDK, 64, jitter(2_876, 200), "stable"),
        Klass("io.netty.buffer.PoolChunk", None, 96, (64,) * 4, "stable"),
        Klass("com.fasterxml.jackson.databind.ObjectMapper", None, 104, (3,) * 4, "stable"),
        Klass("com.google.adk.sessions.InMemorySessionService", None, 24, (1,) * 4, "stable"),
        Klass(
            "com.example.agent.ExportBuffer$Chunk", None, 1_040, (220, 5_310, 9_655, 262), "wave"
        ),
        Klass("com.example.agent.WarmupCache$Entry", None, 56, (5_000, 2_410, 600, 0), "shrinks"),
    ]


def render(classes: list[Klass], k: int, *, zone: str) -> str:
    """Histogram ``k`` as the cron job wrote it: the host's local time, then jcmd's output."""
    present = [c for c in classes if c.counts[k] > 0]
    ordered = sorted(present, key=lambda c: (-c.size_at(k), c.name))  # HotSpot: bytes, then name
    lines = [WallClock(zone).dump_time(TAKEN[k]), f"{PID}:", *HEADER]
    for rank, c in enumerate(ordered, start=1):
        name = c.name if c.module is None else f"{c.name} ({c.module})"
        lines.append(f"{rank:4d}: {c.counts[k]:13d}  {c.size_at(k):13d}  {name}")
    total = sum(c.counts[k] for c in ordered), sum(c.size_at(k) for c in ordered)
    lines.append(f"Total {total[0]:13d}  {total[1]:13d}")
    return "\n".join(lines) + "\n"


def file_of(k: int) -> str:
    """``histograms/histo-2026-11-29T00-05-00Z.txt``: the UTC time, with ``-`` for ``:``."""
    return f"{FOLDER}/histo-{iso(TAKEN[k])[:19].replace(':', '-')}Z.txt"


def _heap_watch(rng: random.Random, classes: list[Klass]) -> list[Bundle]:
    """Full-GC warnings of the app's heap watchdog from 01:20, closer together as the heap
    fills: the heap after each full GC is what the histograms hold (interpolated by the hour)
    plus a little that is not in them."""
    totals = [sum(c.size_at(k) for c in classes) for k in range(len(TAKEN))]
    slope = (totals[-1] - totals[-2]) / (TAKEN[-1] - TAKEN[-2])
    bundles = []
    t, gap = at("01:20"), 30 * 60_000
    while t < WINDOW[1] - 60_000:
        k = max(i for i in range(len(TAKEN)) if TAKEN[i] <= t)
        used = totals[k] + slope * (t - TAKEN[k])
        mb = round(used / 2**20) + rng.randint(180, 260)
        message = f"gc.full heapUsedMb={mb} heapMaxMb=4096 pauseMs={rng.randint(600, 1400)}"
        bundles.append(
            Bundle(start=t, logs=[LogRecord(t, "WARN", message, logger="c.e.agent.HeapWatch")])
        )
        gap = max(6 * 60_000, gap * 2 // 3)
        t += gap + rng.randint(0, 30_000)
    return bundles


def build(world: World, scale: int) -> Plan:
    # The histograms draw from a generator of their own, so the traffic stays as it was.
    rng = random.Random(repr(world.rng.getstate()))
    classes = _classes(rng)
    files = {file_of(k): render(classes, k, zone=JVM_ZONE) for k in range(len(TAKEN))}
    sections = [
        "[histograms]",
        f'paths = ["{FOLDER}/histo-*.txt"]',
        'format = "jcmd"',
        f'timezone = "{JVM_ZONE}"',
    ]
    background = Background(
        start=WINDOW[0] + 60_000,
        end=WINDOW[1] - 5 * 60_000,
        sessions=BACKGROUND * scale,
        span_sample=SAMPLE,
        apps=("support",),
        weights=(1,),
    )

    def expected(w: World, events_format: str) -> dict[str, Any]:
        return _expected(classes)

    return Plan(
        core=_heap_watch(rng, classes),
        background=background,
        expected=expected,
        as_of=WINDOW[1],
        files=files,
        sections=sections,
    )


def _expected(classes: list[Klass]) -> dict[str, Any]:
    last = len(TAKEN) - 1
    hours = (TAKEN[last] - TAKEN[0]) / 3_600_000
    growing = sorted(
        (c for c in classes if c.role in ("leak", "companion", "payload")),
        key=lambda c: (-(c.size_at(last) - c.size_at(0)), c.name),
    )
    clock = WallClock(JVM_ZONE)
    return {
        "histograms": [
            {
                "file": file_of(k),
                "histogram": file_of(k).rsplit("/", 1)[1],
                "taken_at": iso(TAKEN[k]),
                "local_time": clock.dump_time(TAKEN[k]),
                "classes": sum(1 for c in classes if c.counts[k] > 0),
                "total_instances": sum(c.counts[k] for c in classes),
                "total_bytes": sum(c.size_at(k) for c in classes),
            }
            for k in range(len(TAKEN))
        ],
        "rows": sum(1 for c in classes for n in c.counts if n > 0),
        "jvm_zone": JVM_ZONE,
        "pid": PID,
        "growing": [
            {
                "class": c.name,
                "module": c.module,
                "role": c.role,
                "culprit": c.culprit,
                "first_instances": c.counts[0],
                "last_instances": c.counts[last],
                "first_bytes": c.size_at(0),
                "last_bytes": c.size_at(last),
                "bytes_growth": c.size_at(last) - c.size_at(0),
                "bytes_per_hour": (c.size_at(last) - c.size_at(0)) / hours,
            }
            for c in growing
        ],
        "new_classes": sorted(c.name for c in classes if c.counts[0] == 0 and c.role == "leak"),
        "culprits": sorted({c.culprit for c in classes if c.culprit is not None}),
        "companions": "map nodes, maps and event content grow with whatever holds them; a "
        "histogram cannot tell which map holds them, so they are named after the culprit of "
        "the largest growing class that names one",
        "not_growing": {
            role: sorted(c.name for c in classes if c.role == role)
            for role in ("stable", "wave", "shrinks")
        },
        "grows_then_shrinks": [c.name for c in classes if c.role == "wave"],
        "advice": ADVICE,
    }


SPEC = Spec(
    "slow_death",
    "Slow death: an unbounded runner cache and in-memory sessions, the heap grows by the hour",
    WINDOW,
    build,
    zone=JVM_ZONE,
)
