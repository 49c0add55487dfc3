"""Background traffic: healthy sessions of several apps, streamed in start-time order.

Apps: ``support`` (one agent, order lookups), ``travel`` (a planner transferring to a
specialist), ``invoicing`` (a sequential draft → billing → notify flow with a journaled
``sendInvoice``) and ``expenses`` (a long-running manager approval, resumed minutes later).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from incidentkit.simulate import invoicing as invoice_flow
from incidentkit.simulate.model import Bundle, LedgerRow, Part
from incidentkit.simulate.script import Invocation
from incidentkit.simulate.world import Session, World

SUPPORT_ROUNDS = (14, 46, 20, 8, 4, 3, 2, 1, 2)
"""Weights of 0..8 order lookups in a support turn (model calls = lookups + 1)."""
DESCRIPTIONS = {
    "support_agent": "Answers questions about orders.",
    "travel_planner": "Plans trips and hands over to a specialist.",
    "flights_agent": "Finds flights.",
    "hotels_agent": "Finds hotels.",
    "expense_agent": "Files expense reports and asks for approval.",
}
TERMINAL_AGENTS = {
    "support": ("support_agent",),
    "travel": ("flights_agent", "hotels_agent"),
    "invoicing": ("notify_agent",),
    "expenses": ("expense_agent",),
}
"""Per app, the agents whose final response ends a run (for ACTUALLY_DONE checks)."""
APP_KEY_TEMPLATES: dict[str, dict[str, str]] = {
    "support": {},
    "travel": {},
    "invoicing": dict(invoice_flow.KEY_TEMPLATES),
    "expenses": {},
}
"""Per app, the journal key template of each tool that journals by business key."""
APP_SETTINGS: dict[str, dict[str, int | list[str]]] = {
    "support": {"client_timeout_s": 60, "loop_exit_keys": ["review:approved"]}
}
"""Other ``[apps.<app>]`` settings the simulated incidents assume: the 60 s client
timeout, and the state key that ends the review loop (the runaway scenario's loop agent). No
``max_llm_calls``: the limit error names it."""
APPS = ("support", "travel", "invoicing", "expenses")
APP_WEIGHTS = (5, 2, 2, 1)


@dataclass
class Live:
    """A background session between invocations."""

    session: Session
    left: int
    order: str | None = None
    """The order a support session asks about."""
    approval: tuple[str, LedgerRow] | None = None
    """A filed expense report's wait for its manager: the call's id and the paused run."""


@dataclass(frozen=True)
class Background:
    """How much healthy traffic to generate, and when."""

    start: int
    end: int
    sessions: int
    owners: tuple[str, ...] = ("worker-1", "worker-2")
    apps: tuple[str, ...] = APPS
    weights: tuple[int, ...] = APP_WEIGHTS
    max_turns: int = 3
    span_sample: float = 1.0
    """Tail sampling: the share of (healthy) traces the collector keeps."""


def _turn(world: World, live: Live, start: int, owner: str, root: str, text: str) -> Invocation:
    """A user's message to ``root`` in the live session."""
    return Invocation(world, live.session, start=start, root=root, owner=owner, text=text)


def support(world: World, live: Live, start: int, owner: str) -> Bundle:
    rng = world.rng
    drawn = f"ORD-{rng.randrange(10_000, 99_999)}"  # every turn draws one; the first is kept
    order = live.order = live.order or drawn
    inv = _turn(world, live, start, owner, "support_agent", f"Where is my order {order}?")
    agent = inv.agent("support_agent")
    rounds = rng.choices(range(len(SUPPORT_ROUNDS)), SUPPORT_ROUNDS)[0]
    for i in range(rounds):
        lookup = order if i == 0 else f"ORD-{rng.randrange(10_000, 99_999)}"
        agent.tool(
            "order_lookup",
            {"order_id": lookup},
            {"status": rng.choice(("shipped", "packed", "delivered")), "order_id": lookup},
            state_delta={"last_order_id": lookup},
        )
    delta = {"user:preferred_language": "en"} if rng.random() < 0.2 else None
    agent.say(f"Your order {order} is on its way.", state_delta=delta)
    return inv.finish()


def travel(world: World, live: Live, start: int, owner: str) -> Bundle:
    rng = world.rng
    target = rng.choice(("flights_agent", "hotels_agent"))
    inv = _turn(
        world, live, start, owner, "travel_planner", "Find me something for Lisbon next week."
    )
    planner = inv.agent("travel_planner")
    specialist = planner.transfer(target)
    tool = "search_flights" if target == "flights_agent" else "search_hotels"
    specialist.tool(
        tool, {"city": "LIS"}, {"results": world.between(1, 9)}, state_delta={"trip:city": "LIS"}
    )
    specialist.say("Here are the best options I found.")
    return inv.finish()


def invoicing(world: World, live: Live, start: int, owner: str) -> Bundle:
    return invoice_flow.full_run(world, live.session, start, owner, world.billing).finish()


def expenses(world: World, live: Live, start: int, owner: str) -> Bundle:
    """A report paused on a manager's approval; the approval resumes the same ledger run."""
    pending, live.approval = live.approval, None
    if pending is None:
        report = f"EXP-{world.rng.randrange(1000, 9999)}"
        inv = _turn(
            world, live, start, owner, "expense_agent", f"Please file expense report {report}."
        )
        agent = inv.agent("expense_agent")
        call = agent.request("request_manager_approval", {"reportId": report}, long_running=True)
        bundle = inv.finish()
        live.approval = (call.call_id, bundle.ledger.pop())
        live.left = max(live.left, 2)
        return bundle
    call_id, paused = pending
    reply = Part(
        "response",
        call_id=call_id,
        name="request_manager_approval",
        payload={"approved": True},
    )
    inv = Invocation(
        world,
        live.session,
        start=start,
        root="expense_agent",
        owner=owner,
        parts=[reply],
        run=(paused.run_id, paused.started_at, paused.request),
    )
    inv.agent("expense_agent").say("Your manager approved the report; it is filed.")
    return inv.finish()


PROFILES: dict[str, Callable[[World, Live, int, str], Bundle]] = {
    "support": support,
    "travel": travel,
    "invoicing": invoicing,
    "expenses": expenses,
}


def stream(world: World, bg: Background) -> Iterator[Bundle]:
    """Yield background invocations in start order; sessions interleave in time."""
    rng = world.rng
    world.descriptions.update(DESCRIPTIONS)
    invoice_flow.register(world)
    heap: list[tuple[int, int, Live]] = []
    span = bg.end - bg.start
    for seq in range(bg.sessions):
        app = rng.choices(bg.apps, bg.weights)[0]
        live = Live(world.session(app), rng.randint(1, bg.max_turns))
        heapq.heappush(heap, (bg.start + 1_000 + rng.randrange(int(span * 0.85)), seq, live))
    seq = bg.sessions
    pending: list[Bundle] = []
    while heap:
        start, _, live = heapq.heappop(heap)
        world.tracing = rng.random() < bg.span_sample
        bundle = PROFILES[live.session.app](world, live, start, rng.choice(bg.owners))
        world.tracing = True
        yield bundle
        live.left -= 1
        gap = (
            world.between(120_000, 900_000)
            if live.approval is not None
            else world.between(8_000, 90_000)
        )
        next_start = bundle.start + (max(e.ts for e in bundle.events) - bundle.start) + gap
        if live.left > 0 and next_start < bg.end - 60_000:
            heapq.heappush(heap, (next_start, seq, live))
            seq += 1
        elif live.approval is not None:
            _, row = live.approval
            pending.append(Bundle(start=bg.end, ledger=[row]))
    yield from pending
