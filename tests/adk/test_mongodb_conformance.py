"""Conformance with the real google-adk on MongoDB: ADK Python's own ``MongoDbSessionService``
stores the scenario (mirrored by the same run into ``SqliteSessionService``, :mod:`.mirrored_store`)
in mongomock's in-memory MongoDB: the service's own code runs, a MongoDB server does not (none
is installed here). Its collections are written as mongoexport writes them (``bson.json_util``:
relaxed JSON lines, canonical JSON arrays); the kit must load from them, with no reject, exactly
the frames it loads from the SQLite store. The community ``MongoSessionService`` layout (events
embedded in the session) is written from the same run's events as that service's code writes
them, and must load the same.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import incidentkit
from incidentkit.evidence import Evidence

from .mirrored_store import build_mirrored
from .test_conformance import _missing_extra

pytestmark = [
    pytest.mark.adk,
    pytest.mark.xdist_group("mongodb_conformance"),  # the run stored once
    pytest.mark.filterwarnings("ignore:.*MONGODB_SESSION_SERVICE:UserWarning"),
]
EVENT_FRAMES = ("events", "calls", "responses", "state_writes")


@pytest.fixture(scope="module")
def mongo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path, dict[str, list[Any]]]:
    """The scenario stored by MongoDbSessionService; the world, its folder (``adk.db`` holds the
    SQLite mirror), and the documents of each collection."""
    missing = _missing_extra()
    if missing is None and not all(
        importlib.util.find_spec(name) for name in ("pymongo", "mongomock")
    ):
        missing = (
            "the MongoDB conformance test needs pymongo and mongomock, from the project's adk "
            "extra; install it: pip install -e '.[adk]'"
        )
    if missing:
        pytest.fail(missing, pytrace=False)
    import mongomock
    from google.adk.integrations.mongodb import MongoDbSessionService

    client: Any = mongomock.MongoClient()
    service = MongoDbSessionService(database_name="adk", mongo_client=client)
    folder = tmp_path_factory.mktemp("adk-mongodb")
    world = build_mirrored(service, folder)
    database = client["adk"]
    collections = {name: list(database[name].find()) for name in database.list_collection_names()}
    assert set(collections) == {"sessions", "events", "app_states", "user_states"}
    return world, folder, collections


def export(folder: Path, collections: dict[str, list[Any]], mode: str) -> list[str]:
    """Write each collection as ``mongoexport --jsonFormat=<mode>`` does: relaxed as JSON
    lines, canonical as a ``--jsonArray --pretty`` document; the file names."""
    from bson import json_util

    options = {
        "relaxed": json_util.RELAXED_JSON_OPTIONS,
        "canonical": json_util.CANONICAL_JSON_OPTIONS,
    }[mode]
    folder.mkdir(exist_ok=True)
    names = []
    for collection, docs in collections.items():
        if mode == "relaxed":
            name = f"{collection}.jsonl"
            text = "".join(json_util.dumps(doc, json_options=options) + "\n" for doc in docs)
        else:
            name = f"{collection}.json"
            text = json_util.dumps(docs, json_options=options, indent=2)
        (folder / name).write_text(text, encoding="utf-8")
        names.append(name)
    return names


def _open(folder: Path, events: str) -> Evidence:
    (folder / "evidence.toml").write_text(
        f"allow_outside = true\n\n[events]\n{events}\n", encoding="utf-8"
    )
    return incidentkit.open_evidence(folder)


def _sqlite(folder: Path) -> Evidence:
    return _open(folder, f"path = {json.dumps(str(folder / 'adk.db'))}")


def _no_rejects(evidence: Evidence) -> None:
    assert evidence.rejects.empty, (
        "the kit rejected what ADK wrote:\n" + evidence.rejects.to_string()
    )


def assert_same_frames(got: Evidence, want: Evidence, fmt: str) -> None:
    """The event frames equal but for ``source_format``; the stored state equal key for key."""
    _no_rejects(got)
    _no_rejects(want)
    assert (got.events["source_format"] == fmt).all()
    assert len(got.events) > 0
    for name in EVENT_FRAMES:
        mine, theirs = got.frame(name), want.frame(name)
        if name == "events":
            mine, theirs = mine.drop(columns="source_format"), theirs.drop(columns="source_format")
        pd.testing.assert_frame_equal(mine, theirs, obj=name)
    columns = ["app_name", "user_id", "session_id", "scope", "key"]
    mine = got.session_state.sort_values(columns, ignore_index=True)
    theirs = want.session_state.sort_values(columns, ignore_index=True)
    assert len(mine) > 0
    pd.testing.assert_frame_equal(mine[[*columns, "value"]], theirs[[*columns, "value"]])
    sessions = mine["session_id"].notna()
    pd.testing.assert_series_equal(mine["updated_at"][sessions], theirs["updated_at"][sessions])


@pytest.mark.parametrize("mode", ["relaxed", "canonical"])
def test_a_mongoexport_loads_the_frames_of_the_same_run_in_sqlite(
    mongo: tuple[Any, Path, dict[str, list[Any]]], mode: str
) -> None:
    world, folder, collections = mongo
    names = export(folder / mode, collections, mode)
    got = _open(folder / mode, f'format = "adk-mongodb-json"\npaths = {json.dumps(names)}')
    assert_same_frames(got, _sqlite(folder), "adk-mongodb-json")
    assert set(got.events["event_id"]) == {event.id for event in world.events}
    assert len(got.events) > 10 and len(got.calls) > 0 and len(got.state_writes) > 0
    # The stored state keeps the prefixes as get_session merges them, by ADK's own reading.
    for session in world.sessions:
        rows = got.session_state
        mine = rows[rows["session_id"].isna() | rows["session_id"].eq(session.id)]
        assert dict(zip(mine["key"], mine["value"], strict=True)) == session.state
    sources = set(got.session_state["source"])
    assert sources == {"sessions.state", "app_states.state", "user_states.state"}


def test_the_collections_are_told_by_their_documents_in_any_order_and_name(
    mongo: tuple[Any, Path, dict[str, list[Any]]],
) -> None:
    _, folder, collections = mongo
    renamed = {f"export-{i}": docs for i, docs in enumerate(reversed(collections.values()))}
    names = export(folder / "renamed", renamed, "relaxed")
    got = _open(folder / "renamed", f"paths = {json.dumps(names)}")  # the format detected
    assert_same_frames(got, _sqlite(folder), "adk-mongodb-json")


def test_the_community_layout_loads_the_same_frames(
    mongo: tuple[Any, Path, dict[str, list[Any]]],
) -> None:
    """The community MongoSessionService's documents, as its code writes them (events embedded
    as ``model_dump(mode="json", exclude_none=True)``, state as objects), from the same run."""
    world, folder, _ = mongo
    sessions, shared = [], {}
    for session in world.sessions:
        own = {k: v for k, v in session.state.items() if ":" not in k}
        sessions.append(
            {
                "_id": f"session::{session.app_name}::{session.user_id}::{session.id}",
                "app_name": session.app_name,
                "user_id": session.user_id,
                "id": session.id,
                "state": own,
                "events": [e.model_dump(mode="json", exclude_none=True) for e in session.events],
                "last_update_time": session.last_update_time,
            }
        )
        for prefix, doc_id in (
            ("app:", f"app:{session.app_name}"),
            ("user:", f"user:{session.app_name}:{session.user_id}"),
        ):
            shared[doc_id] = {
                "_id": doc_id,
                "state": {
                    k.removeprefix(prefix): v
                    for k, v in session.state.items()
                    if k.startswith(prefix)
                },
            }
    collections = {"sessions": sessions, "session_state": list(shared.values())}
    names = export(folder / "community", collections, "canonical")
    got = _open(folder / "community", f'format = "adk-mongodb-json"\npaths = {json.dumps(names)}')
    assert_same_frames(got, _sqlite(folder), "adk-mongodb-json")
