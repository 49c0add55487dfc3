"""The events loader on malformed calls and responses, misspelled keys and unknown keys."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import sqlalchemy as sa

from incidentkit import store
from incidentkit.frames import conform
from incidentkit.manifest import Filters, SourceSpec
from incidentkit.sources import events
from incidentkit.sources.loaded import Loaded

DATA = Path(__file__).resolve().parents[2] / "data" / "events"
FRAMES = ("events", "calls", "responses", "state_writes")
MS = 1_750_000_000_000


def load(*paths: Path) -> Loaded:
    return events.load(SourceSpec("events", paths=paths), Filters())


def rejects(loaded: Loaded) -> list[dict[str, str]]:
    records: list[dict[str, str]] = loaded.rejects[["location", "reason"]].to_dict("records")
    return records


def at_ms(offset_ms: int) -> pd.Timestamp:
    return pd.Timestamp(MS + offset_ms, unit="ms", tz="UTC").as_unit("ns")


PART_REJECTS = [
    "content.parts[0].functionCall.name is missing",
    "content.parts[1].functionResponse.name is missing",
    "content.parts[0].functionCall.args is not an object: 'A-42'",
    "content.parts[0].functionResponse.response is not an object: ['shipped']",
    "content.parts[0].functionCall.name is missing",
    "content.parts[0].functionCall.name is not text: 7",
    "content.parts[0].functionResponse.name is missing",
    "content.parts[0].functionCall.id is not text: 12",
    "content.parts[1].functionCall.name is missing",
]


def test_a_call_or_response_without_a_name_or_with_a_bad_payload_is_rejected() -> None:
    loaded = load(DATA / "part_rejects.jsonl")
    assert rejects(loaded) == [
        {"location": f"part_rejects.jsonl:{line}", "reason": reason}
        for line, reason in enumerate(PART_REJECTS, start=1)
    ]
    lines = (DATA / "part_rejects.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(raw) for raw in loaded.rejects["raw"]] == [json.loads(x) for x in lines[:-1]]
    assert list(loaded.frames["events"]["event_id"]) == ["ok"]
    # No row of a rejected event survives, not even its well-formed first call.
    assert list(loaded.frames["calls"]["call_id"]) == ["adk-5"]
    assert loaded.frames["responses"].empty


def test_calls_and_responses_without_ids_or_args_are_legal() -> None:
    """Firestore-origin events carry no call ids; a call without args takes none."""
    loaded = load(DATA / "calls_without_ids.jsonl")
    assert loaded.rejects.empty, rejects(loaded)
    keys: dict[str, Any] = {"session_id": "r1", "invocation_id": "e-1", "author": "x"}
    calls = pd.DataFrame(
        {
            "event_id": ["call-no-id", "call-no-args"],
            **keys,
            "seq": [0, 1],
            "ts": [at_ms(0), at_ms(1000)],
            "call_id": [None, None],
            "name": ["lookup", "ping"],
            "args": [{"order": "A-42"}, None],
            "args_key": ['{"order":"A-42"}', "null"],
            "long_running": False,
        }
    )
    pd.testing.assert_frame_equal(loaded.frames["calls"], conform("calls", calls))
    responses = pd.DataFrame(
        {
            "event_id": ["response-no-id"],
            **keys,
            "seq": [2],
            "ts": [at_ms(2000)],
            "call_id": [None],
            "name": ["lookup"],
            "response": [{"status": "shipped"}],
        }
    )
    pd.testing.assert_frame_equal(loaded.frames["responses"], conform("responses", responses))


def test_a_misspelled_known_key_counts_as_that_key_missing() -> None:
    loaded = load(DATA / "misspelled_keys.jsonl")
    assert rejects(loaded) == [
        {"location": "misspelled_keys.jsonl:1", "reason": "invocationId is missing"},
        {
            "location": "misspelled_keys.jsonl:3",
            "reason": "content.parts[0].functionCall.name is missing",
        },
        {"location": "misspelled_keys.jsonl:4", "reason": "timestamp is missing"},
    ]
    # sessionID is not sessionId: the event is read, naming no session, with a warning.
    events = loaded.frames["events"].set_index("event_id")
    assert events.loc["session-ID", "session_id"] == ""
    assert loaded.warnings["location"].tolist() == ["misspelled_keys.jsonl:2"]
    assert events.index.tolist() == ["session-ID"]
    assert all(loaded.frames[name].empty for name in FRAMES if name != "events")


UNKNOWN = {
    "nodeInfo",
    "output",
    "isolationScope",
    "futureField",
    "endOfAgent",
    "futureAction",
    "futurePartField",
    "willContinue",
    "partialArgs",
    "scheduling",
}


def _strip(value: Any, found: list[str]) -> Any:
    """``value`` without the keys in UNKNOWN, at any depth; ``found`` collects them."""
    if isinstance(value, dict):
        found.extend(key for key in value if key in UNKNOWN)
        return {k: _strip(v, found) for k, v in value.items() if k not in UNKNOWN}
    if isinstance(value, list):
        return [_strip(v, found) for v in value]
    return value


def test_unknown_keys_are_ignored_and_are_no_error(tmp_path: Path) -> None:
    """ADK reads events with FAIL_ON_UNKNOWN_PROPERTIES=false; new versions add fields."""
    loaded = load(DATA / "unknown_keys.jsonl")
    assert loaded.rejects.empty, rejects(loaded)
    found: list[str] = []
    lines = (DATA / "unknown_keys.jsonl").read_text(encoding="utf-8").splitlines()
    stripped = [json.dumps(_strip(json.loads(line), found)) for line in lines]
    assert sorted(set(found)) == sorted(UNKNOWN)
    (tmp_path / "unknown_keys.jsonl").write_text("\n".join(stripped) + "\n", encoding="utf-8")
    known_only = load(tmp_path / "unknown_keys.jsonl")
    for name in FRAMES:
        pd.testing.assert_frame_equal(loaded.frames[name], known_only.frames[name])
    assert [len(loaded.frames[name]) for name in FRAMES] == [2, 1, 1, 1]


def test_a_table_event_whose_call_has_no_name_is_rejected_by_its_key(sqlite_path: Path) -> None:
    lines = (DATA / "part_rejects.jsonl").read_text(encoding="utf-8").splitlines()
    rows = []
    for line in (lines[0], lines[-1]):
        event = json.loads(line)
        rows.append(
            {
                "event_id": event["id"],
                "app_name": event.pop("appName"),
                "user_id": event.pop("userId"),
                "session_id": event.pop("sessionId"),
                "invocation_id": event["invocationId"],
                "ts": pd.Timestamp(event["timestamp"], unit="ms", tz="UTC").to_pydatetime(),
                "event": event,
            }
        )
    url = f"sqlite:///{sqlite_path}"
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    store.create_tables(engine, store.kit_metadata)
    store.insert_rows(engine, store.adk_event, rows)
    engine.dispose()
    source = SourceSpec("events", url_ref="env:IK_EVENTS")
    loaded = events.load(source, Filters(), environ={"IK_EVENTS": url})
    assert rejects(loaded) == [
        {
            "location": "adk_event:call-no-name",
            "reason": "content.parts[0].functionCall.name is missing",
        }
    ]
    assert list(loaded.frames["calls"]["call_id"]) == ["adk-5"]
