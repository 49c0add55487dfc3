""" "The agent forgot my address", written by the real google-adk into a plain store.

``build_forgot_world`` runs one app, ``ik_forgot``, through ADK's own ``Runner`` over
``DatabaseSessionService`` on a SQLite file and writes what the incident leaves behind: the
store and an ``evidence.toml`` (``[events]`` in format ``adk-python-db``, no ledger, no
diagnostics: the evidence a new user has). Every model is a ``PlannedLlm`` of
``adk_runaway_world`` following one plan per invocation.

The app's agent ``shop_agent`` has these tools:

- ``set_shipping_address`` writes ``shipping_address`` through ``tool_context.state`` (a delta);
- ``express_checkout_address``, the express checkout's code path, sets it on
  ``tool_context.session.state`` itself: no delta, never stored (the bug);
- ``quote_shipping`` writes ``temp:quote``, which ADK trims from the stored delta;
- ``get_shipping_address`` reads it back; ``lookup_order`` reads an order (no state).

Four customers, a session each (:data:`SESSIONS`): two set their address the proper way and
read it back, one only looks an order up, and one, ``lost``, checks out express (the address
goes past the delta) and gets a quote, then asks where the order ships and the agent has no
address: the session the card must name, with the key to judge.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.runners import Runner
from google.adk.sessions import DatabaseSessionService
from google.adk.tools.tool_context import ToolContext

from .adk_runaway_world import Conductor, PlannedLlm, Step
from .adk_world import call_part, text_part, user_message

APP = "ik_forgot"
ROOT = "shop_agent"
KEY = "shipping_address"
TEMP_KEY = "temp:quote"
LOST = "lost"
"""The session whose address never became durable."""
SESSIONS: Mapping[str, str] = {
    "first": "user-1",
    "second": "user-2",
    "browser": "user-3",
    LOST: "user-4",
}
"""Session label → its customer."""


def set_shipping_address(address: str, tool_context: ToolContext) -> dict[str, str]:
    """Remember where the order ships."""
    tool_context.state[KEY] = address
    return {"status": "saved"}


def express_checkout_address(address: str, tool_context: ToolContext) -> dict[str, str]:
    """Express checkout: take the address from the wallet (writes past the delta: the bug)."""
    tool_context.session.state[KEY] = address  # no delta: DatabaseSessionService never stores it
    return {"status": "saved"}


def quote_shipping(weight_kg: float, tool_context: ToolContext) -> dict[str, Any]:
    """Quote the shipping price of a parcel; the quote lives for this invocation only."""
    quote = {"weight_kg": weight_kg, "price_eur": 7.5}
    tool_context.state[TEMP_KEY] = quote
    return quote


def get_shipping_address(tool_context: ToolContext) -> dict[str, Any]:
    """Where the order ships, as the session holds it."""
    return {"address": tool_context.state.get(KEY)}


def lookup_order(order_id: str) -> dict[str, str]:
    """An order's status (reads no state, writes none)."""
    return {"order_id": order_id, "status": "packed"}


def _say(text: str) -> Step:
    return Step(ROOT, (text_part(text),))


def _use(name: str, **args: Any) -> Step:
    return Step(ROOT, (call_part(name, **args),))


@dataclass(frozen=True)
class Turn:
    """One invocation: the session it runs on, the user's message, the model calls in order."""

    session: str
    text: str
    steps: tuple[Step, ...]


def plan() -> tuple[Turn, ...]:
    """The invocations, in the order they run."""
    street = "Rua Augusta 10, Lisboa"
    return (
        Turn(
            "first",
            "Ship to Rua Augusta 10.",
            (_use("set_shipping_address", address=street), _say("Saved.")),
        ),
        Turn(
            "browser",
            "Where is order A-1?",
            (_use("lookup_order", order_id="A-1"), _say("Packed.")),
        ),
        Turn(
            LOST,
            "Express checkout with my wallet address, 2 kg.",
            (
                _use("express_checkout_address", address="Avenida da Liberdade 5, Lisboa"),
                _use("quote_shipping", weight_kg=2),
                _say("Checked out; shipping is 7.50 EUR."),
            ),
        ),
        Turn(
            "second",
            "Ship to Praça do Comércio 1.",
            (_use("set_shipping_address", address="Praça do Comércio 1"), _say("Saved.")),
        ),
        Turn(
            "first",
            "Where does my order ship?",
            (_use("get_shipping_address"), _say(f"To {street}.")),
        ),
        Turn(
            LOST,
            "Where does my order ship?",
            (_use("get_shipping_address"), _say("I have no address for you.")),
        ),
    )


@dataclass(frozen=True)
class ForgotWorld:
    """Where the evidence is and what the real ADK did."""

    folder: Path
    manifest: Path
    session_ids: Mapping[str, str]
    """Session label → id."""
    stored_state: Mapping[str, Mapping[str, Any]]
    """Session label → the state ``get_session`` returns."""
    answered: Mapping[str, Any]
    """What ``get_shipping_address`` answered in the lost session's last turn."""

    @property
    def lost(self) -> str:
        return self.session_ids[LOST]


async def _run(url: str) -> tuple[dict[str, str], dict[str, dict[str, Any]], Any]:
    conductor = Conductor()
    agent = LlmAgent(
        name=ROOT,
        model=PlannedLlm.of(ROOT, conductor),
        instruction="Help the customer with the order.",
        tools=[
            set_shipping_address,
            express_checkout_address,
            quote_shipping,
            get_shipping_address,
            lookup_order,
        ],
    )
    service = DatabaseSessionService(db_url=url)
    runner = Runner(app_name=APP, agent=agent, session_service=service)
    answered: Any = None
    try:
        ids = {
            label: (await service.create_session(app_name=APP, user_id=user)).id
            for label, user in SESSIONS.items()
        }
        for turn in plan():
            conductor.pending = deque(turn.steps)
            user = SESSIONS[turn.session]
            async for event in runner.run_async(
                user_id=user, session_id=ids[turn.session], new_message=user_message(turn.text)
            ):
                for response in event.get_function_responses():
                    if turn.session == LOST and response.name == "get_shipping_address":
                        answered = dict(response.response or {})
            if conductor.pending:
                raise AssertionError(f"{turn.text!r}: ADK left {len(conductor.pending)} calls")
        stored = {}
        for label, user in SESSIONS.items():
            got = await service.get_session(app_name=APP, user_id=user, session_id=ids[label])
            assert got is not None
            stored[label] = dict(got.state)
        return ids, stored, answered
    finally:
        await runner.close()
        await service.close()


def build_forgot_world(folder: Path) -> ForgotWorld:
    """Run :func:`plan` through ADK into ``folder/adk.db`` and write ``evidence.toml``."""
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "adk.db"
    ids, stored, answered = asyncio.run(_run(f"sqlite+aiosqlite:///{db}"))
    manifest = folder / "evidence.toml"
    manifest.write_text(
        f'title = "The agent forgot (ADK Python, DatabaseSessionService)"\n\n'
        f'[events]\npath = {json.dumps(db.name)}\nformat = "adk-python-db"\n',
        encoding="utf-8",
    )
    return ForgotWorld(folder, manifest, ids, stored, answered)
