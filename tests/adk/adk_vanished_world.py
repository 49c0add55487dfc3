"""A world of vanished session state written by the real google-adk, for the vanished-state flow.

``build_vanished_world`` runs one app, ``ik_vanished``, through ADK's own ``Runner`` over
``SqliteSessionService`` or ``DatabaseSessionService`` (SQLite or PostgreSQL) and writes what an
incident of it leaves behind: the session store, an ``evidence.toml`` (``[events]`` in format
``adk-python-db`` and an empty ``[apps.ik_vanished]`` profile) and the main session as
``adk run --save_session`` writes it (``adk_world.save_session_json``).

The app: ``shop_agent`` (tools below) with the sub-agent ``promo_agent`` (tool ``apply_promo``).
Every model is a ``PlannedLlm`` of ``adk_runaway_world``; :class:`MessageConductor` routes each
call to the plan of the user message it answers, so two invocations can run at once.

The main session is created with ``state={"preferred_language": "pt", "user:plan": "pro"}``
(no event carries either key), then each invocation makes one key vanish, or not (:func:`plan`):

- ``set_shipping_address`` writes ``shipping_address``, never changed again: PRESENT;
- ``quote_shipping`` writes ``temp:quote``, which ADK trims from the stored delta: TEMP_PREFIX;
- ``check_loyalty``'s ``after_tool_callback`` sets ``loyalty_tier`` on ``session.state``
  itself, past the delta; ``loyalty_discount`` reads it back in the same invocation:
  NEVER_DURABLE (cause ``direct_mutation``);
- ``apply_coupon`` writes ``coupon_code`` and ``add_gift_note`` writes ``gift_note``; a later
  invocation's ``remove_gift_note`` sets ``gift_note`` to ``None`` (ADK Python's only way to
  drop a key: ``State`` has no deletion), which the store keeps as a JSON null: REMOVED; and
  ``promo_agent``'s ``apply_promo`` overwrites ``coupon_code`` in the main session's last
  invocation: OVERWRITTEN;
- ``set_banner`` writes ``app:banner`` (PRESENT) and ``set_member_tier`` writes ``user:tier``,
  which a second session of the same user overwrites later: OVERWRITTEN (user scope is shared,
  so the main session's events alone do not show it);
- two invocations sent together to the main session both load the same stored revision
  (:class:`Rendezvous`, through ADK's plugin API), both meaning to write ``cart``; ADK appends
  the first and rejects the second with ``StaleSessionError`` at its first append, so nothing
  of it is stored: ``cart`` holds one write (PRESENT; RACED only if ADK stored both).

:class:`VanishedWorld` holds where it all is and, per key, the truth (:class:`KeyTruth`).
"""

from __future__ import annotations

import asyncio
import enum
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from google.adk.agents import LlmAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.apps.app import App
from google.adk.errors import StaleSessionError
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions import DatabaseSessionService, Session
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from .adk_runaway_world import Conductor, PlannedLlm, Step
from .adk_world import (
    call_part,
    save_session_json,
    session_service,
    stored_event_rows,
    text_part,
    user_message,
)

APP = "ik_vanished"
USER = "user-23"
ROOT = "shop_agent"
PROMO = "promo_agent"
STORES = ("sqlite", "database", "postgresql")
"""``SqliteSessionService``; ``DatabaseSessionService`` on a SQLite file; on PostgreSQL."""
INITIAL_STATE: Mapping[str, Any] = {"preferred_language": "pt", "user:plan": "pro"}
"""The main session's ``create_session`` state: no event delta carries these keys."""
ADDRESS = "Rua Augusta 10, 1100-053 Lisboa"
QUOTE: Mapping[str, Any] = {"weight_kg": 2, "price_eur": 7.5, "carrier": "CTT"}
LOYALTY_TIER = "gold"
GIFT_NOTE = "Happy birthday, Ana!"
BANNER = "Spring sale: 20% off all mugs"
FIRST_TIER = "silver"
SECOND_TIER = "platinum"
FIRST_COUPON = "WELCOME10"
SECOND_COUPON = "SPRING5"
WINNER_ITEM = "kettle"
LOSER_ITEM = "teapot"
DIRECT_PATH = "tool_context.session.state"
"""Where the callback writes ``loyalty_tier``: ``Context.session`` is
``_invocation_context.session``, whose ``state`` dict ``State`` wraps but does not track."""


class Verdict(enum.StrEnum):
    """What became of a state key."""

    TEMP_PREFIX = "TEMP_PREFIX"
    NEVER_DURABLE = "NEVER_DURABLE"
    OVERWRITTEN = "OVERWRITTEN"
    RACED = "RACED"
    REMOVED = "REMOVED"
    PRESENT = "PRESENT"


# --- tools and the callback --------------------------------------------------------------------


def set_shipping_address(address: str, tool_context: ToolContext) -> dict[str, str]:
    """Remember where the order ships."""
    tool_context.state["shipping_address"] = address
    return {"shipping_address": address}


def quote_shipping(weight_kg: float, tool_context: ToolContext) -> dict[str, Any]:
    """Quote the shipping price of a parcel; the quote lives for this invocation only."""
    quote = dict(QUOTE, weight_kg=weight_kg)
    tool_context.state["temp:quote"] = quote
    return quote


def check_loyalty(tool_context: ToolContext) -> dict[str, Any]:
    """Look the customer up in the loyalty programme."""
    return {"customer": USER, "orders": 12}


def loyalty_discount(tool_context: ToolContext) -> dict[str, Any]:
    """The discount the customer's loyalty tier earns."""
    tier = tool_context.state.get("loyalty_tier")
    return {"tier": tier, "discount_pct": 10 if tier == LOYALTY_TIER else 0}


def remember_tier(
    tool: BaseTool, args: dict[str, Any], tool_context: ToolContext, tool_response: dict[str, Any]
) -> dict[str, Any] | None:
    """``after_tool_callback``: after ``check_loyalty``, set the tier on the session itself."""
    if tool.name == "check_loyalty":
        tool_context.session.state["loyalty_tier"] = LOYALTY_TIER  # no delta: never stored
    return None


def apply_coupon(code: str, tool_context: ToolContext) -> dict[str, str]:
    """Apply a coupon to the order."""
    tool_context.state["coupon_code"] = code
    return {"coupon_code": code}


def add_gift_note(note: str, tool_context: ToolContext) -> dict[str, str]:
    """Add a gift note to the order."""
    tool_context.state["gift_note"] = note
    return {"gift_note": note}


def remove_gift_note(tool_context: ToolContext) -> dict[str, bool]:
    """Remove the order's gift note (ADK Python's State has no deletion: set it to None)."""
    tool_context.state["gift_note"] = None
    return {"removed": True}


def set_banner(text: str, tool_context: ToolContext) -> dict[str, str]:
    """Set the banner every user of the shop sees."""
    tool_context.state["app:banner"] = text
    return {"banner": text}


def set_member_tier(tier: str, tool_context: ToolContext) -> dict[str, str]:
    """Set the customer's membership tier (for all their sessions)."""
    tool_context.state["user:tier"] = tier
    return {"tier": tier}


def add_to_cart(item: str, tool_context: ToolContext) -> dict[str, list[str]]:
    """Add an item to the cart (read, append, write back)."""
    cart = [*(tool_context.state.get("cart") or []), item]
    tool_context.state["cart"] = cart
    return {"cart": cart}


def apply_promo(code: str, tool_context: ToolContext) -> dict[str, str]:
    """Apply the current promotion's code, replacing any coupon."""
    tool_context.state["coupon_code"] = code
    return {"coupon_code": code}


# --- the plan, and the model calls routed to it -----------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One planned invocation: which session (1 main, 2 second), the user's message and the
    model calls ADK should make in order."""

    label: str
    session: int
    text: str
    steps: tuple[Step, ...]


def _say(agent: str, text: str) -> Step:
    return Step(agent, (text_part(text),))


def _use(agent: str, name: str, **args: Any) -> Step:
    return Step(agent, (call_part(name, **args),))


def plan() -> tuple[tuple[Turn, ...], ...]:
    """The invocations in the order they run; the turns of one group run at the same time
    (the first of a pair appends first)."""
    return (
        (
            Turn(
                "address",
                1,
                "Please ship my order to Rua Augusta 10, Lisbon.",
                (
                    _use(ROOT, "set_shipping_address", address=ADDRESS),
                    _say(ROOT, "Your order ships to Rua Augusta 10."),
                ),
            ),
        ),
        (
            Turn(
                "quote",
                1,
                "How much is shipping for 2 kg?",
                (
                    _use(ROOT, "quote_shipping", weight_kg=QUOTE["weight_kg"]),
                    _say(ROOT, "Shipping 2 kg with CTT costs 7.50 EUR."),
                ),
            ),
        ),
        (
            Turn(
                "loyalty",
                1,
                "Do I get a loyalty discount?",
                (
                    _use(ROOT, "check_loyalty"),
                    _use(ROOT, "loyalty_discount"),
                    _say(ROOT, "You are a gold member: 10% off."),
                ),
            ),
        ),
        (
            Turn(
                "coupon",
                1,
                "Apply WELCOME10 and add the note 'Happy birthday, Ana!'.",
                (
                    _use(ROOT, "apply_coupon", code=FIRST_COUPON),
                    _use(ROOT, "add_gift_note", note=GIFT_NOTE),
                    _say(ROOT, "WELCOME10 is applied and the note is added."),
                ),
            ),
        ),
        (
            Turn(
                "scopes",
                1,
                "Show the spring banner and make me a silver member.",
                (
                    _use(ROOT, "set_banner", text=BANNER),
                    _use(ROOT, "set_member_tier", tier=FIRST_TIER),
                    _say(ROOT, "The banner is up and you are a silver member."),
                ),
            ),
        ),
        (
            Turn(
                "unnote",
                1,
                "Remove the gift note, please.",
                (_use(ROOT, "remove_gift_note"), _say(ROOT, "The gift note is removed.")),
            ),
        ),
        (
            Turn(
                "cart-first",
                1,
                "Add a kettle to my cart.",
                (
                    _use(ROOT, "add_to_cart", item=WINNER_ITEM),
                    _say(ROOT, "The kettle is in your cart."),
                ),
            ),
            Turn(
                "cart-second",
                1,
                "Add a teapot to my cart.",
                (
                    _use(ROOT, "add_to_cart", item=LOSER_ITEM),
                    _say(ROOT, "The teapot is in your cart."),
                ),
            ),
        ),
        (
            Turn(
                "promo",
                1,
                "Is there a spring promotion?",
                (
                    _use(ROOT, "transfer_to_agent", agent_name=PROMO),
                    _use(PROMO, "apply_promo", code=SECOND_COUPON),
                    _say(PROMO, "SPRING5 now replaces WELCOME10."),
                ),
            ),
        ),
        (
            Turn(
                "upgrade",
                2,
                "Upgrade me to platinum, please.",
                (
                    _use(ROOT, "set_member_tier", tier=SECOND_TIER),
                    _say(ROOT, "You are a platinum member now."),
                ),
            ),
        ),
    )


def _texts(content: types.Content) -> list[str]:
    return [part.text for part in content.parts or () if part.text]


@dataclass
class MessageConductor(Conductor):
    """Routes each model call to the plan of the user message the invocation answers, so
    invocations running at the same time each follow their own plan."""

    plans: dict[str, Conductor] = field(default_factory=dict)

    def answer(self, agent: str, request: LlmRequest) -> LlmResponse:
        for content in reversed(request.contents):
            for text in _texts(content):
                conductor = self.plans.get(text)
                if content.role == "user" and conductor is not None:
                    response = conductor.answer(agent, request)
                    self.served.append(conductor.served[-1])
                    return response
        raise AssertionError(f"{agent}'s model was called for no planned user message")


class Rendezvous(BasePlugin):
    """Two requests for one session that arrive together: both invocations load the same
    stored revision, then the first appends its user event, then the second goes on.

    ``on_user_message_callback`` runs after the runner loaded the session and before it
    appends the user event; ``before_run_callback`` runs after that append. The plugin also
    keeps every invocation's id by its user message (a rejected one yields no event).
    """

    def __init__(self) -> None:
        super().__init__(name="ik_rendezvous")
        self.pair: tuple[str, str] | None = None
        self.invocation_ids: dict[str, str] = {}
        self._loaded = asyncio.Event()
        self._first_appended = asyncio.Event()

    def arm(self, first: str, second: str) -> None:
        self.pair = (first, second)
        self._loaded.clear()
        self._first_appended.clear()

    async def on_user_message_callback(
        self, *, invocation_context: InvocationContext, user_message: types.Content
    ) -> types.Content | None:
        (text,) = _texts(user_message)
        self.invocation_ids[text] = invocation_context.invocation_id
        if self.pair is not None and text == self.pair[1]:
            self._loaded.set()
            await asyncio.wait_for(self._first_appended.wait(), timeout=60)
        elif self.pair is not None and text == self.pair[0]:
            await asyncio.wait_for(self._loaded.wait(), timeout=60)
        return None

    async def before_run_callback(
        self, *, invocation_context: InvocationContext
    ) -> types.Content | None:
        if self.pair is not None and invocation_context.invocation_id == self.invocation_ids.get(
            self.pair[0]
        ):
            self._first_appended.set()
        return None


def _agents(conductor: Conductor) -> LlmAgent:
    promo = LlmAgent(
        name=PROMO,
        model=PlannedLlm.of(PROMO, conductor),
        description="Knows the current promotions and applies their codes.",
        instruction="Apply the current promotion's code.",
        tools=[apply_promo],
    )
    return LlmAgent(
        name=ROOT,
        model=PlannedLlm.of(ROOT, conductor),
        description="Takes the customer's orders.",
        instruction="Help the customer with the order; hand promotions to the promo agent.",
        tools=[
            set_shipping_address,
            quote_shipping,
            check_loyalty,
            loyalty_discount,
            apply_coupon,
            add_gift_note,
            remove_gift_note,
            set_banner,
            set_member_tier,
            add_to_cart,
        ],
        after_tool_callback=remember_tier,
        sub_agents=[promo],
    )


# --- the truth ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Invocation:
    """One invocation of the world and what ADK did with it."""

    label: str
    session_id: str
    invocation_id: str
    text: str
    model_calls: int
    error: str | None
    """``"StaleSessionError: <message>"`` when ADK rejected it, else None."""
    stored_events: int
    """Events of the invocation in the store (as ``get_session`` reads them)."""


class Write(TypedDict):
    """One stored event delta's write of a key."""

    session_id: str
    invocation_id: str
    author: str
    event_id: str
    timestamp: float
    value: Any


class KeyTruth(TypedDict):
    """What became of one state key: the verdict, and the facts ADK stored."""

    key: str
    scope: str
    """``session``, ``app``, ``user`` or ``temp`` (by the key's prefix)."""
    verdict: Verdict
    cause: str | None
    """``direct_mutation`` for NEVER_DURABLE; else None."""
    writes: list[Write]
    """Every stored delta holding the key, both sessions, in time order (prefixes kept)."""
    stored: bool
    """Whether ``get_session(main).state`` holds the key at the end."""
    final_value: Any
    """Its value there (None when not stored, or stored as null)."""
    facts: dict[str, Any]
    """How the key was set, from the run (where nothing stored says so)."""


@dataclass(frozen=True)
class VanishedWorld:
    """What ADK wrote for ``ik_vanished``, where it is, and the truth of each state key."""

    folder: Path
    store: str
    """One of :data:`STORES`."""
    location: str
    """Where ADK wrote: a file path (``SqliteSessionService``) or an async SQLAlchemy URL."""
    read_url: str
    """A sync SQLAlchemy URL of the store."""
    manifest: Path
    environ: Mapping[str, str]
    """What the manifest's ``env:`` names need (PostgreSQL only)."""
    app: str
    user: str
    session_id: str
    second_session_id: str
    session_file: Path
    """The main session as ``adk run --save_session`` writes it."""
    invocations: tuple[Invocation, ...]
    keys: Mapping[str, KeyTruth]
    stored_state: Mapping[str, Any]
    """``get_session(main).state`` at the end: session keys, plus app:/user: re-prefixed."""
    second_stored_state: Mapping[str, Any]
    concurrency: Mapping[str, Any]
    """What ADK did with the two invocations sent together (see :func:`_concurrency`)."""
    sessions: tuple[Session, Session]
    """The main and second session as ``get_session`` returns them after all runs."""
    build_seconds: float

    def invocation(self, label: str) -> Invocation:
        (only,) = [inv for inv in self.invocations if inv.label == label]
        return only

    def stored_rows(self) -> list[dict[str, Any]]:
        """ADK's ``events`` table as stored (read with SQLAlchemy), ``event_data`` decoded."""
        return stored_event_rows(self.read_url)


_SCOPES = {"app:": "app", "user:": "user", "temp:": "temp"}


def _scope(key: str) -> str:
    return _SCOPES.get(key[: key.find(":") + 1], "session")


def _writes(key: str, sessions: Sequence[Session]) -> list[Write]:
    events = sorted(
        ((session.id, event) for session in sessions for event in session.events),
        key=lambda pair: pair[1].timestamp,
    )
    return [
        Write(
            session_id=session_id,
            invocation_id=event.invocation_id,
            author=event.author,
            event_id=event.id,
            timestamp=event.timestamp,
            value=event.actions.state_delta[key],
        )
        for session_id, event in events
        if key in event.actions.state_delta
    ]


def _response(session: Session, invocation_id: str, tool: str) -> tuple[str, Any]:
    """The stored function response event of ``tool`` in one invocation: id and response."""
    (found,) = [
        (event.id, part.function_response.response)
        for event in session.events
        if event.invocation_id == invocation_id and event.content
        for part in event.content.parts or ()
        if part.function_response and part.function_response.name == tool
    ]
    return found


def _concurrency(pair: Sequence[Invocation], writes: Sequence[Write]) -> dict[str, Any]:
    """The two invocations sent together: both loaded the same stored revision, the first
    appended first; which ADK rejected, with what, and what of each it stored."""
    ids = [inv.invocation_id for inv in pair]
    return {
        "invocation_ids": ids,
        "texts": [inv.text for inv in pair],
        "same_revision_loaded": True,
        "errors": {inv.invocation_id: inv.error for inv in pair},
        "rejected": [inv.invocation_id for inv in pair if inv.error],
        "stored_events": {inv.invocation_id: inv.stored_events for inv in pair},
        "cart_writers": [w["invocation_id"] for w in writes if w["invocation_id"] in ids],
    }


def _truth(
    main: Session,
    second: Session,
    invocations: Sequence[Invocation],
    concurrency: Mapping[str, Any],
) -> dict[str, KeyTruth]:
    by_label = {inv.label: inv for inv in invocations}
    both = (main, second)
    raced = len(set(concurrency["cart_writers"])) > 1
    loyalty = by_label["loyalty"].invocation_id
    seen_event, seen = _response(main, loyalty, "loyalty_discount")
    quote_event, quoted = _response(main, by_label["quote"].invocation_id, "quote_shipping")
    facts: dict[str, dict[str, Any]] = {
        "preferred_language": {"set_by": "create_session"},
        "user:plan": {"set_by": "create_session"},
        "temp:quote": {
            "written_by": "quote_shipping",
            "invocation_id": by_label["quote"].invocation_id,
            "value": dict(QUOTE),
            "tool_response_event_id": quote_event,
            "tool_response": quoted,
        },
        "loyalty_tier": {
            "written_by": "after_tool_callback",
            "path": DIRECT_PATH,
            "invocation_id": loyalty,
            "value": LOYALTY_TIER,
            "read_back_by": "loyalty_discount",
            "read_back_event_id": seen_event,
            "read_back": seen,
        },
        "gift_note": {"removed_by": "remove_gift_note", "removal": "set to None"},
        "user:tier": {"overwritten_in_session": second.id},
        "cart": {"concurrency": dict(concurrency)},
    }
    expected: dict[str, tuple[Verdict, str | None]] = {
        "preferred_language": (Verdict.PRESENT, None),
        "user:plan": (Verdict.PRESENT, None),
        "shipping_address": (Verdict.PRESENT, None),
        "temp:quote": (Verdict.TEMP_PREFIX, None),
        "loyalty_tier": (Verdict.NEVER_DURABLE, "direct_mutation"),
        "coupon_code": (Verdict.OVERWRITTEN, None),
        "gift_note": (Verdict.REMOVED, None),
        "app:banner": (Verdict.PRESENT, None),
        "user:tier": (Verdict.OVERWRITTEN, None),
        "cart": (Verdict.RACED if raced else Verdict.PRESENT, None),
    }
    return {
        key: KeyTruth(
            key=key,
            scope=_scope(key),
            verdict=verdict,
            cause=cause,
            writes=_writes(key, both),
            stored=key in main.state,
            final_value=main.state.get(key),
            facts=facts.get(key, {}),
        )
        for key, (verdict, cause) in expected.items()
    }


# --- running it --------------------------------------------------------------------------------


async def _invoke(runner: Runner, session_id: str, text: str) -> tuple[set[str], str | None]:
    """Run one invocation: the invocation ids of the events ADK yielded, and the
    ``StaleSessionError`` it raised, if any."""
    ids: set[str] = set()
    error: str | None = None
    agen = runner.run_async(user_id=USER, session_id=session_id, new_message=user_message(text))
    try:
        async for event in agen:
            ids.add(event.invocation_id)
    except StaleSessionError as err:
        error = f"{type(err).__name__}: {err}"
    finally:
        await agen.aclose()
    return ids, error


Outcome = tuple[Session, Session, tuple[Invocation, ...], dict[str, Any]]


async def _run(location: str) -> Outcome:
    conductor = MessageConductor()
    rendezvous = Rendezvous()
    service = session_service(location)
    assert isinstance(service, SqliteSessionService | DatabaseSessionService)
    app = App(name=APP, root_agent=_agents(conductor), plugins=[rendezvous])
    runner = Runner(app=app, session_service=service)
    try:
        created = await service.create_session(
            app_name=APP, user_id=USER, state=dict(INITIAL_STATE)
        )
        session_ids = {1: created.id}
        runs: list[tuple[Turn, set[str], str | None]] = []
        for group in plan():
            for turn in group:
                if turn.session not in session_ids:
                    created = await service.create_session(app_name=APP, user_id=USER)
                    session_ids[turn.session] = created.id
                if turn.text in conductor.plans:
                    raise AssertionError(f"{turn.text!r} is planned twice")
                conductor.plans[turn.text] = Conductor()
                conductor.plans[turn.text].pending.extend(turn.steps)
            if len(group) == 2:
                rendezvous.arm(group[0].text, group[1].text)
            results = await asyncio.gather(
                *(_invoke(runner, session_ids[turn.session], turn.text) for turn in group)
            )
            rendezvous.pair = None
            runs.extend(
                (turn, ids, error) for turn, (ids, error) in zip(group, results, strict=True)
            )
        got = []
        for session_id in (session_ids[1], session_ids[2]):
            session = await service.get_session(app_name=APP, user_id=USER, session_id=session_id)
            assert session is not None
            got.append(session)
        main, second = got
        stored = {1: main, 2: second}
        invocations = []
        for turn, ids, error in runs:
            invocation_id = rendezvous.invocation_ids[turn.text]
            if ids - {invocation_id}:
                raise AssertionError(f"{turn.text!r}: ADK yielded events of {sorted(ids)}")
            pending = conductor.plans[turn.text].pending
            if pending and error is None:
                raise AssertionError(
                    f"{turn.text!r}: the scenario did not run as scripted; ADK left "
                    f"{len(pending)} planned model calls unmade"
                )
            invocations.append(
                Invocation(
                    label=turn.label,
                    session_id=session_ids[turn.session],
                    invocation_id=invocation_id,
                    text=turn.text,
                    model_calls=len(conductor.plans[turn.text].served),
                    error=error,
                    stored_events=sum(
                        event.invocation_id == invocation_id
                        for event in stored[turn.session].events
                    ),
                )
            )
        pair = [inv for inv in invocations if inv.label in ("cart-first", "cart-second")]
        concurrency = _concurrency(pair, _writes("cart", got))
        return main, second, tuple(invocations), concurrency
    finally:
        await runner.close()
        await service.close()


def _toml(value: str) -> str:
    return json.dumps(value)  # a TOML basic string


def build_vanished_world(store: str, folder: Path, *, url: str | None = None) -> VanishedWorld:
    """Run :func:`plan` through ADK into a fresh store of kind ``store`` and write the evidence
    (store, ``evidence.toml``, the main session's ``<id>.session.json``) to ``folder``.

    ``store`` is one of :data:`STORES`: ``sqlite`` (``SqliteSessionService``, ``session.db``),
    ``database`` (``DatabaseSessionService`` on ``adk.db``) or ``postgresql``
    (``DatabaseSessionService`` on ``url``, an empty database ``postgresql+psycopg://...``,
    which the manifest names as ``env:IK_ADK_DB``).
    """
    folder.mkdir(parents=True, exist_ok=True)
    environ: dict[str, str] = {}
    if store == "sqlite":  # the store of adk web / adk api_server
        db = folder / "session.db"
        location, read_url, events = str(db), f"sqlite:///{db}", f"path = {_toml(db.name)}"
    elif store == "database":
        db = folder / "adk.db"
        location, read_url = f"sqlite+aiosqlite:///{db}", f"sqlite:///{db}"
        events = f"path = {_toml(db.name)}"
    elif store == "postgresql":
        if not url:
            raise ValueError("store postgresql needs url, an empty PostgreSQL database")
        location, read_url, events = url, url, 'url = "env:IK_ADK_DB"'
        environ["IK_ADK_DB"] = url
    else:
        raise ValueError(f"unknown store {store!r}; choose one of {STORES}")
    started = time.perf_counter()
    main, second, invocations, concurrency = asyncio.run(_run(location))
    seconds = time.perf_counter() - started
    keys = _truth(main, second, invocations, concurrency)
    session_file = save_session_json(main, folder)
    manifest = folder / "evidence.toml"
    manifest.write_text(
        f'title = "ADK vanished-state world ({store})"\n\n'
        f'[events]\n{events}\nformat = "adk-python-db"\n\n'
        f"[apps.{APP}]\n",
        encoding="utf-8",
    )
    return VanishedWorld(
        folder=folder,
        store=store,
        location=location,
        read_url=read_url,
        manifest=manifest,
        environ=environ,
        app=APP,
        user=USER,
        session_id=main.id,
        second_session_id=second.id,
        session_file=session_file,
        invocations=invocations,
        keys=keys,
        stored_state=dict(main.state),
        second_stored_state=dict(second.state),
        concurrency=concurrency,
        sessions=(main, second),
        build_seconds=seconds,
    )
