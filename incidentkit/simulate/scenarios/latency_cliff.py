"""``latency_cliff``: the 03:10 cliff. The order service stalls; no read timeout.

Support runs call ``order_lookup`` on a bounded pool of 64 ``tool-exec`` threads. From 03:10 every
read stalls 48-56 s (the order service sends headers, then waits on a database failover) and
about 4 % never return. A burst of order questions from 03:11:17 saturates the pool, so two
thread dumps ten seconds apart show all 64 threads parked in the same socket read; p95 goes from
about 4 s to about 60 s while nothing fails. Traces are tail-sampled (incomplete or errored
traces kept, 10 % of the rest). Traffic is kept just large enough for these facts (small pack).

Three harder cases come with it. A listener thread blocks in a socket read by design, the same
in both dumps. Three support turns ask ``kb_search`` around the dumps; its ``kb-exec`` threads
read from the knowledge base in one dump only (slow, not stuck). The JVM host runs in
Europe/Berlin: the log and the dump headers are on its wall clock (UTC+01:00 that day).
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass
from typing import Any

from incidentkit.simulate.model import Bundle, at, iso
from incidentkit.simulate.plan import Plan, Spec
from incidentkit.simulate.scenarios.cliff_threads import LISTENERS, KbRead, dumps
from incidentkit.simulate.script import Invocation
from incidentkit.simulate.threads import Dump
from incidentkit.simulate.traffic import Background
from incidentkit.simulate.truth import percentile
from incidentkit.simulate.world import World

CLIFF = at("03:10:00")
DUMP_GAP = 10_000
DUMPS_FROM = at("03:11:58")
STALL_MS = (48_000, 56_000)
WINDOW = (at("02:55"), at("03:16"))
POOL = 64
TIMEOUT_MS = 60_000
STUCK_APP_FRAME = "com.example.support.tools.OrderLookupClient.fetch(OrderLookupClient.java:58)"
JVM_ZONE = "Europe/Berlin"  # UTC+01:00 that day: the log and dump headers read 04:10 for 03:10
SAMPLE = 0.1
BACKGROUND = 3
ARRIVALS = (  # (from, to, mean gap ms) for support turns
    (at("03:05:00"), at("03:09:50"), 30_000),  # ends before 03:10: no read straddles the cliff
    (CLIFF, at("03:11:15"), 8_000),
    (at("03:11:17"), at("03:11:58"), 625),  # a burst of order questions fills the pool
    (at("03:12:05"), at("03:13:00"), 20_000),
)


@dataclass
class Turn:
    """One planned support turn; ``read`` is None when it asks no order lookup."""

    start: int
    llm1: int
    read: tuple[int, int | None] | None = None  # (start, end or None = never)
    thread: int = 0
    order: str = ""
    hung: bool = False


def _plan(world: World) -> list[Turn]:
    rng = world.rng
    turns: list[Turn] = []
    for begin, end, gap in ARRIVALS:
        t = begin + rng.randint(0, gap)
        while t < end:
            turns.append(
                Turn(t, rng.randint(900, 2000), order=f"ORD-{rng.randrange(10_000, 99_999)}")
            )
            t += rng.randint(gap * 17 // 20, gap * 23 // 20)
    after = [t for t in turns if t.start >= CLIFF]
    lookups = [t for t in turns if t.start >= CLIFF or rng.random() < 0.85]
    early = [t for t in lookups if CLIFF <= t.start < DUMPS_FROM - 5_000]
    for turn in rng.sample(early, round(0.04 * len(after))):
        turn.hung = True
    free = [(0, n) for n in range(1, POOL + 1)]
    for turn in sorted(lookups, key=lambda t: t.start + t.llm1):
        asked = turn.start + turn.llm1 + 8
        ready, thread = heapq.heappop(free)
        begin_read = max(asked, ready)
        if turn.hung:
            end_read: int | None = None
        elif begin_read < CLIFF:
            end_read = begin_read + rng.randint(200, 700)
        else:
            end_read = begin_read + rng.randint(*STALL_MS)
        turn.read, turn.thread = (begin_read, end_read), thread
        heapq.heappush(free, (end_read if end_read is not None else 2**62, thread))
    return turns


def _kb_reads(rng: random.Random, times: tuple[int, int]) -> list[KbRead]:
    """The ``kb_search`` reads around the dumps: ``kb-exec-1`` reads in dump 1 and is idle in
    dump 2, ``kb-exec-2`` reads in dump 1 and parses the reply in dump 2, ``kb-exec-3`` is
    idle in dump 1 and reads in dump 2; ``kb-exec-4`` is idle in both."""
    first, second = times
    one = first + rng.randint(1500, 3000)
    three = second + rng.randint(1000, 2500)
    return [
        KbRead(1, first - rng.randint(1500, 3000), one, one + rng.randint(20, 60)),
        KbRead(
            2,
            first - rng.randint(300, 900),
            second - rng.randint(10, 30),
            second + rng.randint(10, 40),
        ),
        KbRead(3, second - rng.randint(2000, 4000), three, three + rng.randint(20, 60)),
    ]


def _run_kb(world: World, read: KbRead) -> Bundle:
    """A support turn whose ``kb_search`` call is ``read``; it answers soon after."""
    rng = world.rng
    llm1 = rng.randint(900, 2000)
    s = world.session("support")
    inv = Invocation(
        world,
        s,
        start=read.start - llm1 - 8,
        root="support_agent",
        owner="support-7d9f-1",
        text="How do I return a damaged item?",
    )
    agent = inv.agent("support_agent")
    call = agent.request("kb_search", {"query": "return damaged item"}, ms=llm1)
    agent.respond(
        call,
        {"articles": [{"id": f"KB-{rng.randrange(1000, 9999)}", "title": "Returns and refunds"}]},
        ms=max(1, read.parsed - inv.now),
    )
    agent.say("You can return it within 30 days; see Returns and refunds.", ms=world.llm_ms())
    bundle = inv.finish()
    bundle.spans = []  # complete and ok: among the 90 % the tail sampler drops
    return bundle


def _run(world: World, turn: Turn) -> Bundle:
    s = world.session("support")
    inv = Invocation(
        world,
        s,
        start=turn.start,
        root="support_agent",
        owner="support-7d9f-1",
        text=f"Where is my order {turn.order}?",
    )
    agent = inv.agent("support_agent")
    if turn.read is None:
        agent.say("You can change the delivery address in your account settings.", ms=turn.llm1)
        bundle = inv.finish()
    else:
        call = agent.request("order_lookup", {"order_id": turn.order}, ms=turn.llm1)
        read_end = turn.read[1]
        if read_end is None:
            agent.start_tool(call)
            return inv.hang(alive_until=WINDOW[1] - 1)
        agent.respond(
            call,
            {"status": "shipped", "order_id": turn.order},
            ms=max(1, read_end - inv.now),
            state_delta={"last_order_id": turn.order},
        )
        agent.say(f"Your order {turn.order} has shipped.", ms=world.llm_ms(1000, 2200))
        bundle = inv.finish()
    if world.rng.random() >= SAMPLE:
        bundle.spans = []
    return bundle


def build(world: World, scale: int) -> Plan:
    world.descriptions["support_agent"] = "Answers questions about orders."
    turns = _plan(world)
    orders = [_run(world, turn) for turn in turns]
    times, stuck = _dump_times(turns)
    # The kb turns draw from a generator of their own, so every other draw stays as it was.
    side = World(random.Random(repr(world.rng.getstate())), descriptions=world.descriptions)
    kb = _kb_reads(side.rng, times)
    core = orders + [_run_kb(side, read) for read in kb]
    world.stats += side.stats
    background = Background(
        start=at("02:55"),
        end=at("03:15"),
        sessions=BACKGROUND * scale,
        span_sample=SAMPLE,
        apps=("travel", "invoicing", "expenses"),
        weights=(2, 2, 1),
    )
    taken = list(dumps(world, times, stuck, kb))

    def expected(w: World, events_format: str) -> dict[str, Any]:
        return _expected(w, orders, turns, stuck, taken, kb)

    return Plan(core=core, background=background, expected=expected, dumps=taken, as_of=WINDOW[1])


def _busy(turns: list[Turn], at_ms: int) -> set[int]:
    """Pool threads inside an order-service read at ``at_ms``."""
    return {
        t.thread
        for t in turns
        if t.read and t.read[0] <= at_ms and (t.read[1] is None or t.read[1] > at_ms)
    }


def _dump_times(turns: list[Turn]) -> tuple[tuple[int, int], list[int]]:
    """The on-call engineer's two dumps: the first whole second (from 03:11:58) at which every
    pool thread is in the read, and ten seconds later."""
    for first in range(DUMPS_FROM, DUMPS_FROM + 120_000, 1000):
        stuck = _busy(turns, first) & _busy(turns, first + DUMP_GAP)
        if len(stuck) == POOL:
            return (first, first + DUMP_GAP), sorted(stuck)
    raise AssertionError("the tool pool never saturated; tune the latency_cliff arrivals")


def _expected(
    world: World,
    orders: list[Bundle],
    turns: list[Turn],
    stuck: list[int],
    taken: list[Dump],
    kb: list[KbRead],
) -> dict[str, Any]:
    stats = [s for s in world.stats if s.app == "support"]

    def ms(before: bool) -> list[float]:
        return [
            float(s.end - s.start)
            for s in stats
            if s.end is not None and (s.start < CLIFF) == before
        ]

    since = [s for s in stats if s.start >= CLIFF]
    opened = sorted(s.invocation_id for s in since if s.end is None)
    errors = {
        b: sum(1 for s in stats if s.outcome == "error" and (s.start < CLIFF) == b)
        for b in (True, False)
    }
    hung = [b for b, t in zip(orders, turns, strict=True) if t.hung]
    times = [d.taken for d in taken]
    slow_once = sorted(
        {r.thread for r in kb if any(r.start <= ms < r.end for ms in times)}
        - {r.thread for r in kb if all(r.start <= ms < r.end for ms in times)}
    )
    return {
        "app_name": "support",
        "cliff": iso(CLIFF),
        "client_timeout_ms": TIMEOUT_MS,
        "latency_source": "diagnostics run.start/run.end ms of support runs, by start time",
        "p95_before_ms": percentile(ms(True), 95),
        "p95_after_ms": percentile(ms(False), 95),
        "p50_before_ms": percentile(ms(True), 50),
        "p50_after_ms": percentile(ms(False), 50),
        "runs_before": sum(1 for s in stats if s.start < CLIFF),
        "runs_since_cliff": len(since),
        "open_since_cliff": len(opened),
        "open_share": len(opened) / len(since),
        "open_invocations": opened,
        "open_last_call": {
            "tool": "order_lookup",
            "answered": False,
            "call_ids": sorted(b.events[-1].parts[0].call_id for b in hung),
        },
        "error_rate_before": errors[True] / max(1, sum(1 for s in stats if s.start < CLIFF)),
        "error_rate_after": errors[False] / max(1, len(since)),
        "threads": {
            "dumps": [{"file": d.file, "taken_at": iso(d.taken)} for d in taken],
            "stuck_count": len(stuck),
            "stuck_threads": [f"tool-exec-{n}" for n in stuck],
            "stuck_state": "RUNNABLE",
            "stuck_top_frame": "sun.nio.ch.Net.poll(java.base@21.0.5/Native Method)",
            "stuck_tool_frame": STUCK_APP_FRAME,
            "pool_size": POOL,
            "stuck_app_frame": STUCK_APP_FRAME,
            "client_class": STUCK_APP_FRAME.split("(")[0].rsplit(".", 1)[0],
            "idle_by_design": [
                {"thread": x.name, "app_frame": x.app_frame, "reason": x.reason} for x in LISTENERS
            ],
            "not_stuck": [f"kb-exec-{n}" for n in slow_once],
            "not_stuck_tool": "kb_search",
            "jvm_zone": JVM_ZONE,
        },
        "spans_sampling": f"tail: incomplete or errored traces kept, {SAMPLE:.0%} of the rest",
    }


SPEC = Spec(
    "latency_cliff",
    "The 03:10 latency cliff: order lookups stall, 64 threads stuck, nothing fails",
    WINDOW,
    build,
    zone=JVM_ZONE,
)
