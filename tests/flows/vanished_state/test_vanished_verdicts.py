"""Every verdict, the replay rules and the overlap rule of the vanished-state flow, on small
hand-built frames."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from incidentkit.errors import ParameterError
from incidentkit.flows.common import Frames
from incidentkit.flows.vanished_state import overlaps
from incidentkit.flows.vanished_state.settings import KEYS
from incidentkit.flows.vanished_state.state import (
    SessionRef,
    compare,
    replay,
    resolve_session,
    stored_state,
    visible_writes,
)
from incidentkit.flows.vanished_state.triage import VanishedReport, triage_vanished_state
from incidentkit.frames import build
from incidentkit.sources.events.adk_parts import REMOVED

APP, USER, SID = "shop", "u-1", "s-1"
T0 = pd.Timestamp("2026-11-29T14:00:00Z")
AS_OF = T0 + pd.Timedelta(hours=1)


def at(seconds: float) -> pd.Timestamp:
    return T0 + pd.Timedelta(seconds=seconds)


def scope_of(key: str) -> str:
    return next((s for s in ("app", "user", "temp") if key.startswith(f"{s}:")), "session")


class Log:
    """A session store in the making: events, their state writes, tool responses, runs."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.writes: list[dict[str, Any]] = []
        self.responses: list[dict[str, Any]] = []
        self.runs: list[dict[str, Any]] = []
        self.stored: list[dict[str, Any]] = []

    def event(
        self,
        inv: str,
        second: float,
        *,
        author: str = "cart_agent",
        session: str = SID,
        user: str = USER,
        app: str = APP,
        partial: bool = False,
        tool: str | None = None,
        **delta: Any,
    ) -> str:
        event_id = f"ev-{len(self.events)}"
        seq = sum(1 for e in self.events if e["session_id"] == session)
        self.events.append(
            {
                "event_id": event_id,
                "app_name": app,
                "user_id": user,
                "session_id": session,
                "invocation_id": inv,
                "seq": seq,
                "ts": at(second),
                "author": author,
                "partial": partial,
            }
        )
        for key, value in delta.items():
            key = key.replace("__", ":")  # app__x → app:x
            self.writes.append(
                {
                    "event_id": event_id,
                    "session_id": session,
                    "invocation_id": inv,
                    "seq": seq,
                    "ts": at(second),
                    "author": author,
                    "key": key,
                    "scope": scope_of(key),
                    "value": None if value == REMOVED else value,
                    "removed": value == REMOVED,
                    "partial": partial,
                }
            )
        if tool:
            self.responses.append(
                {
                    "event_id": event_id,
                    "session_id": session,
                    "invocation_id": inv,
                    "ts": at(second),
                    "author": author,
                    "name": tool,
                }
            )
        return event_id

    def run(self, inv: str, start: float, end: float, *, session: str = SID) -> None:
        self.runs.append(
            {
                "run_id": f"run-{inv}",
                "app_name": APP,
                "user_id": USER,
                "session_id": session,
                "invocation_id": inv,
                "status": "DONE",
                "started_at": at(start),
                "updated_at": at(end),
            }
        )

    def store(self, key: str, value: Any, *, session: str | None = SID) -> None:
        scope = scope_of(key)
        self.stored.append(
            {
                "app_name": APP,
                "user_id": None if scope == "app" else USER,
                "session_id": session if scope in ("session", "temp") else None,
                "scope": scope,
                "key": key,
                "value": value,
                "source": f"{'sessions' if scope == 'session' else scope + '_states'}.state",
                "updated_at": AS_OF,
            }
        )

    def frames(self) -> Frames:
        return Frames(
            runs=build("runs", self.runs),
            events=build("events", self.events),
            responses=build("responses", self.responses),
            state_writes=build("state_writes", self.writes),
            session_state=build("session_state", self.stored),
        )

    def triage(self, *keys: str, keeps: bool | None = None) -> VanishedReport:
        return triage_vanished_state(
            self.frames(), SID, as_of=AS_OF, keys=keys, store_keeps_state=keeps
        )


def verdict(report: VanishedReport, key: str) -> dict[str, Any]:
    rows = report.keys.set_index("key")
    found: dict[str, Any] = rows.loc[key].to_dict()
    return found


def test_a_temp_key_is_temp_prefix_even_when_the_stored_delta_still_shows_it() -> None:
    log = Log()
    ev = log.event("i-1", 1, tool="quote_shipping", temp__quote={"eur": 4.9})
    report = log.triage("temp:quote", "temp:never_seen")
    shown = verdict(report, "temp:quote")
    assert shown["verdict"] == "TEMP_PREFIX" and shown["value"] == {"eur": 4.9}
    assert shown["written_by"]["event_id"] == ev and shown["written_by"]["tool"] == "quote_shipping"
    trimmed = verdict(report, "temp:never_seen")  # ADK Python trims it from the stored delta
    assert trimmed["verdict"] == "TEMP_PREFIX" and trimmed["written_by"] is None
    assert "temp:quote" not in set(report.replayed["key"])  # never applied


def test_a_key_only_partial_events_carried_never_became_durable() -> None:
    log = Log()
    log.event("i-1", 1, partial=True, draft="Your kettle is")
    log.event("i-1", 2)  # the final event carries no delta
    shown = verdict(log.triage("draft"), "draft")
    assert (shown["verdict"], shown["cause"]) == ("NEVER_DURABLE", "partial_only")
    assert shown["value"] == "Your kettle is" and shown["written_by"]["event_id"] == "ev-0"


def test_a_key_in_no_delta_is_a_direct_mutation_certain_when_the_log_keeps_partials() -> None:
    log = Log()
    log.event("i-1", 1, partial=True)  # the log keeps streamed events: none carries the key
    log.event("i-1", 2, loyalty="silver")
    log.store("loyalty", "silver")
    shown = verdict(log.triage("loyalty_tier"), "loyalty_tier")
    assert (shown["verdict"], shown["cause"]) == ("NEVER_DURABLE", "direct_mutation")
    assert "keeps partial events and none carries it" in shown["why"]
    assert "similar names that are set: loyalty" in shown["why"]  # a read-side typo, perhaps


def test_without_partial_events_the_why_says_the_log_cannot_tell_the_causes_apart() -> None:
    log = Log()
    log.event("i-1", 1, cart=["kettle"])
    log.store("cart", ["kettle"])
    shown = verdict(log.triage("loyalty_tier"), "loyalty_tier")
    assert (shown["verdict"], shown["cause"]) == ("NEVER_DURABLE", "direct_mutation")
    assert "cannot tell" in shown["why"] and "streaming mode" in shown["why"]
    assert "does not hold it" in shown["why"]


def test_a_later_write_by_another_invocation_overwrote_the_value() -> None:
    log = Log()
    first = log.event("i-1", 1, tool="apply_coupon", coupon="WELCOME10")
    log.run("i-1", 0, 5)
    later = log.event("i-2", 60, author="checkout_agent", tool="apply_coupon", coupon="SPRING5")
    log.run("i-2", 59, 65)
    shown = verdict(log.triage("coupon"), "coupon")
    assert shown["verdict"] == "OVERWRITTEN" and shown["value"] == "SPRING5"
    assert shown["written_by"]["event_id"] == first and shown["changed_by"]["event_id"] == later
    assert shown["changed_by"]["author"] == "checkout_agent"
    assert '"WELCOME10"' in shown["why"] and '"SPRING5"' in shown["why"]  # as JSON


def test_a_writer_updating_its_own_key_is_present_not_overwritten() -> None:
    log = Log()
    log.event("i-1", 1, tool="add_to_cart", cart=["kettle"])
    log.event("i-1", 2, tool="add_to_cart", cart=["kettle", "mug"])
    shown = verdict(log.triage("cart"), "cart")
    assert (shown["verdict"], shown["value"]) == ("PRESENT", ["kettle", "mug"])
    assert shown["written_by"]["event_id"] == "ev-1"


def test_another_tool_of_the_same_invocation_replacing_a_value_overwrote_it() -> None:
    log = Log()
    log.event("i-1", 1, tool="set_address", address="Rua A")
    log.event("i-1", 2, tool="normalise_address", address="RUA A")
    assert verdict(log.triage("address"), "address")["verdict"] == "OVERWRITTEN"


def test_overlapping_invocations_writing_a_key_raced_and_the_later_write_won() -> None:
    log = Log()
    log.event("i-0", 1, cart=["kettle"])
    log.run("i-0", 0, 3)
    lost = log.event("i-1", 61, cart=["kettle", "mug"])
    won = log.event("i-2", 62, cart=["kettle", "towel"])
    log.run("i-1", 60, 62.5)
    log.run("i-2", 60.4, 63)
    report = log.triage("cart")
    shown = verdict(report, "cart")
    assert shown["verdict"] == "RACED" and shown["value"] == ["kettle", "towel"]
    assert shown["written_by"]["event_id"] == won and shown["raced_with"]["event_id"] == lost
    [pair] = report.overlaps.to_dict("records")
    assert (pair["invocation_a"], pair["invocation_b"]) == ("i-1", "i-2")
    assert (pair["a_start"], pair["b_end"]) == (at(61), at(63))  # first event, last update


def test_overlapping_invocations_writing_the_same_value_lost_nothing() -> None:
    log = Log()
    log.event("i-1", 1, cart=["kettle"])
    log.event("i-2", 2, cart=["kettle"])
    log.run("i-1", 0, 3)
    log.run("i-2", 0.5, 4)
    report = log.triage("cart")
    assert verdict(report, "cart")["verdict"] == "PRESENT"
    assert len(report.overlaps) == 1  # the double submit is still reported


def test_a_removed_key_names_its_remover_and_its_setter() -> None:
    log = Log()
    setter = log.event("i-1", 1, tool="add_gift_note", gift_note="Happy birthday!")
    remover = log.event(
        "i-2", 90, author="checkout_agent", tool="remove_gift_note", gift_note=REMOVED
    )
    shown = verdict(log.triage("gift_note"), "gift_note")
    assert shown["verdict"] == "REMOVED" and shown["value"] is None
    assert shown["written_by"]["event_id"] == setter and shown["changed_by"]["event_id"] == remover


def test_a_key_set_at_session_creation_is_present_without_any_delta() -> None:
    log = Log()
    log.event("i-1", 1)
    log.store("preferred_language", "pt")
    report = log.triage()
    shown = verdict(report, "preferred_language")
    assert (shown["verdict"], shown["cause"], shown["value"]) == (
        "PRESENT",
        "set_at_creation",
        "pt",
    )
    assert "create_session" in shown["why"]
    [row] = report.replayed.to_dict("records")  # the replay starts from the creation state
    assert (row["value"], row["stored_value"], row["matches"]) == ("pt", "pt", True)
    assert row["origin"] == "stored without a delta (create_session state)"


def test_empty_keys_judges_every_key_the_deltas_or_the_stored_state_name() -> None:
    log = Log()
    log.event("i-1", 1, a=1, temp__b=2)
    log.store("c", 3)
    assert list(log.triage().keys["key"]) == ["a", "temp:b", "c"]


def test_the_replay_applies_deltas_as_adk_does_across_the_app_and_the_user() -> None:
    log = Log()
    log.event("i-1", 1, cart=["kettle"], temp__quote=4.9, app__banner="sale", user__tier="silver")
    log.event("i-1", 2, partial=True, cart=["streamed"])
    log.event("i-9", 5, session="s-other", user__tier="gold", app__banner="spring")  # same user
    log.event("i-8", 6, session="s-stranger", user="u-2", user__tier="bronze", own="x")
    log.event("i-7", 6.5, session="s-billing", app="billing", app__banner="other app")
    log.event("i-1", 7, gift=REMOVED)
    frames = log.frames()
    ref = SessionRef(APP, USER, SID)
    writes = visible_writes(frames.state_writes, frames.events, frames.responses, ref)
    assert "own" not in set(writes["key"])  # another user's session-scoped key
    state = replay(writes).set_index("key")["value"].to_dict()
    assert state == {"cart": ["kettle"], "app:banner": "spring", "user:tier": "gold"}


def test_the_stored_state_the_session_sees_and_the_comparison() -> None:
    log = Log()
    log.event("i-1", 1, cart=["kettle"], gift="x")
    log.event("i-1", 2, gift=REMOVED, user__tier="gold")
    log.store("cart", ["kettle", "mug"])
    log.store("gift", None)  # ADK Python keeps a key set to None: it counts as absent
    log.store("user:tier", "gold", session=None)
    log.store("other", 1, session="s-other")  # another session's key: not seen
    frames = log.frames()
    ref = SessionRef(APP, USER, SID)
    stored = stored_state(frames.session_state, ref)
    assert set(stored["key"]) == {"cart", "gift", "user:tier"}
    writes = visible_writes(frames.state_writes, frames.events, frames.responses, ref)
    rows = compare(replay(writes), stored, store_keeps_state=True, written=writes["key"]).set_index(
        "key"
    )
    assert rows.loc["cart", "matches"] is False and rows.loc["cart", "stored_value"] == [
        "kettle",
        "mug",
    ]
    assert rows.loc["gift", "matches"] is True and rows.loc["user:tier", "matches"] is True
    unknown = compare(replay(writes), stored.iloc[0:0], store_keeps_state=False)
    assert unknown["matches"].isna().all()


def test_an_event_log_alone_says_it_holds_no_stored_state() -> None:
    log = Log()
    log.event("i-1", 1, cart=["kettle"])
    report = log.triage("cart")
    assert not report.store_keeps_state and report.differences.empty
    assert any("no stored session state" in note for note in report.notes)


def test_overlaps_pair_only_invocations_of_one_session_that_truly_overlap() -> None:
    rows = [
        ("s-1", "a", 0, 10),
        ("s-1", "b", 5, 12),  # overlaps a
        ("s-1", "c", 11, 20),  # overlaps b, not a
        ("s-1", "d", 20, 25),  # touches c: no overlap
        ("s-2", "e", 6, 9),  # another session
    ]
    ranges = pd.DataFrame(
        {
            "session_id": [r[0] for r in rows],
            "invocation_id": [r[1] for r in rows],
            "start": [at(r[2]) for r in rows],
            "end": [at(r[3]) for r in rows],
            "source": "events",
        }
    )
    pairs = overlaps.overlapping(ranges)
    assert list(zip(pairs["invocation_a"], pairs["invocation_b"], strict=True)) == [
        ("a", "b"),
        ("b", "c"),
    ]


def test_invocation_ranges_join_the_events_and_the_ledger() -> None:
    log = Log()
    log.event("i-1", 5)
    log.event("i-1", 8)
    log.run("i-1", 4, 9)
    log.event("i-2", 20)
    log.run("i-3", 30, 31)
    frames = log.frames()
    ranges = overlaps.invocation_ranges(frames.events, frames.runs).set_index("invocation_id")
    assert (ranges.loc["i-1", "start"], ranges.loc["i-1", "end"]) == (at(5), at(9))
    assert ranges.loc["i-3", "start"] == at(30)  # no event: the ledger's start stands in
    assert ranges["source"].to_dict() == {"i-1": "events+ledger", "i-2": "events", "i-3": "ledger"}


def test_an_unknown_session_or_another_app_is_a_parameter_error() -> None:
    log = Log()
    log.event("i-1", 1)
    frames = log.frames()
    with pytest.raises(ParameterError, match="1 session"):
        resolve_session(frames.events, frames.session_state, "s-nope")
    with pytest.raises(ParameterError, match="belongs to app_name 'shop'"):
        resolve_session(frames.events, frames.session_state, SID, app_name="travel")
    with pytest.raises(ParameterError, match="session_id is empty"):
        resolve_session(frames.events, frames.session_state, " ")


@pytest.mark.parametrize(
    ("given", "keys"),
    [
        ('["a", "b", "a"]', ["a", "b"]),
        ("cart", ["cart"]),
        ("", []),
        (["x"], ["x"]),
        (None, []),
    ],
)
def test_the_keys_parameter_takes_a_list_or_json_text(given: Any, keys: list[str]) -> None:
    assert list(KEYS.coerce("keys", given)) == keys


@pytest.mark.parametrize("given", ['["a", 3]', "[not json", [""], {"a": 1}])
def test_a_keys_parameter_that_is_no_list_of_keys_says_how_to_give_one(given: Any) -> None:
    with pytest.raises(ParameterError, match="keys is not"):
        KEYS.coerce("keys", given)


def test_a_tool_answer_that_mentions_a_key_no_delta_names_is_the_suspect() -> None:
    log = Log()
    log.event("i-1", 1, tool="add_to_cart", cart=["kettle"])
    culprit = log.event("i-1", 2, tool="lookup_loyalty")  # it set session.state directly
    log.event("i-1", 3, tool="check_stock")
    log.store("cart", ["kettle"])
    shown = verdict(log.triage("loyalty_tier"), "loyalty_tier")
    [suspect] = shown["suspects"]
    assert (suspect["event_id"], suspect["tool"]) == (culprit, "lookup_loyalty")
    assert "lookup_loyalty answered at" in shown["brief"] and culprit in shown["brief"]
    assert "Tool answers that mention it and wrote no delta: lookup_loyalty" in shown["why"]


def test_the_brief_of_a_race_names_the_lost_value_and_the_fix_the_cause() -> None:
    log = Log()
    log.event("i-1", 61, cart=["kettle", "mug"])
    log.event("i-2", 62, cart=["kettle", "towel"])
    log.run("i-1", 60, 62.5)
    log.run("i-2", 60.4, 63)
    log.event("i-3", 90, partial=True, draft="streamed")
    report = log.triage("cart", "draft")
    cart, draft = verdict(report, "cart"), verdict(report, "draft")
    assert "['kettle', 'mug'] was lost to ['kettle', 'towel']" in cart["brief"]
    assert "final event" in draft["fix"] and "tool_context.state" not in draft["fix"]


def test_a_value_reads_as_json_not_as_python() -> None:
    from incidentkit.flows._text import json_text

    assert json_text(["kettle-blue", "mug-red"]) == '["kettle-blue", "mug-red"]'
    assert json_text({"eur": 4.9, "carrier": "CTT"}) == '{"carrier": "CTT", "eur": 4.9}'
    assert json_text("café") == '"café"' and json_text(None) == "null"
