"""Conformance with the real google-adk on Vertex AI Agent Engine: ADK Python's own
``VertexAiSessionService`` (and the ``agentplatform`` SDK under it) writes the scripted app's
sessions to a local stand-in of the sessions API (:mod:`.agent_engine`); the API's responses,
saved as a user saves them (``sessions.get`` and the pages of ``sessions.events.list``), must
load into exactly the frames ADK's own ``get_session`` reads back. A change in how ADK writes
or reads the wire format shows up here as a failing test.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import incidentkit
from incidentkit.evidence import Evidence

from .test_conformance import (
    _adk_world,
    _check_times,
    _expected_events,
    _frame_like,
    _missing_extra,
    _sorted,
)

pytestmark = [
    pytest.mark.adk,
    pytest.mark.xdist_group("adk_vertex_conformance"),  # one worker builds the world
    # the agentplatform SDK's own models, on import (not the kit's, not ADK's)
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince212"),
]


@pytest.fixture(scope="module")
def vertex(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    """The scenario run through VertexAiSessionService; the world and the saved responses."""
    missing = _missing_extra()
    if missing is None and importlib.util.find_spec("agentplatform") is None:
        missing = (
            "the Vertex conformance test needs google-cloud-agentplatform (ADK's Vertex AI "
            "client), from the project's adk extra; install it: pip install -e '.[adk]'"
        )
    if missing:
        pytest.fail(missing, pytrace=False)
    from . import agent_engine

    adk = _adk_world()
    folder = tmp_path_factory.mktemp("adk-vertex")
    with agent_engine.serve() as (url, engine):
        world = adk.build_world(adk.VERTEX + url, folder)
    saved = folder / "saved"
    saved.mkdir()
    pages = [page for listing in engine.listings.values() for page in listing]
    assert len(engine.listings) == 2 and any("nextPageToken" in page for page in pages)
    for i, page in enumerate(pages):
        (saved / f"events-{i:03d}.json").write_text(json.dumps(page, indent=2), encoding="utf-8")
    latest = {body["name"]: body for kind, body in engine.responses if kind == "sessions.get"}
    (saved / "sessions.jsonl").write_text("".join(json.dumps(g) + "\n" for g in latest.values()))
    yield world, saved


def _open(saved: Path) -> Evidence:
    (saved / "evidence.toml").write_text(
        f'[events]\npaths = ["sessions.jsonl", "events-*.json"]\n\n'
        f'[apps.{_adk_world().APP}]\nreasoning_engine = "{_adk_world().ENGINE_ID}"\n',
        encoding="utf-8",
    )
    return incidentkit.open_evidence(saved)


def test_the_saved_pages_load_with_no_rejects_into_adks_own_reading(
    vertex: tuple[Any, Path],
) -> None:
    world, saved = vertex
    evidence = _open(saved)
    assert evidence.rejects.empty, evidence.rejects.to_string()
    got = _sorted(evidence.events, ["session_id", "seq"])
    want = _sorted(_expected_events(world), ["session_id", "seq"])
    assert len(got) == len(want) > 0
    _check_times(got["ts"], want["timestamp"], "events.ts")
    columns = [c for c in want.columns if c != "timestamp"]
    pd.testing.assert_frame_equal(
        got[columns], _frame_like(want[columns].to_dict("records"), got[columns])
    )
    assert set(got["source_format"]) == {"vertex-ai-json"}


def test_calls_state_and_the_stored_state_match_the_saved_session_json(
    vertex: tuple[Any, Path],
) -> None:
    world, saved = vertex
    evidence = _open(saved)
    paths = ", ".join(json.dumps(str(p)) for p in world.session_files)
    (saved.parent / "json").mkdir(exist_ok=True)
    (saved.parent / "json" / "evidence.toml").write_text(
        f"allow_outside = true\n[events]\npaths = [{paths}]\n"
    )
    documents = incidentkit.open_evidence(saved.parent / "json")
    for name in ("calls", "responses", "state_writes"):
        assert len(evidence.frame(name)) > 0, name
        pd.testing.assert_frame_equal(evidence.frame(name), documents.frame(name), obj=name)
    state = evidence.frame("session_state")
    for session in world.sessions:
        stored = state[state["session_id"] == session.id]
        kept = {k: v for k, v in session.state.items() if not k.startswith("temp:")}
        assert dict(zip(stored["key"], stored["value"], strict=True)) == kept
