"""ADK Python's MongoDB session stores as mongoexport writes them (``adk-mongodb-json``): what
each document shape reads as, and what cannot be read (a reject at its ``file:line``, a file of
two collections refused). tests/adk/test_mongodb_conformance.py checks the frames against a real
ADK run; these documents follow the layouts that test writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import incidentkit
from incidentkit.errors import SourceError
from incidentkit.evidence import Evidence

APP, USER = "support", "u-1"


def _event(event_id: str, session: str, ts: float, text: str, **extra: Any) -> dict[str, Any]:
    """A MongoDbSessionService events document (relaxed extended JSON)."""
    data = {
        "id": event_id,
        "invocation_id": f"e-{session}",
        "author": "user",
        "timestamp": ts,
        "content": {"role": "user", "parts": [{"text": text}]},
        "actions": {"state_delta": extra.pop("delta", {})},
    }
    return {
        "_id": {"app_name": APP, "user_id": USER, "session_id": session, "event_id": event_id},
        "app_name": APP,
        "user_id": USER,
        "session_id": session,
        "timestamp": ts,
        "revision": 1,
        "event_data": json.dumps(data),
        **extra,
    }


def _session(session: str, state: dict[str, Any], updated: Any = 1764385800.5) -> dict[str, Any]:
    return {
        "_id": {"app_name": APP, "user_id": USER, "session_id": session},
        "id": session,
        "app_name": APP,
        "user_id": USER,
        "state": json.dumps(state),
        "create_time": 1764385700.0,
        "update_time": updated,
        "revision": 2,
    }


def _write(folder: Path, files: dict[str, list[Any] | str], **filters: Any) -> Evidence:
    for name, docs in files.items():
        text = docs if isinstance(docs, str) else "".join(json.dumps(d) + "\n" for d in docs)
        (folder / name).write_text(text, encoding="utf-8")
    (folder / "evidence.toml").write_text(
        f'[events]\nformat = "adk-mongodb-json"\npaths = {json.dumps(list(files))}\n',
        encoding="utf-8",
    )
    return incidentkit.open_evidence(folder, **filters)


def _store(folder: Path, **filters: Any) -> Evidence:
    return _write(
        folder,
        {
            "a.jsonl": [
                _event("e1", "s-1", 1764385800.25, "hello", delta={"ticket": "T-1"}),
                _event("e2", "s-2", 1764385900.5, "again"),
            ],
            "b.jsonl": [_session("s-1", {"ticket": "T-1"}), _session("s-2", {"n": 2})],
            "c.jsonl": [{"_id": APP, "state": json.dumps({"region": "eu"})}],
            "d.jsonl": [
                {"_id": {"app_name": APP, "user_id": USER}, "state": json.dumps({"tier": "gold"})},
                {"_id": {"app_name": APP, "user_id": "u-2"}, "state": json.dumps({"tier": "x"})},
            ],
        },
        **filters,
    )


def test_the_four_collections_read_as_events_and_stored_state(tmp_path: Path) -> None:
    evidence = _store(tmp_path)
    assert evidence.rejects.empty, evidence.rejects.to_string()
    events = evidence.events
    assert list(events["event_id"]) == ["e1", "e2"]
    assert list(events["session_id"]) == ["s-1", "s-2"]
    assert (events["source_format"] == "adk-mongodb-json").all()
    assert list(evidence.state_writes["key"]) == ["ticket"]
    state = evidence.session_state.set_index("key")
    assert state.loc["app:region", "value"] == "eu" and pd.isna(state.loc["app:region", "user_id"])
    assert state.loc["app:region", "source"] == "app_states.state"
    assert set(state.loc["user:tier", "value"]) == {"gold", "x"}
    assert state.loc["ticket", "updated_at"] == pd.Timestamp(1764385800.5, unit="s", tz="UTC")


def test_a_session_filter_keeps_its_state_and_its_users_as_a_database_does(
    tmp_path: Path,
) -> None:
    evidence = _store(tmp_path, session_ids=["s-1"])
    assert list(evidence.events["event_id"]) == ["e1"]
    state = evidence.session_state
    assert sorted(state["key"]) == ["app:region", "ticket", "user:tier"]
    assert set(state.loc[state["key"] == "user:tier", "user_id"]) == {USER}


def test_unreadable_documents_are_rejects_at_their_line(tmp_path: Path) -> None:
    evidence = _write(
        tmp_path,
        {
            "events.jsonl": "\n".join(
                [
                    json.dumps(_event("e1", "s-1", 1764385800.0, "ok")),
                    json.dumps({"_id": 7, "note": "a document of some other collection"}),
                    json.dumps(_event("e3", "s-1", 1764385801.0, "x") | {"event_data": 5}),
                    json.dumps(_event("e4", "s-1", 1764385802.0, "x") | {"event_data": "{oops"}),
                    "[1, 2]",
                    "{not json",
                ]
            )
            + "\n",
            "sessions.jsonl": [_session("s-1", {}) | {"state": "{cut"}],
        },
    )
    assert list(evidence.events["event_id"]) == ["e1"]
    reasons = dict(zip(evidence.rejects["location"], evidence.rejects["reason"], strict=True))
    assert set(reasons) == {
        "events.jsonl:2",
        "events.jsonl:3",
        "events.jsonl:4",
        "events.jsonl:5",
        "events.jsonl:6",
        "sessions.jsonl:1.state",
    }
    assert "not a document of an ADK MongoDB session store" in reasons["events.jsonl:2"]
    assert "event_data is neither" in reasons["events.jsonl:3"]
    assert "malformed JSON" in reasons["events.jsonl:4"]
    assert "unreadable state" in reasons["sessions.jsonl:1.state"]


def test_a_file_whose_documents_fit_two_collections_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SourceError) as raised:
        _write(
            tmp_path, {"mixed.jsonl": [_session("s-1", {}), _event("e1", "s-1", 1.0, "x")]}
        ).load_all()
    said = str(raised.value)
    assert "two collections" in said
    assert "sessions (first at mixed.jsonl:1) and events (at mixed.jsonl:2)" in said
    assert "mongoexport --collection" in said


def test_canonical_numbers_and_dates_read_as_their_values(tmp_path: Path) -> None:
    """The community layout in canonical extended JSON: times as ``$numberDouble`` and
    ``$date``, counts as ``$numberLong``/``$numberInt``."""
    event = {
        "id": "e1",
        "invocation_id": "e-1",
        "author": "model",
        "timestamp": {"$numberDouble": "1764385800.25"},
        "content": {"role": "model", "parts": [{"text": "hi"}]},
        "usage_metadata": {
            "prompt_token_count": {"$numberLong": "5000000"},
            "candidates_token_count": {"$numberInt": "7"},
        },
    }
    session = {
        "_id": f"session::{APP}::{USER}::s-1",
        "app_name": APP,
        "user_id": USER,
        "id": "s-1",
        "state": {"n": {"$numberInt": "3"}},
        "events": [event],
        "last_update_time": {"$date": {"$numberLong": "1764385800250"}},
    }
    shared = [
        {"_id": f"app:{APP}", "state": {"region": "eu"}},
        {"_id": f"user:{APP}:{USER}", "state": {"tier": "gold"}},
    ]
    evidence = _write(tmp_path, {"sessions.json": [session], "session_state.json": shared})
    assert evidence.rejects.empty, evidence.rejects.to_string()
    row = evidence.events.iloc[0]
    assert row["ts"] == pd.Timestamp(1764385800.25, unit="s", tz="UTC")
    assert row["prompt_tokens"] == 5_000_000 and row["output_tokens"] == 7
    state = evidence.session_state.set_index("key")
    assert state.loc["n", "value"] == 3
    assert state.loc["n", "updated_at"] == pd.Timestamp("2025-11-29T03:10:00.250Z")
    assert state.loc["user:tier", "user_id"] == USER
    assert state.loc["app:region", "source"] == "session_state.state"


def test_a_database_url_is_refused_with_the_export_to_make(tmp_path: Path) -> None:
    (tmp_path / "evidence.toml").write_text(
        '[events]\nformat = "adk-mongodb-json"\nurl = "env:IK_MONGO"\n', encoding="utf-8"
    )
    evidence = incidentkit.open_evidence(tmp_path, environ={"IK_MONGO": "mongodb://h/db"})
    with pytest.raises(SourceError, match="does not connect to MongoDB"):
        evidence.load_all()
