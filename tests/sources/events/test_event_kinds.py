"""Event kinds and the relations of ADK 2.x's markers, read from every events format.

Each test hand-writes the markers as the format stores them (ADK Java ``Event.toJson()``, ADK
Python ``event_data``, Agent Engine pages) and checks what the frames say of them: each
event's kind, a compaction's span and the events it covers, the events a rewind undid, and
that no marker is a final response.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa

import incidentkit as ik
from incidentkit import store
from incidentkit.frames import EventKind, build
from incidentkit.manifest import Filters, SourceSpec, Window
from incidentkit.sources import events
from incidentkit.sources.events import event_kinds
from incidentkit.sources.loaded import Loaded

MS = 1_750_000_000_000
S = MS / 1000
COMPACTION_UUID = "0b6e8f6a-3c1d-4b7e-9a55-2f4c8d1e7a90"  # a compaction's bare uuid
SUMMARY = {"role": "model", "parts": [{"text": "The user was charged."}]}


def _clean(loaded: Loaded) -> pd.DataFrame:
    assert loaded.rejects.empty, loaded.rejects.to_dict("records")
    return loaded.frames["events"].set_index("event_id")


def _ts(seconds: float) -> pd.Timestamp:
    return pd.Timestamp(round(seconds * 1e6), unit="us", tz="UTC").as_unit("ns")


def _kinds(frame: pd.DataFrame) -> dict[str, str]:
    return dict(frame["kind"])


def _by(frame: pd.DataFrame, column: str) -> dict[str, str]:
    """The event ids that have a value in ``column``, with it."""
    return dict(frame[column].dropna())


# --- ADK Java JSON ----------------------------------------------------------------------------


def _java(
    eid: str, off: int, author: str, inv: str = "e-1", session: str = "s1", **extra: Any
) -> dict[str, Any]:
    actions = {"stateDelta": {}, "artifactDelta": {}, "requestedAuthConfigs": {}}
    actions |= extra.pop("actions", {})
    return {
        "appName": "billing",
        "userId": "u1",
        "sessionId": session,
        "id": eid,
        "invocationId": inv,
        "author": author,
        "actions": actions,
        "timestamp": MS + off,
        **extra,
    }


def _text(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"text": text}]}


JAVA_EVENTS = [
    _java("j-user", 0, "user", content=_text("user", "Charge A-1")),
    _java(
        "j-call",
        1000,
        "cashier",
        content={"role": "model", "parts": [{"functionCall": {"id": "adk-1", "name": "charge"}}]},
    ),
    _java(
        "j-resp",
        2000,
        "cashier",
        content={
            "role": "user",
            "parts": [{"functionResponse": {"id": "adk-1", "name": "charge"}}],
        },
    ),
    _java("j-answer", 3000, "cashier", content=_text("model", "Charged.")),
    _java("j-end", 3100, "cashier", actions={"endOfAgent": True}),
    _java("j-legacy", 3200, "root", actions={"endInvocation": True}),  # Java's old name
    _java("j-user2", 4000, "user", inv="e-2", content=_text("user", "Again?")),
    _java("j-error", 5000, "cashier", inv="e-2", errorCode="MAX_TOKENS", errorMessage="cut"),
    _java(
        "j-error-text",
        6000,
        "cashier",
        inv="e-2",
        errorCode="SAFETY",
        content=_text("model", "I cannot."),
    ),
    # LlmEventSummarizer: author user, a bare uuid, no content, bounds in epoch ms
    _java(
        "j-compaction",
        7000,
        "user",
        inv=COMPACTION_UUID,
        actions={
            "compaction": {
                "startTimestamp": MS,
                "endTimestamp": MS + 3200,
                "compactedContent": SUMMARY,
            }
        },
    ),
    _java(
        "j-compaction2",
        8000,
        "user",
        inv="9d3c2b1a-0f4e-4d5c-8b7a-6e5f4d3c2b1a",
        actions={"compaction": {"startTimestamp": MS + 3000, "endTimestamp": MS + 6000}},
    ),
    _java("other-session", 1000, "user", session="s2", content=_text("user", "Hello")),
]


@pytest.fixture(scope="module")
def java(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    path = tmp_path_factory.mktemp("java") / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in JAVA_EVENTS), encoding="utf-8")
    return _clean(events.load(SourceSpec("events", paths=(path,)), Filters()))


def test_java_markers_get_their_kinds(java: pd.DataFrame) -> None:
    assert _kinds(java) == {
        "j-user": "turn",
        "j-call": "turn",
        "j-resp": "turn",
        "j-answer": "turn",
        "j-end": "checkpoint",
        "j-legacy": "checkpoint",
        "j-user2": "turn",
        "j-error": "error",  # an error code and no content
        "j-error-text": "turn",  # an error code with content: the model's answer
        "j-compaction": "compaction",
        "j-compaction2": "compaction",
        "other-session": "turn",
    }
    markers = ["j-end", "j-legacy", "j-compaction", "j-compaction2"]
    assert not java.loc[markers, "final_response"].any()
    assert java.loc[["j-answer", "j-error", "j-error-text"], "final_response"].all()


def test_a_java_compaction_covers_its_span_in_epoch_milliseconds(java: pd.DataFrame) -> None:
    first, second = java.loc["j-compaction"], java.loc["j-compaction2"]
    assert (first["compaction_start"], first["compaction_end"]) == (
        java.loc["j-user", "ts"],
        java.loc["j-legacy", "ts"],
    )
    assert second["compaction_start"] == java.loc["j-answer", "ts"]
    assert java.loc["j-user", "compaction_start"] is pd.NaT
    # the latest compaction that covers an event names it; markers and other sessions: none
    assert _by(java, "compacted_by") == {
        "j-user": "j-compaction",
        "j-call": "j-compaction",
        "j-resp": "j-compaction",
        "j-answer": "j-compaction2",
        "j-user2": "j-compaction2",
        "j-error": "j-compaction2",
        "j-error-text": "j-compaction2",
    }
    assert java["rewind_before"].isna().all() and java["rewound_by"].isna().all()


# --- ADK Python stores (event_data) -----------------------------------------------------------


def _python(
    eid: str, off: float, author: str, inv: str, session: str = "p1", **data: Any
) -> dict[str, Any]:
    actions = {"state_delta": {}, "artifact_delta": {}, "requested_auth_configs": {}}
    actions |= data.pop("actions", {})
    return {
        "session_id": session,
        "event_data": {
            "id": eid,
            "invocation_id": inv,
            "author": author,
            "actions": actions,
            "timestamp": S + off,
            **data,
        },
    }


def _said(role: str, text: str) -> dict[str, Any]:
    return {"content": _text(role, text)}


def _call(call_id: str, name: str) -> dict[str, Any]:
    return {
        "content": {"role": "model", "parts": [{"function_call": {"id": call_id, "name": name}}]}
    }


def _answer(call_id: str, name: str) -> dict[str, Any]:
    part = {"function_response": {"id": call_id, "name": name, "response": {"ok": True}}}
    return {"content": {"role": "user", "parts": [part]}}


PYTHON_EVENTS = [
    _python("a-user", 0.0, "user", "e-a", **_said("user", "Plan basic.")),
    _python("a-call", 0.1, "planner", "e-a", **_call("adk-a", "choose_plan")),
    _python("a-resp", 0.2, "planner", "e-a", **_answer("adk-a", "choose_plan")),
    _python("a-text", 0.3, "planner", "e-a", **_said("model", "Basic.")),
    _python("a-end", 0.4, "planner", "e-a", actions={"end_of_agent": True}),
    _python("a-state", 0.5, "root", "e-a", actions={"agent_state": {"current_sub_agent": "x"}}),
    _python("b-user", 1.0, "user", "e-b", **_said("user", "Premium.")),
    _python("b-text", 1.1, "planner", "e-b", **_said("model", "Premium.")),
    _python("c-user", 2.0, "user", "e-c", **_said("user", "A note.")),
    _python("c-end", 2.1, "planner", "e-c", actions={"end_of_agent": True}),
    # compaction after e-a (summarised while e-b ran); Python bounds in float seconds
    _python(
        "compaction",
        1.05,
        "user",
        COMPACTION_UUID,
        actions={
            "compaction": {
                "start_timestamp": S + 0.0,
                "end_timestamp": S + 0.5,
                "compacted_content": SUMMARY,
            }
        },
        usage_metadata={"prompt_token_count": 400, "candidates_token_count": 30},
    ),
    # Runner.rewind_async: an e- invocation of its own, no content
    _python(
        "rewind",
        3.0,
        "user",
        "e-r",
        actions={
            "state_delta": {"plan": "basic", "note": None},
            "rewind_before_invocation_id": "e-b",
        },
    ),
    _python("d-user", 4.0, "user", "e-d", **_said("user", "Rates?")),
    _python("d-call", 4.1, "fx", "e-d", **_call("adk-d1", "fetch_rates")),
    _python("d-timeout", 4.2, "fx", "e-d", error_code="TimeoutError", error_message=""),
    _python("d-retry", 4.3, "fx", "e-d", **_call("adk-d2", "fetch_rates")),
    _python(
        "d-limit",
        4.4,
        "fx",
        "e-d",
        error_code="LlmCallsLimitExceededError",
        error_message="Max number of llm calls limit of `4` exceeded",
    ),
]


def _store(url: str, rows: list[dict[str, Any]]) -> None:
    """A DatabaseSessionService (schema v1) store of ``rows``."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    store.create_tables(engine, store.adk_python_metadata)
    store.insert_rows(
        engine, store.adk_internal_metadata, [{"key": "schema_version", "value": "1"}]
    )
    now = datetime(2025, 6, 15, 15, 0)
    sessions = dict.fromkeys(row["session_id"] for row in rows)
    store.insert_rows(
        engine,
        store.adk_sessions,
        [
            {"app_name": "app", "user_id": "u", "id": s, "state": {}, "create_time": now}
            | {"update_time": now}
            for s in sessions
        ],
    )
    store.insert_rows(
        engine,
        store.adk_events,
        [
            {
                "id": row["event_data"]["id"],
                "app_name": "app",
                "user_id": "u",
                "session_id": row["session_id"],
                "invocation_id": row["event_data"]["invocation_id"],
                "timestamp": datetime.fromtimestamp(row["event_data"]["timestamp"], tz=UTC).replace(
                    tzinfo=None
                ),
                "event_data": row["event_data"],
            }
            for row in rows
        ],
    )
    engine.dispose()


def _load_db(url: str, filters: Filters | None = None) -> Loaded:
    spec = SourceSpec("events", url_ref="env:IK_EVENTS", format="adk-python-db")
    return events.load(spec, filters or Filters(), environ={"IK_EVENTS": url})


@pytest.fixture(scope="module")
def python_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('python') / 'adk.db'}"
    _store(url, PYTHON_EVENTS)
    return url


@pytest.fixture(scope="module")
def python(python_url: str) -> pd.DataFrame:
    return _clean(_load_db(python_url))


def test_python_markers_get_their_kinds(python: pd.DataFrame) -> None:
    kinds = _kinds(python)
    assert {k for k, v in kinds.items() if v != "turn"} == {
        "a-end",
        "a-state",
        "c-end",
        "compaction",
        "rewind",
        "d-timeout",
        "d-limit",
    }
    assert kinds["a-state"] == kinds["c-end"] == "checkpoint"
    assert kinds["d-timeout"] == kinds["d-limit"] == "error"
    assert not python.loc[["a-end", "a-state", "compaction", "rewind"], "final_response"].any()
    assert python.loc["d-timeout", "final_response"]  # ADK Python: an error that calls nothing


def test_a_python_compaction_covers_its_span_in_epoch_seconds(python: pd.DataFrame) -> None:
    row = python.loc["compaction"]
    assert row["compaction_start"] == python.loc["a-user", "ts"] == _ts(S)
    assert row["compaction_end"] == python.loc["a-state", "ts"]
    assert row["prompt_tokens"] == 400  # the summary call's cost, on its event
    assert _by(python, "compacted_by") == dict.fromkeys(
        ["a-user", "a-call", "a-resp", "a-text"], "compaction"
    )


def test_a_rewind_marks_every_event_from_its_invocation_up_to_itself(python: pd.DataFrame) -> None:
    assert _by(python, "rewind_before") == {"rewind": "e-b"}
    # e-b and e-c, the compaction and checkpoint among them too; not the rewind itself
    assert _by(python, "rewound_by") == dict.fromkeys(
        ["b-user", "compaction", "b-text", "c-user", "c-end"], "rewind"
    )


@pytest.mark.postgres
def test_the_kinds_are_the_same_on_postgresql(python: pd.DataFrame, pg_url: str) -> None:
    _store(pg_url, PYTHON_EVENTS)
    pd.testing.assert_frame_equal(_clean(_load_db(pg_url)), python)


def test_a_window_relates_the_events_it_keeps(python_url: str) -> None:
    """A read cut by a window relates what it keeps: a rewind whose invocation began before
    the window undoes from its first event inside it."""
    window = Window(_ts(S + 1.08), _ts(S + 10))
    got = _clean(_load_db(python_url, Filters(window=window)))
    assert _by(got, "rewound_by") == dict.fromkeys(["b-text", "c-user", "c-end"], "rewind")
    assert got["compacted_by"].isna().all()


# --- ADK Python session JSON (by alias) and Agent Engine pages --------------------------------


def _camel(data: dict[str, Any]) -> dict[str, Any]:
    """An ``event_data`` as ``model_dump(by_alias=True)`` writes it (the keys this test uses)."""
    names = {
        "invocation_id": "invocationId",
        "state_delta": "stateDelta",
        "artifact_delta": "artifactDelta",
        "requested_auth_configs": "requestedAuthConfigs",
        "end_of_agent": "endOfAgent",
        "agent_state": "agentState",
        "rewind_before_invocation_id": "rewindBeforeInvocationId",
        "start_timestamp": "startTimestamp",
        "end_timestamp": "endTimestamp",
        "compacted_content": "compactedContent",
        "error_code": "errorCode",
        "error_message": "errorMessage",
        "usage_metadata": "usageMetadata",
        "prompt_token_count": "promptTokenCount",
        "candidates_token_count": "candidatesTokenCount",
        "function_call": "functionCall",
        "function_response": "functionResponse",
    }
    if isinstance(data, dict):
        return {names.get(k, k): _camel(v) for k, v in data.items()}
    return data


def test_a_session_json_reads_like_the_store(tmp_path: Path, python: pd.DataFrame) -> None:
    path = tmp_path / "session.json"
    session = {
        "id": "p1",
        "appName": "app",
        "userId": "u",
        "state": {},
        "events": [_camel(row["event_data"]) for row in PYTHON_EVENTS],
        "lastUpdateTime": S + 5,
    }
    path.write_text(json.dumps(session), encoding="utf-8")
    got = _clean(events.load(SourceSpec("events", paths=(path,)), Filters()))
    cols = [c for c in python.columns if c != "source_format"]
    pd.testing.assert_frame_equal(got[cols], python[cols])


ENGINE = "projects/p/locations/us-central1/reasoningEngines/42"


def _wire(eid: str, data: dict[str, Any], *, raw: bool) -> dict[str, Any]:
    """A ``SessionEvent`` as ADK Python's VertexAiSessionService appends ``data``: the whole
    event as ``rawEvent``, or (an SDK without it) field by field, with a compaction in
    ``eventMetadata.customMetadata._compaction``."""
    stamp = datetime.fromtimestamp(data["timestamp"], tz=UTC).isoformat().replace("+00:00", "Z")
    wire = {
        "name": f"{ENGINE}/sessions/p1/events/{eid}",
        "author": data["author"],
        "invocationId": data["invocation_id"],
        "timestamp": stamp,
    }
    if raw:
        return wire | {"rawEvent": _camel(data)}
    actions = dict(data["actions"])
    compaction = actions.pop("compaction", None)
    wire["actions"] = {k: v for k, v in actions.items() if k != "end_of_agent"}
    if actions.get("end_of_agent"):  # ADK Java's converter writes it
        wire["actions"]["endOfAgent"] = True
    for key, name in (("content", "content"), ("error_code", "errorCode")):
        if key in data:
            wire[name] = _camel(data[key])
    if compaction is not None:
        wire["eventMetadata"] = {"customMetadata": {"_compaction": compaction}}
    return wire


@pytest.mark.parametrize("raw", [True, False], ids=["raw-event", "field-by-field"])
def test_agent_engine_pages_keep_the_markers(tmp_path: Path, raw: bool) -> None:
    rows = PYTHON_EVENTS
    if not raw:  # field by field, the API keeps no rewind nor agent state
        rows = [row for row in rows if row["event_data"]["id"] not in ("rewind", "a-state")]
    page = {"sessionEvents": [_wire(r["event_data"]["id"], r["event_data"], raw=raw) for r in rows]}
    session = {"name": f"{ENGINE}/sessions/p1", "userId": "u", "sessionState": {}}
    (tmp_path / "pages.jsonl").write_text(
        json.dumps(session) + "\n" + json.dumps(page) + "\n", encoding="utf-8"
    )
    (tmp_path / "evidence.toml").write_text(
        '[events]\npath = "pages.jsonl"\nformat = "vertex-ai-json"\n', encoding="utf-8"
    )
    evidence = ik.open_evidence(tmp_path)
    assert evidence.rejects.empty, evidence.rejects.to_dict("records")
    got = evidence.frame("events").set_index("event_id")
    assert got.loc["compaction", "kind"] == "compaction"
    assert got.loc["compaction", "compaction_start"] == got.loc["a-user", "ts"]
    assert got.loc["a-end", "kind"] == got.loc["c-end", "kind"] == "checkpoint"
    assert got.loc["d-timeout", "kind"] == "error"
    assert got.loc["a-text", "compacted_by"] == "compaction"
    if raw:
        assert got.loc["a-state", "kind"] == "checkpoint"
        assert got.loc["rewind", "kind"] == "rewind"
        assert got.loc["c-user", "rewound_by"] == "rewind"


# --- what is refused --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("compaction", "reason"),
    [
        ("summary", "actions.compaction is not an object"),
        ({"startTimestamp": "soon"}, "actions.compaction.startTimestamp is not a number: 'soon'"),
        ({"endTimestamp": True}, "actions.compaction.endTimestamp is not a number: True"),
        ({"startTimestamp": 1e300}, "actions.compaction.startTimestamp out of range"),
        ({"startTimestamp": S}, "actions.compaction.startTimestamp 1750000000.0 looks like epoch"),
    ],
)
def test_a_compaction_that_cannot_be_read_is_a_reject(
    tmp_path: Path, compaction: Any, reason: str
) -> None:
    bad = _java("bad", 0, "user", actions={"compaction": compaction})
    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps(bad) + "\n" + json.dumps(JAVA_EVENTS[0]) + "\n", encoding="utf-8")
    loaded = events.load(SourceSpec("events", paths=(path,)), Filters())
    (got,) = loaded.rejects["reason"]
    assert got.startswith(reason) and len(loaded.frames["events"]) == 1


@pytest.mark.parametrize(
    ("actions", "reason"),
    [
        ({"rewindBeforeInvocationId": 7}, "actions.rewindBeforeInvocationId is not text: 7"),
        ({"endOfAgent": "yes"}, "actions.endOfAgent is not true/false: 'yes'"),
    ],
)
def test_a_marker_field_of_the_wrong_type_is_a_reject(
    tmp_path: Path, actions: dict[str, Any], reason: str
) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps(_java("bad", 0, "user", actions=actions)) + "\n", encoding="utf-8")
    assert list(events.load(SourceSpec("events", paths=(path,)), Filters()).rejects["reason"]) == [
        reason
    ]


# --- the derivation on its own -----------------------------------------------------------------


def _frame(rows: list[tuple[str, str, str, str | None]]) -> pd.DataFrame:
    """Events of one session: (event_id, invocation_id, kind, rewind_before), one a second."""
    return build(
        "events",
        [
            {
                "event_id": eid,
                "app_name": "a",
                "user_id": "u",
                "session_id": "s",
                "invocation_id": inv,
                "seq": seq,
                "ts": pd.Timestamp(MS + 1000 * seq, unit="ms", tz="UTC"),
                "kind": kind,
                "rewind_before": before,
            }
            for seq, (eid, inv, kind, before) in enumerate(rows)
        ],
    )


def test_a_rewind_inside_a_later_rewinds_range_is_undone_with_it() -> None:
    """ADK's ``_apply_rewinds``: the latest rewind applies first; R1 lies in what R2 undid, so
    R1 undoes nothing and y1 stays live (not "the latest rewind covering it")."""
    frame = _frame(
        [
            ("y1", "e-y1", "turn", None),
            ("y2", "e-y2", "turn", None),
            ("r1", "e-r1", "rewind", "e-y1"),
            ("y3", "e-y3", "turn", None),
            ("r2", "e-r2", "rewind", "e-y2"),
            ("y4", "e-y4", "turn", None),
        ]
    )
    got = pd.Series(event_kinds.relations(frame)["rewound_by"], index=frame["event_id"])
    assert dict(got.dropna()) == {"y2": "r2", "r1": "r2", "y3": "r2"}


def test_a_rewind_before_an_invocation_not_before_it_undoes_nothing() -> None:
    frame = _frame(
        [
            ("x1", "e-x1", "turn", None),
            ("r1", "e-r1", "rewind", "e-gone"),  # not in the log
            ("r2", "e-r2", "rewind", "e-x3"),  # only after it
            ("x3", "e-x3", "turn", None),
            ("r3", "e-r3", "rewind", "e-x1"),  # the latest: undoes everything before it
        ]
    )
    got = pd.Series(event_kinds.relations(frame)["rewound_by"], index=frame["event_id"])
    assert dict(got.dropna()) == dict.fromkeys(["x1", "r1", "r2", "x3"], "r3")


def test_derive_gives_the_six_columns_from_raw_fields() -> None:
    """What a loader of its own (DuckDB, BigQuery rows) hands over: raw fields and keys."""
    frame = _frame([("u", "e-1", "turn", None), ("t", "e-1", "turn", None)]).drop(
        columns=["kind", "rewind_before"]
    )
    raw = {
        "has_content": [True, False],
        "error_code": [None, "TimeoutError"],
        "has_compaction": [False, False],
        "compaction_start": [None, None],
        "compaction_end": [None, None],
        "rewind_before": [None, None],
        "end_of_agent": [False, False],
        "has_agent_state": [False, False],
    }
    got = event_kinds.derive(frame.assign(**raw).set_index(pd.Index([10, 11])))
    assert list(got.columns) == [
        "kind",
        "compaction_start",
        "compaction_end",
        "compacted_by",
        "rewind_before",
        "rewound_by",
    ]
    assert list(got.index) == [10, 11] and list(got["kind"]) == ["turn", "error"]
    assert str(got["compaction_start"].dtype) == "datetime64[ns, UTC]"
    assert got[["compacted_by", "rewound_by"]].isna().all(axis=None)


def test_every_kind_is_an_event_kind() -> None:
    raw = {col: np.zeros(5, dtype=bool) for col in event_kinds.RAW}
    raw |= {"error_code": ["x", None, None, None, None], "rewind_before": [None] * 5}
    raw |= {"compaction_start": [None] * 5, "compaction_end": [None] * 5}
    raw["has_compaction"] = np.array([1, 0, 0, 0, 0], bool)
    raw["has_content"] = np.array([0, 0, 0, 1, 1], bool)
    raw["end_of_agent"] = np.array([0, 1, 0, 1, 0], bool)
    kinds = list(event_kinds.kinds(raw)["kind"])
    assert kinds == ["compaction", "checkpoint", "turn", "turn", "turn"]
    assert set(kinds) <= {kind.value for kind in EventKind}
