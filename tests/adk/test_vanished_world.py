"""The vanished-state world written by the real google-adk, read straight from its store.

``adk_vanished_world.build_vanished_world`` runs ``ik_vanished`` through ADK into each store
kind; these tests pin, with SQL of their own (not through the kit), what ADK stored for each
way a state key vanishes: the ``events`` rows' ``state_delta``s and the ``sessions``,
``app_states`` and ``user_states`` tables. They are the raw facts a per-key verdict engine
builds on; the kit's ``state_writes`` frame is checked against them. Like
``test_runaway_world.py`` they fail, never skip, without the adk extra.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pandas as pd
import pytest
import sqlalchemy as sa
from conftest import _fresh_database
from sqlalchemy.engine import make_url

from incidentkit.evidence import open_evidence
from incidentkit.manifest import load_manifest

pytestmark = [pytest.mark.adk, pytest.mark.xdist_group("adk_vanished_world")]  # worlds built once

INSTALL = "pip install -e '.[adk]'"


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # the parent package is missing
        return False


@pytest.fixture(scope="module")
def vw() -> ModuleType:
    """The world's module, or a failure naming the extra (import errors past that check mean
    ADK's API changed: fix adk_vanished_world.py)."""
    missing = [name for name in ("google.adk", "opentelemetry.sdk", "aiosqlite") if not _has(name)]
    if missing:
        pytest.fail(
            f"the ADK vanished-state world needs {', '.join(missing)}, from the project's adk "
            f"extra (google-adk[db], opentelemetry-sdk, aiosqlite); install it: {INSTALL}",
            pytrace=False,
        )
    from . import adk_vanished_world

    return adk_vanished_world


@pytest.fixture(scope="module")
def pg_store(pg_admin_url: str) -> Iterator[str]:
    """An empty PostgreSQL database for ADK (psycopg 3, ADK's async driver), dropped after the
    module."""
    for url in _fresh_database(pg_admin_url, "ik_vanished"):
        yield (
            make_url(url).set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
        )


@pytest.fixture(
    scope="module",
    params=["sqlite", "database", pytest.param("postgresql", marks=pytest.mark.postgres)],
)
def world(
    request: pytest.FixtureRequest, vw: ModuleType, tmp_path_factory: pytest.TempPathFactory
) -> Any:
    """The world built once per store kind."""
    store = str(request.param)
    url = request.getfixturevalue("pg_store") if store == "postgresql" else None
    return vw.build_vanished_world(store, tmp_path_factory.mktemp(f"vanished-{store}"), url=url)


# --- reading the store -------------------------------------------------------------------------


def _json(value: Any) -> Any:
    """A JSON column as stored: TEXT on SQLite, jsonb (already decoded) on PostgreSQL."""
    return json.loads(value) if isinstance(value, str) else value


def _query(world: Any, sql: str, **params: Any) -> list[dict[str, Any]]:
    engine = sa.create_engine(world.read_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return [dict(row) for row in conn.execute(sa.text(sql), params).mappings()]
    finally:
        engine.dispose()


def _events(world: Any) -> list[dict[str, Any]]:
    """Every stored event row of the app, in time order, ``event_data`` decoded."""
    rows = _query(
        world,
        "SELECT id, session_id, invocation_id, event_data FROM events WHERE app_name = :app",
        app=world.app,
    )
    for row in rows:
        row["event_data"] = _json(row["event_data"])
    return sorted(rows, key=lambda row: (row["event_data"]["timestamp"], row["id"]))


def _delta(row: dict[str, Any]) -> dict[str, Any]:
    return dict(row["event_data"].get("actions", {}).get("state_delta") or {})


def _writes(world: Any, key: str) -> list[tuple[str, str, str, str, Any]]:
    """(session id, invocation id, author, event id, value) of each stored delta with ``key``."""
    return [
        (row["session_id"], row["invocation_id"], row["event_data"]["author"], row["id"], d[key])
        for row in _events(world)
        if key in (d := _delta(row))
    ]


def _session_state(world: Any, session_id: str) -> dict[str, Any]:
    (row,) = _query(
        world,
        "SELECT state FROM sessions WHERE app_name = :app AND user_id = :user AND id = :id",
        app=world.app,
        user=world.user,
        id=session_id,
    )
    state: dict[str, Any] = _json(row["state"])
    return state


def _app_state(world: Any) -> dict[str, Any]:
    (row,) = _query(world, "SELECT state FROM app_states WHERE app_name = :app", app=world.app)
    state: dict[str, Any] = _json(row["state"])
    return state


def _user_state(world: Any) -> dict[str, Any]:
    (row,) = _query(
        world,
        "SELECT state FROM user_states WHERE app_name = :app AND user_id = :user",
        app=world.app,
        user=world.user,
    )
    state: dict[str, Any] = _json(row["state"])
    return state


def _merged(world: Any, session_id: str) -> dict[str, Any]:
    """A session's state as the three tables hold it, merged as ``get_session`` documents:
    session keys, then app_states and user_states keys with their prefix put back."""
    merged = _session_state(world, session_id)
    merged |= {f"app:{k}": v for k, v in _app_state(world).items()}
    merged |= {f"user:{k}": v for k, v in _user_state(world).items()}
    return merged


def _responses(world: Any, invocation_id: str, tool: str) -> list[tuple[str, Any]]:
    """(event id, response) of each stored function response of ``tool`` in one invocation."""
    return [
        (row["id"], part["function_response"]["response"])
        for row in _events(world)
        if row["invocation_id"] == invocation_id
        for part in row["event_data"].get("content", {}).get("parts", [])
        if part.get("function_response", {}).get("name") == tool
    ]


def _raw_text(world: Any) -> str:
    """Every stored event and state row as one JSON text (for "appears nowhere" checks)."""
    tables = [
        [row["event_data"] for row in _events(world)],
        [_json(r["state"]) for r in _query(world, "SELECT state FROM sessions")],
        [_json(r["state"]) for r in _query(world, "SELECT state FROM app_states")],
        [_json(r["state"]) for r in _query(world, "SELECT state FROM user_states")],
    ]
    return json.dumps(tables)


# --- the world itself --------------------------------------------------------------------------


def test_the_world_ran_as_planned(world: Any, vw: ModuleType) -> None:
    labels = [inv.label for inv in world.invocations]
    assert labels == [turn.label for group in vw.plan() for turn in group]
    assert len({inv.invocation_id for inv in world.invocations}) == len(labels)
    rows = _events(world)
    assert {row["session_id"] for row in rows} == {world.session_id, world.second_session_id}
    stored = {row["invocation_id"] for row in rows}
    for inv in world.invocations:
        if inv.label == "cart-second":
            continue
        assert inv.error is None, inv.label
        assert inv.invocation_id in stored, inv.label
        assert inv.stored_events == sum(r["invocation_id"] == inv.invocation_id for r in rows)
        assert inv.model_calls == len(_turn(vw, inv.label).steps), inv.label
    assert world.invocation("upgrade").session_id == world.second_session_id
    assert {inv.session_id for inv in world.invocations if inv.label != "upgrade"} == {
        world.session_id
    }
    assert world.build_seconds > 0


def _turn(vw: ModuleType, label: str) -> Any:
    (turn,) = [turn for group in vw.plan() for turn in group if turn.label == label]
    return turn


def test_the_truth_names_every_key_with_its_verdict(world: Any, vw: ModuleType) -> None:
    verdicts = {key: (truth["verdict"], truth["cause"]) for key, truth in world.keys.items()}
    assert verdicts == {
        "preferred_language": ("PRESENT", None),
        "user:plan": ("PRESENT", None),
        "shipping_address": ("PRESENT", None),
        "temp:quote": ("TEMP_PREFIX", None),
        "loyalty_tier": ("NEVER_DURABLE", "direct_mutation"),
        "coupon_code": ("OVERWRITTEN", None),
        "gift_note": ("REMOVED", None),
        "app:banner": ("PRESENT", None),
        "user:tier": ("OVERWRITTEN", None),
        "cart": ("PRESENT", None),  # ADK rejected the concurrent write: see the cart test
    }
    assert all(isinstance(truth["verdict"], vw.Verdict) for truth in world.keys.values())
    scopes = {key: truth["scope"] for key, truth in world.keys.items()}
    assert scopes["temp:quote"] == "temp" and scopes["app:banner"] == "app"
    assert scopes["user:tier"] == scopes["user:plan"] == "user"
    assert scopes["gift_note"] == scopes["loyalty_tier"] == "session"


def test_the_truth_matches_the_stored_deltas_and_state(world: Any) -> None:
    merged = _merged(world, world.session_id)
    for key, truth in world.keys.items():
        writes = [
            (w["session_id"], w["invocation_id"], w["author"], w["event_id"], w["value"])
            for w in truth["writes"]
        ]
        assert writes == _writes(world, key), key
        assert truth["stored"] is (key in merged), key
        assert truth["final_value"] == merged.get(key), key


def test_stored_state_is_what_get_session_merges_from_the_tables(world: Any) -> None:
    merged = _merged(world, world.session_id)
    assert dict(world.stored_state) == merged
    assert world.stored_state == {
        "preferred_language": "pt",
        "shipping_address": "Rua Augusta 10, 1100-053 Lisboa",
        "coupon_code": "SPRING5",
        "gift_note": None,
        "cart": ["kettle"],
        "app:banner": "Spring sale: 20% off all mugs",
        "user:plan": "pro",
        "user:tier": "platinum",
    }
    # The second session keeps no session key of its own; it shares app: and user: state.
    assert _session_state(world, world.second_session_id) == {}
    assert dict(world.second_stored_state) == _merged(world, world.second_session_id)
    assert dict(world.second_stored_state) == {
        k: v for k, v in merged.items() if k.startswith(("app:", "user:"))
    }


# --- each way a key vanishes, as stored --------------------------------------------------------


def test_keys_set_at_creation_are_in_the_state_tables_and_in_no_delta(world: Any) -> None:
    assert _session_state(world, world.session_id)["preferred_language"] == "pt"
    assert _writes(world, "preferred_language") == []
    # user:plan lives in user_states, its prefix stripped; sessions.state does not hold it.
    assert _user_state(world)["plan"] == "pro"
    session = _session_state(world, world.session_id)
    assert "user:plan" not in session and "plan" not in session
    assert _writes(world, "user:plan") == [] and _writes(world, "plan") == []
    assert not any(_delta(row) for row in _events(world) if row["event_data"]["author"] == "user")


def test_shipping_address_is_written_once_and_kept(world: Any, vw: ModuleType) -> None:
    inv = world.invocation("address")
    [(session, invocation, author, _, value)] = _writes(world, "shipping_address")
    assert (session, invocation, author, value) == (
        world.session_id,
        inv.invocation_id,
        vw.ROOT,
        vw.ADDRESS,
    )
    assert _session_state(world, world.session_id)["shipping_address"] == vw.ADDRESS


def test_no_stored_delta_holds_the_temp_key(world: Any, vw: ModuleType) -> None:
    rows = _events(world)
    assert not any(key.startswith("temp:") for row in rows for key in _delta(row))
    assert "temp:quote" not in _session_state(world, world.session_id)
    assert "temp:" not in _raw_text(world)  # nowhere in the store, under any key
    # The tool did write it: its stored response carries the quote the state never kept.
    inv = world.invocation("quote")
    [(event_id, response)] = _responses(world, inv.invocation_id, "quote_shipping")
    assert response == dict(vw.QUOTE)
    facts = world.keys["temp:quote"]["facts"]
    assert (facts["tool_response_event_id"], facts["invocation_id"]) == (
        event_id,
        inv.invocation_id,
    )
    # ... and the event that carries the tool's response has an empty stored delta.
    (row,) = [row for row in rows if row["id"] == event_id]
    assert _delta(row) == {}


def test_the_direct_mutation_never_reaches_the_store(world: Any, vw: ModuleType) -> None:
    assert not any("loyalty_tier" in _delta(row) for row in _events(world))
    assert "loyalty_tier" not in _session_state(world, world.session_id)
    assert "loyalty_tier" not in _raw_text(world)
    assert "loyalty_tier" not in world.stored_state
    assert "loyalty_tier" not in json.loads(world.session_file.read_text(encoding="utf-8"))["state"]
    # Yet the invocation saw it: a later tool of the same invocation read it from the state.
    inv = world.invocation("loyalty")
    [(event_id, response)] = _responses(world, inv.invocation_id, "loyalty_discount")
    assert response == {"tier": vw.LOYALTY_TIER, "discount_pct": 10}
    facts = world.keys["loyalty_tier"]["facts"]
    assert facts["read_back"] == response and facts["read_back_event_id"] == event_id
    # Not even the check_loyalty call that triggered the callback stored a delta.
    ids = {eid for eid, _ in _responses(world, inv.invocation_id, "check_loyalty")}
    assert ids and all(_delta(row) == {} for row in _events(world) if row["id"] in ids)


def test_coupon_code_is_overwritten_by_another_agent_later(world: Any, vw: ModuleType) -> None:
    first, later = world.invocation("coupon"), world.invocation("promo")
    writes = _writes(world, "coupon_code")
    assert [(w[1], w[2], w[4]) for w in writes] == [
        (first.invocation_id, vw.ROOT, vw.FIRST_COUPON),
        (later.invocation_id, vw.PROMO, vw.SECOND_COUPON),
    ]
    assert {w[0] for w in writes} == {world.session_id}
    assert _session_state(world, world.session_id)["coupon_code"] == vw.SECOND_COUPON


def test_the_removal_is_stored_as_a_null(world: Any, vw: ModuleType) -> None:
    added, removed = world.invocation("coupon"), world.invocation("unnote")
    writes = _writes(world, "gift_note")
    assert [(w[1], w[4]) for w in writes] == [
        (added.invocation_id, vw.GIFT_NOTE),
        (removed.invocation_id, None),
    ]
    # ADK Python has no removal: the key stays in sessions.state with a JSON null.
    session = _session_state(world, world.session_id)
    assert "gift_note" in session and session["gift_note"] is None
    assert "gift_note" in world.stored_state and world.stored_state["gift_note"] is None
    (row,) = [row for row in _events(world) if row["id"] == writes[-1][3]]
    assert row["event_data"]["actions"]["state_delta"] == {"gift_note": None}


def test_app_and_user_keys_live_in_their_tables(world: Any, vw: ModuleType) -> None:
    assert _app_state(world) == {"banner": vw.BANNER}
    assert _user_state(world) == {"plan": "pro", "tier": vw.SECOND_TIER}
    for session_id in (world.session_id, world.second_session_id):
        keys = set(_session_state(world, session_id))
        assert not {"banner", "tier", "app:banner", "user:tier"} & keys
    # The events keep the prefix.
    scopes = world.invocation("scopes")
    [(session, invocation, _, _, value)] = _writes(world, "app:banner")
    assert (session, invocation, value) == (world.session_id, scopes.invocation_id, vw.BANNER)
    assert _writes(world, "banner") == [] and _writes(world, "tier") == []


def test_user_tier_final_value_comes_from_the_second_session(world: Any, vw: ModuleType) -> None:
    scopes, upgrade = world.invocation("scopes"), world.invocation("upgrade")
    writes = _writes(world, "user:tier")
    assert [(w[0], w[1], w[4]) for w in writes] == [
        (world.session_id, scopes.invocation_id, vw.FIRST_TIER),
        (world.second_session_id, upgrade.invocation_id, vw.SECOND_TIER),
    ]
    # Replaying the main session's deltas alone gives the stale value.
    main_only = [w[4] for w in writes if w[0] == world.session_id]
    assert main_only[-1] == vw.FIRST_TIER != _user_state(world)["tier"]
    assert world.stored_state["user:tier"] == vw.SECOND_TIER
    assert world.keys["user:tier"]["writes"][-1]["session_id"] == world.second_session_id


def test_adk_rejects_the_concurrent_invocation(world: Any, vw: ModuleType) -> None:
    winner, loser = world.invocation("cart-first"), world.invocation("cart-second")
    assert winner.error is None
    assert loser.error is not None and loser.error.startswith("StaleSessionError: ")
    assert (loser.model_calls, loser.stored_events) == (0, 0)
    rows = _events(world)
    # Nothing of the rejected invocation is stored: not its user message, no error event.
    assert not [row for row in rows if row["invocation_id"] == loser.invocation_id]
    assert loser.text not in json.dumps([row["event_data"] for row in rows])
    assert vw.LOSER_ITEM not in json.dumps([_delta(row) for row in rows])
    assert [(w[1], w[4]) for w in _writes(world, "cart")] == [
        (winner.invocation_id, [vw.WINNER_ITEM])
    ]
    assert _session_state(world, world.session_id)["cart"] == [vw.WINNER_ITEM]
    facts = world.concurrency
    assert facts["rejected"] == [loser.invocation_id]
    assert facts["cart_writers"] == [winner.invocation_id]
    assert facts["errors"] == {winner.invocation_id: None, loser.invocation_id: loser.error}
    assert world.keys["cart"]["facts"]["concurrency"] == dict(facts)


# --- the evidence the kit reads ----------------------------------------------------------------


def test_the_manifest_points_at_the_store(world: Any, vw: ModuleType) -> None:
    manifest = load_manifest(world.manifest)
    assert manifest.apps == {vw.APP: {}}
    assert manifest.sources["events"].format == "adk-python-db"


def test_the_state_writes_frame_is_what_adk_stored(world: Any) -> None:
    evidence = open_evidence(world.manifest, environ=world.environ)
    assert evidence.rejects.empty, evidence.rejects.to_string()
    frame = evidence.state_writes.sort_values(["ts", "seq"], kind="stable")
    got = [
        (r["session_id"], r["invocation_id"], r["author"], r["event_id"], r["key"], r["value"])
        for r in frame.to_dict("records")
    ]
    want = [
        (row["session_id"], row["invocation_id"], row["event_data"]["author"], row["id"], k, v)
        for row in _events(world)
        for k, v in _delta(row).items()
    ]
    assert sorted(got, key=repr) == sorted(want, key=repr)
    assert not {"temp:quote", "loyalty_tier", "preferred_language", "user:plan"} & set(frame["key"])
    removed = frame.loc[frame["removed"].astype(bool)]
    assert list(removed["key"]) == ["gift_note"]
    assert removed["invocation_id"].tolist() == [world.invocation("unnote").invocation_id]
    assert pd.isna(removed["value"].iloc[0])


def test_the_saved_session_json_is_the_main_session(world: Any) -> None:
    saved = json.loads(world.session_file.read_text(encoding="utf-8"))
    assert world.session_file.parent == world.folder
    assert saved["id"] == world.session_id and saved["appName"] == world.app
    assert saved["state"] == _merged(world, world.session_id)
    stored = [row["id"] for row in _events(world) if row["session_id"] == world.session_id]
    assert sorted(event["id"] for event in saved["events"]) == sorted(stored)
    deltas = [event["actions"].get("stateDelta", {}) for event in saved["events"]]
    assert {"gift_note": None} in deltas
    assert not any(k.startswith("temp:") or k == "loyalty_tier" for d in deltas for k in d)


# --- the vanished-state flow on what ADK stored --------------------------------------------------


def _flow(evidence: Any, session_id: str, keys: list[str]) -> dict[str, Any]:
    from incidentkit.flows import vanished_state as vs

    incident, settings = vs.setup(evidence, session_id=session_id, keys=keys)
    report = vs.triage(incident, settings)
    findings: dict[str, Any] = vs.findings(report, incident, settings).to_dict()
    return findings


def _items(findings: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["id"]: item for item in findings["items"]}


def test_the_flow_gives_each_key_the_verdict_of_what_adk_stored(world: Any) -> None:
    incident = open_evidence(world.manifest, environ=world.environ)
    findings = _flow(incident, world.session_id, list(world.keys))
    rows = {row["key"]: row for row in _items(findings)["vanished_state/keys"]["rows"]}
    for key, truth in world.keys.items():
        row = rows[key]
        assert row["verdict"] == truth["verdict"], (key, row["why"])
        if truth["verdict"] == "NEVER_DURABLE":
            assert row["cause"] == truth["cause"], key
        if truth["verdict"] in ("PRESENT", "OVERWRITTEN"):
            assert row["value"] == truth["final_value"], key
        if truth["verdict"] in ("OVERWRITTEN", "REMOVED"):
            last = truth["writes"][-1]
            assert row["changed_by"]["event_id"] == last["event_id"], key
            assert row["changed_by"]["invocation_id"] == last["invocation_id"], key
        if truth["verdict"] == "PRESENT" and not truth["writes"]:
            assert row["cause"] == "set_at_creation", key  # no delta: create_session state
    tier = rows["user:tier"]  # the user's other session changed it
    assert tier["changed_by"]["session_id"] == world.second_session_id
    replayed = _items(findings)["vanished_state/replayed-state"]
    assert all(row["matches"] for row in replayed["rows"]), replayed["rows"]
    assert findings["verdict"] == "ACTION_NEEDED"


def test_from_the_saved_session_json_the_other_sessions_write_shows_as_a_difference(
    world: Any, tmp_path: Any
) -> None:
    manifest = tmp_path / "evidence.toml"
    manifest.write_text(
        "allow_outside = true\n"
        f'[events]\npath = "{world.session_file}"\nformat = "adk-session-json"\n',
        encoding="utf-8",
    )
    findings = _flow(manifest, world.session_id, list(world.keys))
    rows = {row["key"]: row for row in _items(findings)["vanished_state/keys"]["rows"]}
    assert rows["loyalty_tier"]["verdict"] == "NEVER_DURABLE"
    assert rows["preferred_language"]["cause"] == "set_at_creation"
    replayed = {
        row["key"]: row for row in _items(findings)["vanished_state/replayed-state"]["rows"]
    }
    # The JSON holds this session's events only: its user:tier write replays to the first value,
    # while its state (merged by get_session) holds the second session's.
    tier = replayed["user:tier"]
    assert (tier["value"], tier["stored_value"], tier["matches"]) == (
        world.keys["user:tier"]["writes"][0]["value"],
        world.keys["user:tier"]["final_value"],
        False,
    )
    assert _items(findings)["vanished_state/replayed-state"]["severity"] == "WARNING"
