"""Vertex AI Agent Engine sessions API JSON (``sessions.get``/``list``, ``events.list`` pages)
into the canonical frames."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import incidentkit as ik
from incidentkit.errors import ManifestError
from incidentkit.simulate import exports, simulate
from incidentkit.sources.events import vertex

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
JAVA = FIXTURES / "crash_recovery"
VERTEX = FIXTURES / "crash_recovery-vertex-ai"
ENGINE = "projects/p/locations/us-central1/reasoningEngines/42"
SESSION = f"{ENGINE}/sessions/s-1"
EVENT_FRAMES = ("events", "calls", "responses", "state_writes")


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    cols = [c for c in a.columns if c not in ("location", "source_format")]
    pd.testing.assert_frame_equal(a[cols].reset_index(drop=True), b[cols].reset_index(drop=True))


def _pack(tmp_path: Path, files: dict[str, Any], *, extra: str = "") -> Path:
    """A pack of Agent Engine JSON files (objects are written as one JSON document each,
    lists of objects as JSON lines)."""
    for name, content in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, list):
            path.write_text("".join(json.dumps(c) + "\n" for c in content), encoding="utf-8")
        else:
            path.write_text(json.dumps(content, indent=2), encoding="utf-8")
    paths = ", ".join(json.dumps(name) for name in sorted(files) if "*" not in name)
    (tmp_path / "evidence.toml").write_text(
        f'[events]\npaths = [{paths}]\nformat = "vertex-ai-json"\n{extra}', encoding="utf-8"
    )
    return tmp_path


def _event(eid: str, **fields: Any) -> dict[str, Any]:
    return {"name": f"{SESSION}/events/{eid}", "author": "user", "invocationId": "i-1", **fields}


def test_the_vertex_pack_gives_the_frames_of_the_java_pack_it_was_written_from() -> None:
    java, vertex = ik.open_evidence(JAVA), ik.open_evidence(VERTEX)
    for name in EVENT_FRAMES:
        assert len(vertex.frame(name)) > 0
        _same(java.frame(name), vertex.frame(name))
    assert vertex.rejects.empty
    assert set(vertex.frame("events")["source_format"]) == {"vertex-ai-json"}
    state = vertex.frame("session_state")
    assert set(state["source"]) == {"Vertex AI session state"} and len(state) > 0
    assert state["session_id"].isin(vertex.frame("events")["session_id"]).all()


def test_a_folder_of_pages_one_per_file_loads_with_no_rejects(tmp_path: Path) -> None:
    """What a user saves with curl: each page of sessions.events.list a pretty-printed file,
    the sessions' sessions.get responses beside them, read through a pattern."""
    pages = [
        json.loads(line)
        for line in (VERTEX / "vertex" / "events.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    sessions = (VERTEX / "vertex" / "sessions.jsonl").read_text(encoding="utf-8").splitlines()
    folder = tmp_path / "pack"
    (folder / "pages").mkdir(parents=True)
    for i, page in enumerate(pages):
        (folder / "pages" / f"page-{i:04d}.json").write_text(json.dumps(page, indent=2))
    for i, line in enumerate(sessions):
        (folder / "pages" / f"session-{i:04d}.json").write_text(json.dumps(json.loads(line)))
    manifest = (VERTEX / "evidence.toml").read_text(encoding="utf-8")
    manifest = manifest.replace(
        'paths = ["vertex/sessions.jsonl", "vertex/events.jsonl"]\nformat = "vertex-ai-json"',
        'paths = ["pages/*.json"]',  # the format is detected
    )
    for name in ("ledger.csv", "journal.jsonl", "spans.otlp.jsonl", "diagnostics.log"):
        (folder / name).write_bytes((VERTEX / name).read_bytes())
    (folder / "evidence.toml").write_text(manifest, encoding="utf-8")
    loaded, java = ik.open_evidence(folder), ik.open_evidence(JAVA)
    for name in EVENT_FRAMES:
        _same(java.frame(name), loaded.frame(name))
    assert loaded.rejects.empty
    assert (loaded.frame("events")["user_id"] != "").all()  # the users came from sessions.get


def test_wire_fields_map_exactly(tmp_path: Path) -> None:
    page = {
        "sessionEvents": [
            _event(
                "e1",
                timestamp={"seconds": "1795919400", "nanos": 250000000},
                content={"role": "user", "parts": [{"text": "hi"}]},
            ),
            _event(
                "e2",
                author="router",
                timestamp="2026-11-29T02:30:01.5Z",
                actions={"transferAgent": "billing", "stateDelta": {"cart": None, "n": 2}},
                eventMetadata={
                    "partial": False,
                    "turnComplete": True,
                    "branch": "root.router",
                    "longRunningToolIds": [],
                    "usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": 3},
                },
            ),
            {  # snake_case (an SDK object dumped without aliases), usage in customMetadata
                "name": f"{SESSION}/events/e3",
                "author": "billing",
                "invocation_id": "i-1",
                "timestamp": "2026-11-29T02:30:02.000001Z",
                "actions": {"transfer_agent": "router", "state_delta": {}},
                "event_metadata": {
                    "custom_metadata": {"_usage_metadata": {"promptTokenCount": 11}},
                    "long_running_tool_ids": ["adk-1"],
                },
                "content": {"parts": [{"functionCall": {"id": "adk-1", "name": "approve"}}]},
            },
        ],
        "nextPageToken": "abc",
    }
    session = {
        "name": SESSION,
        "userId": "u-9",
        "sessionState": {"n": 2},
        "updateTime": "2026-11-29T02:30:02Z",
    }
    pack = _pack(tmp_path, {"session.json": session, "page-1.json": page})
    evidence = ik.open_evidence(pack)
    events = evidence.frame("events").set_index("event_id")
    assert evidence.rejects.empty
    assert list(events.index) == ["e1", "e2", "e3"]
    assert set(events["app_name"]) == {"42"} and set(events["user_id"]) == {"u-9"}
    assert set(events["session_id"]) == {"s-1"}
    assert events.loc["e1", "ts"] == pd.Timestamp("2026-11-29T02:30:00.25Z")
    assert events.loc["e3", "ts"] == pd.Timestamp("2026-11-29T02:30:02.000001Z")
    assert events.loc["e2", "transfer_to_agent"] == "billing"
    assert events.loc["e3", "transfer_to_agent"] == "router"
    assert events.loc["e2", "branch"] == "root.router"
    assert bool(events.loc["e2", "turn_complete"]) and not events.loc["e1", "turn_complete"]
    assert events.loc["e3", "long_running_tool_ids"] == ("adk-1",)
    assert events.loc["e2", "prompt_tokens"] == 7 and events.loc["e3", "prompt_tokens"] == 11
    writes = evidence.frame("state_writes").set_index("key")
    assert bool(writes.loc["cart", "removed"]) and writes.loc["n", "value"] == 2
    state = evidence.frame("session_state")
    assert state[["key", "value", "user_id"]].values.tolist() == [["n", 2, "u-9"]]


def test_a_raw_event_is_read_whole_with_the_resources_author_and_time(tmp_path: Path) -> None:
    raw = {
        "id": "adk-created-id",
        "invocationId": "ignored",
        "author": "ignored",
        "timestamp": 1.0,
        "content": {"parts": [{"text": "done"}]},
        "errorCode": "MALFORMED_FUNCTION_CALL",
        "actions": {"stateDelta": {"k": 1}},
    }
    wire = _event("server-id", author="agent", timestamp="2026-11-29T02:30:00Z", rawEvent=raw)
    evidence = ik.open_evidence(_pack(tmp_path, {"events.jsonl": [{"sessionEvents": [wire]}]}))
    row = evidence.frame("events").iloc[0]
    assert (row["event_id"], row["invocation_id"], row["author"]) == (
        "adk-created-id",
        "i-1",
        "agent",
    )
    assert row["ts"] == pd.Timestamp("2026-11-29T02:30:00Z")
    assert row["error_code"] == "MALFORMED_FUNCTION_CALL"
    assert bool(row["final_response"])  # ADK Python's rule: an error that calls nothing ends it


def test_the_app_profile_names_the_engine_and_the_filters_see_that_name(tmp_path: Path) -> None:
    page = {"sessionEvents": [_event("e1", timestamp="2026-11-29T02:30:00Z")]}
    extra = '\n[apps.support]\nreasoning_engine = "42"\n'
    evidence = ik.open_evidence(_pack(tmp_path, {"p.json": page}, extra=extra))
    assert evidence.frame("events")["app_name"].tolist() == ["support"]


def test_two_apps_cannot_claim_one_engine(tmp_path: Path) -> None:
    extra = '\n[apps.a]\nreasoning_engine = "42"\n[apps.b]\nreasoning_engine = "42"\n'
    with pytest.raises(ManifestError, match="same reasoning_engine"):
        ik.open_evidence(_pack(tmp_path, {"p.json": {}}, extra=extra))


def test_unreadable_records_are_rejects_with_their_place_and_reason(tmp_path: Path) -> None:
    page = {
        "sessionEvents": [
            _event("e1", timestamp="yesterday"),
            _event("e2", timestamp={"seconds": "x"}),
            {"author": "user"},  # no name: no event id
            _event("e4", timestamp="2026-11-29T02:30:00Z", actions=[1]),
            _event("e5", timestamp="2026-11-29T02:30:00Z"),
        ]
    }
    lines = [{}, page, {"what": "else"}]
    evidence = ik.open_evidence(_pack(tmp_path, {"events.jsonl": lines}))
    assert evidence.frame("events")["event_id"].tolist() == ["e5"]
    rejects = evidence.rejects.set_index("location")["reason"]
    assert "neither RFC 3339 text with an offset" in rejects["events.jsonl:2:sessionEvents[0]"]
    assert "'yesterday'" in rejects["events.jsonl:2:sessionEvents[0]"]
    assert "{'seconds': 'x'}" in rejects["events.jsonl:2:sessionEvents[1]"]
    assert "timestamp" in rejects["events.jsonl:2:sessionEvents[1]"]
    assert "id is missing" in rejects["events.jsonl:2:sessionEvents[2]"]
    assert "actions is not an object" in rejects["events.jsonl:2:sessionEvents[3]"]
    assert "not Agent Engine sessions API JSON" in rejects["events.jsonl:3"]
    assert len(rejects) == 5


@pytest.mark.parametrize(
    "stamp",
    [1795919400, 1795919400.5, True, [2026], "2026-11-29T02:30:02", {"seconds": 10**400}],
)
def test_an_unreadable_update_time_leaves_the_state_with_no_time_and_a_warning(
    tmp_path: Path, stamp: Any
) -> None:
    """A number (the API writes RFC 3339 text), naive text or a time past any float: the
    state is kept, its time unknown, and a warning names the place and the value."""
    session = {"name": SESSION, "userId": "u-9", "sessionState": {"n": 2}, "updateTime": stamp}
    page = {"sessionEvents": [_event("e1", timestamp={"seconds": str(10**400)})]}
    evidence = ik.open_evidence(_pack(tmp_path, {"session.json": session, "p.json": page}))
    state = evidence.frame("session_state")
    assert state["key"].tolist() == ["n"] and state["updated_at"].isna().all()
    warned = evidence.warnings.set_index("location")
    assert "updateTime is neither RFC 3339" in warned.loc["session.json:updateTime", "reason"]
    assert warned.loc["session.json:updateTime", "raw"] == repr(stamp)[:200]
    (reason,) = evidence.rejects["reason"]  # an event second past any float: a reject
    assert "neither RFC 3339 text" in reason


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
        lambda inner: (
            st.lists(inner) | st.dictionaries(st.sampled_from(["seconds", "nanos", "x"]), inner)
        ),
        max_leaves=5,
    )
)
@settings(max_examples=300, deadline=None)
def test_any_json_time_is_a_time_or_none(value: Any) -> None:
    stamp = vertex.parse_stamp(value)
    assert stamp is None or stamp.tz is not None
    seconds, reason = vertex.time_and_reason(value)
    assert (reason is None) or seconds is None


def test_events_of_a_session_with_no_sessions_get_say_how_to_name_their_user(
    tmp_path: Path,
) -> None:
    page = {"sessionEvents": [_event("e1", timestamp="2026-11-29T02:30:00Z")]}
    evidence = ik.open_evidence(_pack(tmp_path, {"p.json": page}))
    assert evidence.frame("events")["user_id"].tolist() == [""]
    (reason,) = evidence.warnings["reason"]
    assert "1 events name no user" in reason and "sessions.get" in reason


def test_the_simulator_writes_what_adk_javas_converter_writes(tmp_path: Path) -> None:
    pack = simulate("runaway", tmp_path / "pack", events_format="vertex-ai")
    first = json.loads((pack / "vertex" / "events.jsonl").read_text().splitlines()[0])
    event = first["sessionEvents"][0]
    assert set(event) <= {
        *("name", "author", "invocationId", "timestamp", "content"),
        *("errorCode", "errorMessage", "eventMetadata", "actions"),
    }
    assert event["timestamp"].endswith("Z") and "/reasoningEngines/" in event["name"]
    pages = [
        json.loads(line) for line in (pack / "vertex" / "events.jsonl").read_text().splitlines()
    ]
    assert all(len(p["sessionEvents"]) <= exports.PAGE for p in pages)
    assert any("nextPageToken" in p for p in pages)
    manifest = (pack / "evidence.toml").read_text()
    assert f'reasoning_engine = "{exports.engine_of("support")}"' in manifest
    assert ik.open_evidence(pack).rejects.empty


@pytest.mark.parametrize("ms", [0, 5, 120, 999])
def test_instants_print_as_java_does(ms: int) -> None:
    text = exports.instant(1795919400000 + ms)
    assert text == ("2026-11-29T02:30:00Z" if ms == 0 else f"2026-11-29T02:30:00.{ms:03d}Z")
