"""``vanished_state``: the four causes of lost state, a present, an overwritten, a removed key.

One shop session: a ``temp:`` key, a key written only in partial (streamed) events, a direct
``session.state()`` mutation (no delta anywhere), two concurrent invocations racing on ``cart``,
an address that is present (the agent reads it under the wrong name), a coupon overwritten by
the checkout agent, and a gift note removed.
"""

from __future__ import annotations

from typing import Any

from incidentkit.simulate import pyfmt
from incidentkit.simulate.model import REMOVED, Bundle, Event, at, iso
from incidentkit.simulate.plan import Plan, Spec
from incidentkit.simulate.script import Invocation
from incidentkit.simulate.traffic import Background
from incidentkit.simulate.world import Session, World

WINDOW = (at("14:00"), at("14:45"))
SESSIONS = 20
ROOT = "shop_assistant"
ADDRESS = "Rua Augusta 100, 1100-053 Lisboa"


def _turn(world: World, s: Session, start: int, owner: str, text: str) -> Invocation:
    """The shopper's turn at ``start``, run by ``owner``."""
    return Invocation(world, s, start=start, root=ROOT, owner=owner, text=text)


def _first(world: World, s: Session) -> Bundle:
    inv = _turn(
        world,
        s,
        at("14:05:00.120"),
        "worker-1",
        "I want the blue kettle, shipped to Rua Augusta 100, Lisboa. Gift note: happy birthday!",
    )
    root = inv.agent(ROOT)
    root.tool(
        "set_shipping_address",
        {"address": ADDRESS},
        {"ok": True},
        state_delta={"shipping_address": ADDRESS},
    )
    cart = root.transfer("cart_agent")
    cart.tool(
        "add_to_cart", {"sku": "kettle-blue"}, {"ok": True}, state_delta={"cart": ["kettle-blue"]}
    )
    cart.tool(
        "quote_shipping",
        {"country": "PT"},
        {"eur": 4.9},
        state_delta={"temp:shipping_quote": {"eur": 4.9, "carrier": "CTT"}},
    )
    cart.tool(
        "add_gift_note",
        {"note": "Happy birthday!"},
        {"ok": True},
        state_delta={"gift_note": "Happy birthday!"},
    )
    cart.tool(
        "apply_coupon",
        {"code": "WELCOME10"},
        {"ok": True, "discount": 0.1},
        state_delta={"coupon_code": "WELCOME10"},
    )
    # lookup_loyalty sets session.state().put("loyalty_tier", ...) directly: no delta at all.
    cart.tool("lookup_loyalty", {"customer": s.user}, {"tier": "gold"})
    cart.say(
        "Your blue kettle is in the cart with a gift note; shipping is 4.90 EUR.",
        partials=[{"draft_reply": "Your blue kettle is in the cart"}, {}],
    )
    return inv.finish()


def _second(world: World, s: Session) -> Bundle:
    inv = _turn(
        world,
        s,
        at("14:12:30.480"),
        "worker-2",
        "Actually drop the gift note, use SPRING5 and check out.",
    )
    checkout = inv.agent(ROOT).transfer("checkout_agent")
    checkout.tool(
        "apply_coupon",
        {"code": "SPRING5"},
        {"ok": True, "discount": 0.05},
        state_delta={"coupon_code": "SPRING5"},
    )
    checkout.tool("remove_gift_note", {}, {"ok": True}, state_delta={"gift_note": REMOVED})
    checkout.say("I could not find a shipping quote; shall I request one again?")
    return inv.finish()


def _racer(world: World, s: Session, start: int, sku: str, owner: str) -> Bundle:
    """One tab's turn; fixed model and tool times so the two tabs interleave the same way."""
    inv = _turn(world, s, start, owner, f"Add {sku} to my cart.")
    cart = inv.agent(ROOT).transfer("cart_agent", ms=820)
    cart.tool(
        "add_to_cart",
        {"sku": sku},
        {"ok": True},
        state_delta={"cart": ["kettle-blue", sku]},
        llm_ms=930,
        tool_ms=140,
    )
    cart.say(f"Added {sku}.", ms=760)
    return inv.finish()


def _race(world: World, s: Session) -> list[Bundle]:
    """Two tabs submit at once; both start from cart = [kettle-blue]; the later write wins."""
    first = _racer(world, s, at("14:20:00.000"), "mug-red", "worker-1")
    taken = {e.ts for e in first.events}
    state = world.rng.getstate()
    for offset in range(350, 450):
        world.rng.setstate(state)
        second = _racer(world, s, at("14:20:00.000") + offset, "towel-tea", "worker-2")
        writes = [e.ts for b in (first, second) for e in b.events if "cart" in e.state_delta]
        if not taken & {e.ts for e in second.events} and writes[0] < writes[1]:
            return [first, second]
    raise AssertionError("no collision-free race found")


def _last(world: World, s: Session) -> Bundle:
    inv = _turn(
        world,
        s,
        at("14:31:10.900"),
        "worker-1",
        "What is in my cart, what is my loyalty tier, and where will it ship?",
    )
    inv.agent(ROOT).say(
        "Your cart has the blue kettle and a tea towel. I don't see a loyalty tier or a "
        "shipping address on file."
    )
    return inv.finish()


DIAGNOSES = {
    "temp:shipping_quote": ("temp_prefix", "temp: keys are never applied to the session state"),
    "draft_reply": ("partial_only", "written only by partial (streamed) events, never applied"),
    "loyalty_tier": ("never_written", "a tool mutated session.state() directly: no delta"),
    "cart": ("raced", "two overlapping invocations of the session wrote it; the later won"),
    "shipping_address": ("present", "durable and unchanged: the bug is on the read side"),
    "coupon_code": ("overwritten", "a later delta by another agent replaced it"),
    "gift_note": ("removed", "a later delta removed it"),
}


def build(world: World, scale: int) -> Plan:
    world.descriptions.update(
        {
            ROOT: "Helps shoppers; hands carts to cart_agent and orders to checkout_agent.",
            "cart_agent": "Manages the shopping cart.",
            "checkout_agent": "Checks out the cart.",
        }
    )
    s = world.session("shop", "u-shopper-7")
    core = [_first(world, s), _second(world, s), *_race(world, s), _last(world, s)]
    background = Background(
        start=at("14:00"), end=at("14:44"), sessions=SESSIONS * scale, span_sample=0.35
    )

    def expected(w: World, events_format: str) -> dict[str, Any]:
        keys = _keys(core, python=events_format == "adk-python")
        return {"session_id": s.id, "app_name": s.app, "user_id": s.user, "keys": keys}

    return Plan(
        core=core,
        background=background,
        expected=expected,
        as_of=WINDOW[1],
        sections=[
            "[apps.shop]",  # each of the shop's agents may give a run's final answer
            'terminal_agent = ["shop_assistant", "cart_agent", "checkout_agent"]',
            "key_templates = {}",
        ],
    )


PYTHON = {
    "temp:shipping_quote": "ADK Python trims temp: keys before storing: no write is stored",
    "draft_reply": "ADK Python stores no partial event: the key is absent everywhere",
    "gift_note": "ADK Python has no deletion sentinel: the removal is stored as null",
}


def _keys(core: list[Bundle], *, python: bool) -> list[dict[str, Any]]:
    """Per key: diagnosis and the writes the stored log holds (per ADK's storage rules)."""
    events: list[Event] = sorted((e for b in core for e in b.events), key=lambda e: e.ts)
    if python:
        events = [e for e in events if pyfmt.stored(e)]
    spans = {b.events[0].invocation_id: (b.start, max(e.ts for e in b.events)) for b in core}
    out = []
    for key, (diagnosis, why) in DIAGNOSES.items():
        writes = [
            {
                "invocation_id": e.invocation_id,
                "author": e.author,
                "ts": iso(e.ts),
                "value": None if e.state_delta[key] is REMOVED else e.state_delta[key],
                "removed": e.state_delta[key] is REMOVED,
                "partial": bool(e.partial),
            }
            for e in events
            if key in e.state_delta and not (python and key.startswith("temp:"))
        ]
        if python and key == "draft_reply":
            diagnosis, why = "never_written", PYTHON[key]
        elif python and key in PYTHON:
            why = f"{why}; {PYTHON[key]}"
        entry: dict[str, Any] = {"key": key, "diagnosis": diagnosis, "why": why, "writes": writes}
        durable = [w for w in writes if not w["partial"]]
        if diagnosis == "overwritten":
            entry["overwritten_by"] = {k: durable[-1][k] for k in ("author", "invocation_id", "ts")}
        if diagnosis == "removed":
            entry["removed_by"] = {k: durable[-1][k] for k in ("author", "invocation_id", "ts")}
        if diagnosis == "raced":
            racers = sorted({str(w["invocation_id"]) for w in durable[-2:]})
            entry["raced_invocations"] = racers
            entry["overlap"] = [[iso(spans[r][0]), iso(spans[r][1])] for r in racers]
        entry["final_value"] = durable[-1]["value"] if durable else None
        out.append(entry)
    return out


SPEC = Spec(
    "vanished_state",
    "State that does not stick: temp:, partial-only, direct mutation, a race, and controls",
    WINDOW,
    build,
)
