"""ADK 2.x markers in the vanished-state flow, on small hand-built frames: a rewind's own
verdict (REWOUND), ``app:``/``user:`` keys a rewind keeps, no "user" blamed for a marker, and
overlaps that ignore marker events."""

from __future__ import annotations

from typing import Any

import pandas as pd

from incidentkit.findings import Severity
from incidentkit.flows.common import Frames
from incidentkit.flows.vanished_state import overlaps
from incidentkit.flows.vanished_state.findings import vanished_state_findings
from incidentkit.flows.vanished_state.suspects import state_suspects
from incidentkit.flows.vanished_state.triage import VanishedReport, triage_vanished_state
from incidentkit.frames import build

APP, USER, SID = "shop", "u-1", "s-1"
T0 = pd.Timestamp("2026-11-29T14:00:00Z")
AS_OF = T0 + pd.Timedelta(hours=1)


def at(seconds: float) -> pd.Timestamp:
    return T0 + pd.Timedelta(seconds=seconds)


def scope_of(key: str) -> str:
    return next((s for s in ("app", "user", "temp") if key.startswith(f"{s}:")), "session")


class Store:
    """A session store with ADK 2.x markers, written as ADK writes it: a rewind appends an
    event (author ``user``, an id of its own) and marks the events it undid."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.writes: list[dict[str, Any]] = []
        self.stored: list[dict[str, Any]] = []

    def event(
        self, inv: str, second: float, *, author: str = "planner", kind: str = "turn", **delta: Any
    ) -> str:
        event_id = f"ev-{len(self.events)}"
        self.events.append(
            {
                "event_id": event_id,
                "app_name": APP,
                "user_id": USER,
                "session_id": SID,
                "invocation_id": inv,
                "seq": len(self.events),
                "ts": at(second),
                "author": author,
                "kind": kind,
            }
        )
        for key, value in delta.items():
            key = key.replace("__", ":")
            self.writes.append(
                {
                    "event_id": event_id,
                    "session_id": SID,
                    "invocation_id": inv,
                    "seq": len(self.events) - 1,
                    "ts": at(second),
                    "author": author,
                    "key": key,
                    "scope": scope_of(key),
                    "value": value,
                    "removed": value is None,
                }
            )
        return event_id

    def rewind(self, before: str, second: float, **delta: Any) -> str:
        """A rewind before invocation ``before``: every event from its first on is undone."""
        first = next(n for n, e in enumerate(self.events) if e["invocation_id"] == before)
        event_id = self.event(f"r-{before}", second, author="user", kind="rewind", **delta)
        self.events[-1]["rewind_before"] = before
        for undone in self.events[first:-1]:
            undone["rewound_by"] = event_id
        return event_id

    def store(self, key: str, value: Any) -> None:
        scope = scope_of(key)
        self.stored.append(
            {
                "app_name": APP,
                "user_id": None if scope == "app" else USER,
                "session_id": SID if scope == "session" else None,
                "scope": scope,
                "key": key,
                "value": value,
                "source": f"{'sessions' if scope == 'session' else scope + '_states'}.state",
                "updated_at": AS_OF,
            }
        )

    def frames(self) -> Frames:
        return Frames(
            runs=build("runs", []),
            events=build("events", self.events),
            responses=build("responses", []),
            state_writes=build("state_writes", self.writes),
            session_state=build("session_state", self.stored),
        )

    def triage(self, *keys: str) -> VanishedReport:
        return triage_vanished_state(self.frames(), SID, as_of=AS_OF, keys=keys)


def verdicts(report: VanishedReport) -> dict[str, dict[str, Any]]:
    """Each key's row, a missing cause or value as None."""
    found: dict[str, dict[str, Any]] = {}
    for row in report.keys.astype({"cause": object}).to_dict("records"):
        shown = {str(col): value for col, value in row.items()}
        for col in ("cause", "value"):
            shown[col] = None if isinstance(shown[col], float) else shown[col]  # NaN
        found[str(row["key"])] = shown
    return found


def overwrite_then_rewind() -> tuple[Store, str]:
    """create_session(channel=chat); i-1 plan=basic, app:promo=basic; i-2 plan=premium,
    discount=10, app:promo=premium; i-3 note=rush; a rewind before i-2; i-4 asks."""
    store = Store()
    store.event("i-1", 1, author="user")
    store.event("i-1", 2, plan="basic", app__promo="basic")
    store.event("i-2", 3, author="user")
    store.event("i-2", 4, plan="premium", discount=10, app__promo="premium")
    store.event("i-3", 5, note="rush")
    rewind = store.rewind("i-2", 6, plan="basic", discount=None, note=None, channel=None)
    store.event("i-4", 7, author="user")
    for key, value in (("plan", "basic"), ("discount", None), ("note", None), ("channel", None)):
        store.store(key, value)
    store.store("app:promo", "premium")
    return store, rewind


def test_a_key_a_rewind_restored_is_rewound_with_the_rewind_and_the_write_it_undid() -> None:
    store, rewind = overwrite_then_rewind()
    plan = verdicts(store.triage())["plan"]
    assert (plan["verdict"], plan["cause"], plan["value"]) == ("REWOUND", None, "basic")
    assert plan["changed_by"]["event_id"] == rewind
    assert plan["changed_by"]["kind"] == "rewind" and plan["changed_by"]["rewind_before"] == "i-2"
    assert plan["changed_by"]["undid"] == ("i-2", "i-3")
    assert (
        plan["changed_by"]["author"] == f"a rewind (event {rewind}) undoing invocations i-2 and i-3"
    )
    assert plan["written_by"]["event_id"] == "ev-3"  # premium, the write it undid
    assert 'restored it to "basic"' in plan["why"] and "before invocation i-2" in plan["why"]
    assert "set by planner in invocation i-1" in plan["why"]
    assert plan["fix"].startswith("The state was rolled back by Runner.rewind_async")


def test_keys_first_written_in_undone_invocations_are_rewound_as_removed() -> None:
    store, rewind = overwrite_then_rewind()
    found = verdicts(store.triage())
    for key, undone in (("discount", "ev-3"), ("note", "ev-4")):
        row = found[key]
        assert (row["verdict"], row["cause"], row["value"]) == ("REWOUND", None, None), key
        assert row["written_by"]["event_id"] == undone and row["changed_by"]["event_id"] == rewind


def test_creation_state_a_rewind_nulled_names_adks_behaviour() -> None:
    store, rewind = overwrite_then_rewind()
    channel = verdicts(store.triage())["channel"]
    assert (channel["verdict"], channel["cause"]) == ("REWOUND", "creation_state_nulled")
    assert channel["written_by"] is None and channel["changed_by"]["event_id"] == rewind
    assert "#4933" in channel["why"] and "create_session" in channel["why"]
    assert "#4933" in channel["brief"] and "#4933" in channel["fix"]


def test_an_app_key_is_never_rewound_and_keeps_the_verdict_of_its_own_writes() -> None:
    store, _ = overwrite_then_rewind()
    promo = verdicts(store.triage())["app:promo"]
    assert promo["verdict"] == "OVERWRITTEN" and promo["value"] == "premium"
    assert promo["changed_by"]["event_id"] == "ev-3"  # the undone write: ADK kept it
    assert "does not revert app:/user: keys" in promo["why"]
    assert "kept through the rewind" in promo["brief"]


def test_no_user_is_blamed_for_a_rewind() -> None:
    store, _ = overwrite_then_rewind()
    for row in verdicts(store.triage()).values():
        for field in ("written_by", "changed_by", "raced_with"):
            if row[field] is not None and row[field].get("kind") == "rewind":
                assert row[field]["author"].startswith("a rewind (event "), row["key"]
        assert "user in invocation r-" not in row["why"] and "by user" not in row["brief"]


def test_a_write_after_the_rewind_overwrites_what_the_rewind_restored() -> None:
    store, rewind = overwrite_then_rewind()
    store.event("i-4", 8, plan="gold")
    plan = verdicts(store.triage())["plan"]
    assert plan["verdict"] == "OVERWRITTEN" and plan["value"] == "gold"
    assert plan["written_by"]["event_id"] == rewind  # the rewind's basic, not premium
    assert plan["written_by"]["author"].startswith("a rewind (event ")
    assert plan["why"].startswith('a rewind undoing invocations i-2 and i-3 wrote "basic"')


def test_an_undone_write_is_no_evidence_of_an_overwrite() -> None:
    """A write the rewind undid with the value the key had anyway: the rewind's delta need not
    name the key (ADK computes it from the values), and the key stays as i-1 wrote it."""
    store = Store()
    store.event("i-1", 1, tier="gold")
    store.event("i-2", 2, tier="gold", seat="12A")
    store.rewind("i-2", 3, seat=None)
    tier = verdicts(store.triage())["tier"]
    assert (tier["verdict"], tier["written_by"]["event_id"]) == ("PRESENT", "ev-0")
    assert tier["changed_by"] is None


def test_a_key_set_and_removed_inside_the_undone_invocations_is_rewound() -> None:
    store = Store()
    store.event("i-1", 1)
    store.event("i-2", 2, draft="x")
    store.event("i-2", 3, draft=None)
    rewind = store.rewind("i-2", 4)
    draft = verdicts(store.triage())["draft"]
    assert (draft["verdict"], draft["changed_by"]["event_id"]) == ("REWOUND", rewind)
    assert draft["changed_by"]["undid"] == ("i-2",) and "every write of it" in draft["why"]


def test_rewound_keys_are_read_but_are_no_keys_that_did_not_stick() -> None:
    store, _ = overwrite_then_rewind()
    report = store.triage("plan", "discount", "channel")
    found = vanished_state_findings(report)
    keys = found.items[0]
    assert keys.severity is Severity.WARNING  # worth reading: was the rewind meant?
    assert "did not stick" not in keys.title
    assert keys.title.startswith(f"3 of 3 key(s) of session {SID} rolled back by a rewind")
    assert found.summary["rewound"] == 3 and found.summary["removed"] == 0
    assert "Runner.rewind_async" in keys.action
    assert any("rewound 1 time(s)" in note for note in report.notes)
    mixed = vanished_state_findings(store.triage())
    title = mixed.items[0].title  # app:promo, and plan, discount, note, channel
    assert "1 of 5 key(s)" in title and "; 4 key(s) rolled back by a rewind" in title


def test_a_session_without_markers_keeps_its_verdicts() -> None:
    """A frame with no ``kind``/``rewound_by`` (hand-built, an old snapshot): every event a
    turn; the same writes then read as the overwrite and removals they look like."""
    store, _ = overwrite_then_rewind()
    frames = store.frames()
    bare = frames.events.drop(columns=["kind", "rewound_by", "rewind_before"])
    plain = triage_vanished_state(Frames(**{**frames.__dict__, "events": bare}), SID, as_of=AS_OF)
    found = verdicts(plain)
    assert found["discount"]["verdict"] == "REMOVED" and found["plan"]["verdict"] != "REWOUND"


def compaction_stamped_late() -> Frames:
    """i-1 triggers a compaction whose event is stamped while i-2 runs."""
    store = Store()
    store.event("i-1", 1, author="user")
    store.event("i-1", 2, cart=["kettle"])
    store.event("i-2", 3, author="user")
    store.event("c-1", 4, author="user", kind="compaction")
    store.event("i-2", 5, cart=["kettle", "mug"])
    store.event("i-3", 6, author="user")
    store.event("i-3", 7, kind="checkpoint")
    return store.frames()


def test_a_marker_event_never_makes_an_overlap() -> None:
    frames = compaction_stamped_late()
    ranges = overlaps.invocation_ranges(frames.events, frames.runs)
    assert set(ranges["invocation_id"]) == {"i-1", "i-2", "i-3"}
    assert overlaps.overlapping(ranges).empty
    report = triage_vanished_state(frames, SID, as_of=AS_OF)
    assert report.overlaps.empty and verdicts(report)["cart"]["verdict"] == "OVERWRITTEN"
    found = state_suspects(frames.events, build("calls", []), frames.responses, frames.state_writes)
    assert found.suspects.empty or int(found.suspects["overlaps"].sum()) == 0
    as_turns = frames.events.assign(kind="turn")  # read as a turn, the compaction races i-2
    assert len(overlaps.overlapping(overlaps.invocation_ranges(as_turns, frames.runs))) == 1
