"""Where state can vanish across an app's sessions, before a key is named: each signal on a
small hand-built store, the ranking, and what is said when nothing is found."""

from __future__ import annotations

from typing import Any

import pandas as pd

from incidentkit.flows.vanished_state.suspects import state_suspects
from incidentkit.frames import build, empty

T0 = pd.Timestamp("2026-11-29T14:00:00Z")


def at(seconds: float) -> pd.Timestamp:
    return T0 + pd.Timedelta(seconds=seconds)


def scope_of(key: str) -> str:
    return next((s for s in ("app", "user", "temp") if key.startswith(f"{s}:")), "session")


class Store:
    """Events, tool answers and state writes of one app, session by session."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.responses: list[dict[str, Any]] = []
        self.calls: list[dict[str, Any]] = []
        self.writes: list[dict[str, Any]] = []
        self.stored: list[dict[str, Any]] = []

    def turn(
        self,
        session: str,
        inv: str,
        second: float,
        *,
        tool: str | None = None,
        answer: Any = None,
        args: Any = None,
        writes: dict[str, Any] | None = None,
        partial: bool = False,
    ) -> None:
        """One event of ``inv``: a tool's answer (with its call) when ``tool`` is given."""
        n = len(self.events)
        event = f"ev-{n}"
        self.events.append(
            {"event_id": event, "app_name": "shop", "user_id": f"u-{session}"}
            | {"session_id": session, "invocation_id": inv, "seq": n, "ts": at(second)}
            | {"author": "shop_agent", "partial": partial}
        )
        if tool is not None:
            self.calls.append(
                {"event_id": f"call-{n}", "session_id": session, "invocation_id": inv}
                | {"call_id": f"c-{n}", "name": tool, "args": args or {}, "ts": at(second - 0.5)}
                | {"args_key": "{}" if args is None else str(args).replace("'", '"')}
            )
            self.responses.append(
                {"event_id": event, "session_id": session, "invocation_id": inv, "seq": n}
                | {"call_id": f"c-{n}", "name": tool, "response": answer or {}, "ts": at(second)}
            )
        for key, value in (writes or {}).items():
            self.writes.append(
                {"event_id": event, "session_id": session, "invocation_id": inv, "seq": n}
                | {"ts": at(second), "key": key, "scope": scope_of(key), "value": value}
                | {"removed": value is None, "partial": partial}
            )

    def keep(self, session: str, key: str, value: Any) -> None:
        self.stored.append(
            {"app_name": "shop", "user_id": f"u-{session}", "session_id": session, "key": key}
            | {"scope": scope_of(key), "value": value, "source": "sessions.state"}
        )

    def suspects(self, **kwargs: Any) -> Any:
        return state_suspects(
            build("events", self.events),
            build("calls", self.calls),
            build("responses", self.responses),
            build("state_writes", self.writes),
            stored=build("session_state", self.stored) if self.stored else empty("session_state"),
            **kwargs,
        )


def by_session(found: Any) -> dict[str, dict[str, Any]]:
    return {row["session_id"]: row for row in found.suspects.to_dict("records")}


def test_temp_and_partial_only_keys_are_named_with_their_session() -> None:
    store = Store()
    store.turn("s1", "i1", 1, tool="quote_shipping", writes={"temp:quote": {"eur": 4.9}})
    store.turn("s1", "i1", 2, writes={"draft_reply": "Your kettle"}, partial=True)
    store.turn("s2", "i2", 3, tool="set_address", writes={"address": "Rua A"})
    store.turn("s2", "i2", 4, writes={"note": "hi"}, partial=True)
    store.turn("s2", "i2", 5, writes={"note": "hi"})  # the final event wrote it too: durable
    rows = by_session(store.suspects())
    assert list(rows) == ["s1"]
    assert rows["s1"]["temp_keys"] == ("temp:quote",)
    assert rows["s1"]["partial_keys"] == ("draft_reply",)
    assert set(rows["s1"]["keys"]) == {"temp:quote", "draft_reply"}


def test_a_quiet_answer_that_names_a_key_the_session_never_held_is_a_suspect() -> None:
    store = Store()
    store.turn("s1", "i1", 1, tool="set_shipping_address", writes={"shipping_address": "Rua A"})
    store.turn("s1", "i2", 9, tool="get_shipping_address", answer={"address": "Rua A"})  # a read
    store.turn("s2", "i3", 2, tool="express_checkout_address", answer={"status": "saved"})
    store.turn("s3", "i4", 3, tool="lookup_order", answer={"status": "packed"})  # names no key
    store.turn("s4", "i5", 4, tool="confirm", answer={"shipping_address": "Rua B"})
    store.turn("s4", "i5", 4.5, writes={"shipping_address": "Rua B"})  # same invocation: echo
    found = store.suspects()
    rows = by_session(found)
    assert list(rows) == ["s2"]
    (answer,) = rows["s2"]["quiet_answers"]
    assert (answer["tool"], answer["keys"]) == ("express_checkout_address", ("shipping_address",))
    assert "after a call that names shipping_address" in rows["s2"]["why"]
    assert (found.sessions, found.answers) == (4, 5)


def test_a_call_whose_arguments_name_the_key_or_a_writer_gone_quiet_is_a_suspect() -> None:
    store = Store()
    store.turn("s1", "i1", 1, tool="remember", args={"loyalty_tier": "gold"})
    store.turn("s2", "i2", 2, tool="save_profile", writes={"loyalty_tier": "silver"})
    store.turn("s3", "i3", 3, tool="save_profile", answer={"ok": True})  # wrote nothing this time
    rows = by_session(store.suspects())
    assert set(rows) == {"s1", "s3"}
    assert rows["s1"]["keys"] == ("loyalty_tier",) == rows["s3"]["keys"]


def test_stored_state_that_differs_from_the_replay_comes_first() -> None:
    store = Store()
    store.turn("s1", "i1", 1, tool="add_to_cart", writes={"cart": ["kettle"]})
    store.keep("s1", "cart", ["kettle", "mug"])  # the store holds another value
    store.turn("s2", "i2", 2, tool="quote", writes={"temp:quote": 5})
    store.turn("s3", "i3", 3, tool="set_note", writes={"note": "hi", "gone": "x"})
    store.turn("s3", "i4", 4, tool="drop", writes={"gone": None})  # a removal: stored as null
    store.keep("s3", "note", "hi")
    store.keep("s3", "gone", None)
    found = store.suspects()
    assert list(found.suspects["session_id"]) == ["s1", "s2"]
    assert found.suspects.iloc[0]["differing_keys"] == ("cart",)
    assert found.stored_compared and "stored state against the replayed deltas" in found.checked()


def test_overlapping_invocations_name_the_keys_they_wrote() -> None:
    store = Store()
    store.turn("s1", "i1", 1, tool="add_to_cart", writes={"cart": ["kettle"]})
    store.turn("s1", "i2", 2, tool="add_to_cart", writes={"cart": ["mug"]})
    store.turn("s1", "i1", 3, tool="add_to_cart", writes={"coupon": "X"})
    rows = by_session(store.suspects())
    assert rows["s1"]["overlaps"] == 1 and set(rows["s1"]["keys"]) == {"cart", "coupon"}
    assert "i1 and i2 overlapped" in rows["s1"]["why"]


def test_nothing_found_says_what_was_checked_and_a_store_without_deltas_says_so() -> None:
    store = Store()
    store.turn("s1", "i1", 1, tool="set_address", writes={"address": "Rua A"})
    store.turn("s2", "i2", 2, tool="lookup_order", answer={"status": "packed"})
    found = store.suspects()
    assert found.suspects.empty
    assert found.checked().startswith("2 session(s), 1 key(s) and 2 tool answer(s) checked")
    bare = Store()  # a Firestore export: stored state, no delta anywhere
    bare.turn("s1", "i1", 1, tool="set_address", answer={"address": "Rua A"})
    bare.keep("s1", "address", "Rua A")
    found = bare.suspects()
    assert found.suspects.empty and not found.deltas
    assert "keep no state deltas" in found.checked()
