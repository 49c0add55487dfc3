"""ADK Java FirestoreSessionService exports (REST documents, pages, runQuery results and the
``__collections__`` tree of export tools) into the canonical frames."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import incidentkit as ik
from incidentkit.sources.events import firestore

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
JAVA = FIXTURES / "vanished_state"
FIRESTORE = FIXTURES / "vanished_state-firestore"
ROOT = "projects/p/databases/(default)/documents"


def _documents(pack: Path) -> list[dict[str, Any]]:
    lines = (pack / "firestore.jsonl").read_text(encoding="utf-8").splitlines()
    return [doc for line in lines for doc in json.loads(line)["documents"]]


def _manifest(folder: Path, path: str) -> Path:
    (folder / "evidence.toml").write_text(f'[events]\npath = "{path}"\n', encoding="utf-8")
    return folder


def _tree(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``__collections__`` tree of REST documents, with plain values (firestore-export)."""
    root: dict[str, Any] = {}
    for doc in docs:
        path = doc["name"].split("/documents/", 1)[1].split("/")
        node = root
        for i in range(0, len(path), 2):
            collection = node.setdefault("__collections__", {}).setdefault(path[i], {})
            node = collection.setdefault(path[i + 1], {})
        node.update({k: firestore.value_of(v) for k, v in doc["fields"].items()})
    return root


def test_the_export_keeps_the_transcript_and_loses_what_the_service_drops() -> None:
    java, fs = ik.open_evidence(JAVA), ik.open_evidence(FIRESTORE)
    events = fs.frame("events")
    assert fs.rejects.empty and len(events) > 0
    complete = java.frame("events")
    complete = complete[complete["partial"].ne(True)]
    assert len(events) == len(complete)
    assert events["invocation_id"].isna().all()
    assert events["event_id"].str.fullmatch(r"[0-9a-f]{20}").all()  # Firestore document ids
    assert sorted(events["author"]) == sorted(complete["author"])  # the user id read as user
    assert sorted(events["text"].dropna()) == sorted(complete["text"].dropna())
    calls = fs.frame("calls")
    assert calls["call_id"].isna().all() and len(calls) == len(java.frame("calls"))
    assert sorted(calls["name"]) == sorted(java.frame("calls")["name"])
    assert fs.frame("state_writes").empty
    assert events["kind"].eq("turn").all()  # no actions, so no markers: every event a turn
    assert events[["compacted_by", "rewind_before", "rewound_by"]].isna().all(axis=None)
    assert set(events["source_format"]) == {"firestore-json"}
    (warning,) = fs.warnings["reason"][fs.warnings["reason"].str.contains("Firestore export")]
    for limit in firestore.LIMITS:
        assert limit in warning


def test_session_app_and_user_state_come_with_their_scope(tmp_path: Path) -> None:
    def doc(path: str, fields: dict[str, Any]) -> dict[str, Any]:
        return {"name": f"{ROOT}/{path}", "fields": fields}

    s = {"stringValue": "support"}
    docs = [
        doc(
            "adk-session/u-1/sessions/s-1",
            {
                "appName": s,
                "userId": {"stringValue": "u-1"},
                "updateTime": {"stringValue": "2026-11-29T02:30:00Z"},
                "state": {
                    "mapValue": {
                        "fields": {
                            "cart": {"arrayValue": {"values": [{"integerValue": "3"}]}},
                            "temp:quote": {"doubleValue": 1.5},
                        }
                    }
                },
            },
        ),
        doc("app-state/support", {"greeting": {"stringValue": "hi"}}),
        doc("user-state/support/users/u-1", {"tier": {"nullValue": None}}),
        doc("other/thing", {"x": {"booleanValue": True}}),
    ]
    (tmp_path / "export.json").write_text(json.dumps({"documents": docs}))
    evidence = ik.open_evidence(_manifest(tmp_path, "export.json"))
    state = evidence.frame("session_state")
    rows = state[["scope", "key", "value", "user_id", "session_id"]].values.tolist()
    assert rows == [
        ["session", "cart", [3], "u-1", "s-1"],
        ["temp", "temp:quote", 1.5, "u-1", "s-1"],
        ["app", "_app_greeting", "hi", "", ""],
        ["user", "_user_tier", None, "u-1", ""],
    ]
    assert state["updated_at"].iloc[0] == pd.Timestamp("2026-11-29T02:30:00Z")
    assert evidence.warnings["reason"].str.contains("1 Firestore documents are not in").any()


@pytest.mark.parametrize("shape", ["tree", "run_query", "documents"])
def test_every_export_shape_gives_the_same_frames(tmp_path: Path, shape: str) -> None:
    docs = _documents(FIRESTORE)
    if shape == "tree":
        content: Any = _tree(docs)
    elif shape == "run_query":
        content = [{"document": d, "readTime": "2026-12-01T00:00:00Z"} for d in docs]
        content.append({"readTime": "2026-12-01T00:00:00Z"})  # the end of a query
    else:
        content = docs  # a JSON array of documents (batchGet-like)
    (tmp_path / "export.json").write_text(json.dumps(content, indent=1))
    evidence, base = (
        ik.open_evidence(_manifest(tmp_path, "export.json")),
        ik.open_evidence(FIRESTORE),
    )
    assert evidence.rejects.empty
    for name in ("events", "calls", "responses", "session_state"):
        a, b = base.frame(name), evidence.frame(name)
        cols = [c for c in a.columns if c != "location"]
        pd.testing.assert_frame_equal(a[cols], b[cols])


def test_typed_values_decode_to_plain_json() -> None:
    value = {
        "mapValue": {
            "fields": {
                "n": {"integerValue": "12"},
                "big": {"integerValue": "not-a-number"},
                "b": {"bytesValue": "aGk="},
                "when": {"timestampValue": "2026-11-29T02:30:00Z"},
                "empty": {"arrayValue": {}},
                "ref": {"referenceValue": "projects/p/databases/d/documents/a/b"},
            }
        }
    }
    assert firestore.value_of(value) == {
        "n": 12,
        "big": "not-a-number",
        "b": "hi",
        "when": "2026-11-29T02:30:00Z",
        "empty": [],
        "ref": "projects/p/databases/d/documents/a/b",
    }


def test_unreadable_documents_are_rejects_with_place_and_reason(tmp_path: Path) -> None:
    event = f"{ROOT}/adk-session/u-1/sessions/s-1/user-event"
    lines = [
        {"name": f"{event}/a", "fields": {"author": {"stringValue": "agent"}}},  # no timestamp
        {
            "name": f"{event}/b",
            "fields": {
                "author": {"stringValue": "agent"},
                "timestamp": {"stringValue": "2026-11-29T02:30:00Z"},
                "content": {"mapValue": {"fields": {"parts": {"stringValue": "oops"}}}},
            },
        },
        {"documents": ["not a document"]},
        {"unrelated": 1},
    ]
    (tmp_path / "e.jsonl").write_text(
        json.dumps({"name": f"{event}/ok", "fields": {}})
        + "\n"
        + "".join(json.dumps(line) + "\n" for line in lines)
    )
    evidence = ik.open_evidence(_manifest(tmp_path, "e.jsonl"))
    rejects = evidence.rejects.set_index("location")["reason"]
    assert "author is missing" in rejects["e.jsonl:1"]  # a document with no fields
    assert "timestamp is missing" in rejects["e.jsonl:2"]
    assert "content.parts is not a list" in rejects["e.jsonl:3"]
    assert "not a Firestore document" in rejects["e.jsonl:4:documents[0]"]
    assert "not a Firestore export record" in rejects["e.jsonl:5"]


def test_a_time_without_an_offset_is_a_reject_that_names_it(tmp_path: Path) -> None:
    event = f"{ROOT}/adk-session/u-1/sessions/s-1/user-event/a"
    fields = {
        "author": {"stringValue": "agent"},
        "timestamp": {"stringValue": "2026-11-29 02:30:00"},  # not how the service writes it
        "content": {"mapValue": {"fields": {"parts": {"arrayValue": {}}}}},
    }
    (tmp_path / "e.jsonl").write_text(json.dumps({"name": event, "fields": fields}) + "\n")
    evidence = ik.open_evidence(_manifest(tmp_path, "e.jsonl"))
    (reason,) = evidence.rejects["reason"]
    assert "neither RFC 3339 text with an offset" in reason and "'2026-11-29 02:30:00'" in reason


def test_an_update_time_that_is_a_number_is_a_warning_not_a_crash(tmp_path: Path) -> None:
    fields = {
        "appName": {"stringValue": "support"},
        "userId": {"stringValue": "u-1"},
        "updateTime": {"integerValue": "1764383400"},  # a number, not how the service writes it
        "state": {"mapValue": {"fields": {"cart": {"stringValue": "mug"}}}},
    }
    doc = {"name": f"{ROOT}/adk-session/u-1/sessions/s-1", "fields": fields}
    (tmp_path / "export.json").write_text(json.dumps({"documents": [doc]}))
    evidence = ik.open_evidence(_manifest(tmp_path, "export.json"))
    state = evidence.frame("session_state")
    assert state["key"].tolist() == ["cart"] and state["updated_at"].isna().all()
    warned = evidence.warnings[evidence.warnings["location"].str.endswith(":updateTime")]
    (reason,) = warned["reason"]
    assert "the stored state's time is unknown" in reason
