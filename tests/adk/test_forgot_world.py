""" "The agent forgot" on a plain ADK Python store written by the real google-adk: the triage
card names the session where the address vanished and the key to judge, never CLEAN, and the
command it gives finds the cause (``adk_forgot_world``). Like the other worlds, these tests
fail, never skip, without the adk extra."""

from __future__ import annotations

import importlib.util
import json
import shlex
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import sqlalchemy as sa
from conftest import read_run

from incidentkit.flows import overview, vanished_state

pytestmark = [pytest.mark.adk, pytest.mark.xdist_group("adk_forgot_world")]  # worlds built once


@pytest.fixture(scope="module")
def fw() -> ModuleType:
    missing = [m for m in ("google.adk", "aiosqlite") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.fail(
            f"the forgot world needs {', '.join(missing)} (pip install -e '.[adk]')",
            pytrace=False,
        )
    from . import adk_forgot_world

    return adk_forgot_world


@pytest.fixture(scope="module")
def world(fw: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return fw.build_forgot_world(tmp_path_factory.mktemp("forgot"))


def _deltas(world: Any) -> dict[str, list[dict[str, Any]]]:
    """Each session's stored state deltas, read with SQL of our own (not the kit's)."""
    engine = sa.create_engine(f"sqlite:///{world.folder / 'adk.db'}", poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT session_id, event_data FROM events")).all()
    finally:
        engine.dispose()
    out: dict[str, list[dict[str, Any]]] = {}
    for session_id, data in rows:
        delta = (json.loads(data).get("actions") or {}).get("state_delta") or {}
        out.setdefault(session_id, []).append(delta)
    return out


def test_the_real_adk_lost_the_address_and_stored_no_trace_of_the_temp_key(
    world: Any, fw: ModuleType
) -> None:
    assert world.answered == {"address": None}  # the second turn found no address
    assert fw.KEY not in world.stored_state[fw.LOST]
    assert fw.KEY in world.stored_state["first"] and fw.KEY in world.stored_state["second"]
    deltas = _deltas(world)
    assert not any(fw.KEY in d or fw.TEMP_KEY in d for d in deltas[world.lost])
    assert any(fw.KEY in d for d in deltas[world.session_ids["first"]])


def _card(world: Any) -> tuple[Any, Any]:
    incident, settings = overview.setup(world.manifest, symptom="forgot")
    report = overview.triage(incident, settings)
    return report, overview.findings(report, incident, settings)


def test_forgot_names_the_session_and_the_key_never_clean(world: Any, fw: ModuleType) -> None:
    report, found = _card(world)
    assert found.verdict.value == "ACTION_NEEDED"
    card = next(item for item in found.items if item.id == "overview/card")
    assert "open the vanished_state flow first" in card.title and world.lost in card.title
    state = [row for row in card.rows if row["check"] == "state-can-vanish"]
    assert [row["session_id"] for row in state] == [world.lost]  # the others kept their keys
    (line,) = state
    assert line["severity"] == "WARNING" and fw.KEY in line["keys"].split(",")
    assert "express_checkout_address" in line["title"] and "quote_shipping" in line["title"]
    words = shlex.split(line["command"])
    assert words[:3] == ["incidentkit", "run", "vanished_state"]
    evidence = Path(words[words.index("--evidence") + 1])
    assert evidence.resolve() == world.folder.resolve()
    given = {words[n + 1]: words[n + 2] for n, word in enumerate(words) if word == "-p"}
    assert given == {"app_name": "ik_forgot", "session_id": world.lost, "keys": line["keys"]}
    assert card.action.count("incidentkit run vanished_state") == 1
    assert report.card["check"].eq("state-can-vanish").sum() == 1


def test_the_cards_command_finds_the_direct_mutation_and_the_temp_key(
    world: Any, fw: ModuleType
) -> None:
    _, found = _card(world)
    line = next(r for i in found.items if i.id == "overview/card" for r in i.rows if r["keys"])
    keys = [*line["keys"].split(","), fw.TEMP_KEY]  # the temp: key the customer names
    incident, settings = vanished_state.setup(
        world.manifest, session_id=line["session_id"], keys=keys
    )
    report = vanished_state.triage(incident, settings)
    verdicts = report.keys.set_index("key")
    assert (verdicts.loc[fw.KEY, "verdict"], verdicts.loc[fw.KEY, "cause"]) == (
        "NEVER_DURABLE",
        "direct_mutation",
    )
    assert verdicts.loc[fw.KEY, "suspects"][0]["tool"] == "express_checkout_address"
    assert verdicts.loc[fw.TEMP_KEY, "verdict"] == "TEMP_PREFIX"


@pytest.mark.notebook
def test_the_overview_notebook_on_the_store_says_where_to_look(world: Any, tmp_path: Path) -> None:
    code, findings, html = read_run("overview", world.manifest, tmp_path, symptom="forgot")
    assert code == 1 and findings["verdict"] == "ACTION_NEEDED"
    card = next(item for item in findings["items"] if item["id"] == "overview/card")
    assert world.lost in card["title"] and "-p keys shipping_address" in card["action"]
    assert world.lost in html
