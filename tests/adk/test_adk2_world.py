"""What real google-adk 2.x stores for compaction, rewind, resume, a retried tool timeout and a
``max_llm_calls`` runaway, and what the BigQuery Agent Analytics plugin writes for them.

``adk2_world`` runs each incident through ADK into its own SQLite store and records what ADK did
while it ran (invocations yielded, model calls made, tool runs, summaries asked for). These tests
pin the stored shape against that record and against ADK's documented rules, so the world cannot
drift silently when google-adk changes: they are the facts issue 30's loaders and flows build on.
Like the other ADK tests they fail, never skip, without the adk extra, naming what to install.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.adk

INSTALL = "pip install -e '.[adk]'"
BARE_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
E_UUID = re.compile(r"^e-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # the parent package is missing
        return False


@pytest.fixture(scope="module")
def w() -> ModuleType:
    """The world's module, or a failure naming the extra."""
    needed = (
        "google.adk",
        "opentelemetry.sdk",
        "aiosqlite",
        "google.cloud.bigquery",
        "google.cloud.bigquery_storage_v1",
    )
    missing = [name for name in needed if not _has(name)]
    if missing:
        pytest.fail(
            f"the ADK 2.x world needs {', '.join(missing)}, from the project's adk extra "
            f"(google-adk[db,bigquery-analytics], opentelemetry-sdk, aiosqlite); install it: "
            f"{INSTALL}",
            pytrace=False,
        )
    from . import adk2_world

    return adk2_world


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("adk2")


@pytest.fixture(scope="module")
def compaction(w: ModuleType, worlds: Path) -> Any:
    return w.build_compaction(worlds / "compaction")


@pytest.fixture(scope="module")
def rewind(w: ModuleType, worlds: Path) -> Any:
    return w.build_rewind(worlds / "rewind")


@pytest.fixture(scope="module")
def resume(w: ModuleType, worlds: Path) -> Any:
    return w.build_resume(worlds / "resume")


@pytest.fixture(scope="module")
def timeout(w: ModuleType, worlds: Path) -> Any:
    return w.build_timeout(worlds / "timeout")


@pytest.fixture(scope="module")
def runaway(w: ModuleType, worlds: Path) -> Any:
    return w.build_runaway(worlds / "runaway")


@pytest.fixture(scope="module")
def analytics(w: ModuleType, worlds: Path) -> Any:
    return w.build_analytics(worlds / "analytics")


@pytest.fixture(scope="module")
def markers(w: ModuleType, worlds: Path) -> Any:
    return w.build_analytics_markers(worlds / "markers")


# --- reading the store -----------------------------------------------------------------------


def _data(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [row["event_data"] for row in rows]


def _of(events: list[dict[str, Any]], invocation_id: str) -> list[dict[str, Any]]:
    return [e for e in events if e["invocation_id"] == invocation_id]


def _actions(event: dict[str, Any]) -> dict[str, Any]:
    """The event's actions without the fields ADK always writes empty."""
    return {k: v for k, v in (event.get("actions") or {}).items() if v not in ({}, None)}


def _parts(event: dict[str, Any]) -> list[dict[str, Any]]:
    content = event.get("content")
    return list(content.get("parts") or []) if content else []


def _calls(event: dict[str, Any]) -> list[dict[str, Any]]:
    return [p["function_call"] for p in _parts(event) if p.get("function_call")]


def _responses(event: dict[str, Any]) -> list[dict[str, Any]]:
    return [p["function_response"] for p in _parts(event) if p.get("function_response")]


def _is_model_call(event: dict[str, Any]) -> bool:
    """One model response as ADK stores it: model-role content from an agent."""
    content = event.get("content")
    return event["author"] != "user" and content is not None and content.get("role") == "model"


def _model_calls(events: list[dict[str, Any]]) -> collections.Counter[str]:
    return collections.Counter(e["invocation_id"] for e in events if _is_model_call(e))


def _is_checkpoint(event: dict[str, Any]) -> bool:
    actions = _actions(event)
    return "content" not in event and ("end_of_agent" in actions or "agent_state" in actions)


# --- 1. compaction ---------------------------------------------------------------------------


def test_compaction_fires_after_every_interval(compaction: Any, w: ModuleType) -> None:
    triggers = [
        compaction.invocations[k * w.COMPACTION_INTERVAL - 1]
        for k in range(1, w.TURNS // w.COMPACTION_INTERVAL + 1)
    ]
    assert [c.after for c in compaction.compactions] == triggers
    assert compaction.summariser_calls == len(compaction.compactions) == 4


def test_a_compaction_is_one_content_less_user_event_with_a_bare_uuid(
    compaction: Any, w: ModuleType
) -> None:
    events = _data(compaction.store.events())
    stored = [e for e in events if "compaction" in _actions(e)]
    assert [e["id"] for e in stored] == [c.event_id for c in compaction.compactions]
    prompt, candidates = w.SUMMARY_USAGE
    for event, truth in zip(stored, compaction.compactions, strict=True):
        assert event["author"] == "user"
        assert "content" not in event
        assert event["invocation_id"] == truth.invocation_id
        assert BARE_UUID.match(event["invocation_id"]), event["invocation_id"]
        assert len(_of(events, event["invocation_id"])) == 1  # no other event shares its id
        assert set(_actions(event)) == {"compaction"}
        assert set(event["actions"]["compaction"]) == {
            "start_timestamp",
            "end_timestamp",
            "compacted_content",
        }
        assert event["actions"]["compaction"]["compacted_content"] == {
            "parts": [{"text": truth.summary}],
            "role": "model",
        }
        assert event["usage_metadata"] == {
            "prompt_token_count": prompt,
            "candidates_token_count": candidates,
            "total_token_count": prompt + candidates,
        }


def test_a_compaction_follows_its_trigger_and_covers_stored_events(compaction: Any) -> None:
    events = _data(compaction.store.events())
    position = {e["id"]: n for n, e in enumerate(events)}
    by_id = {e["id"]: e for e in events}
    for truth in compaction.compactions:
        trigger_end = max(position[e["id"]] for e in _of(events, truth.after))
        assert position[truth.event_id] == trigger_end + 1
        covered = [by_id[event_id] for event_id in truth.covered_events]  # raw events stay
        assert min(e["timestamp"] for e in covered) == truth.start_timestamp
        assert max(e["timestamp"] for e in covered) == truth.end_timestamp
        stored = by_id[truth.event_id]["actions"]["compaction"]
        assert (stored["start_timestamp"], stored["end_timestamp"]) == (
            truth.start_timestamp,
            truth.end_timestamp,
        )


def test_compaction_windows_overlap_by_the_overlap_size(compaction: Any, w: ModuleType) -> None:
    interval, overlap = w.COMPACTION_INTERVAL, w.OVERLAP_SIZE
    expected = []
    for k in range(len(compaction.compactions)):
        first_new = k * interval
        expected.append(compaction.invocations[max(0, first_new - overlap) : first_new + interval])
    assert [list(c.covered) for c in compaction.compactions] == [list(e) for e in expected]


def test_compaction_adds_invocation_ids_but_no_model_calls(compaction: Any) -> None:
    events = _data(compaction.store.events())
    ids = {e["invocation_id"] for e in events}
    assert ids == set(compaction.invocations) | {c.invocation_id for c in compaction.compactions}
    assert len(ids) == len(compaction.invocations) + len(compaction.compactions)
    assert _model_calls(events) == collections.Counter(compaction.model_calls)
    for invocation in compaction.invocations:  # every raw event is stored, plus the message
        assert len(_of(events, invocation)) == compaction.yielded[invocation] + 1


def test_the_summariser_has_only_its_compaction_span(compaction: Any) -> None:
    names = compaction.store.span_names()
    assert names.count("compact_events sliding_window") == len(compaction.compactions)
    spans = {span.context.span_id: span for span in compaction.store.spans}
    compact = [s for s in spans.values() if s.name.startswith("compact_events ")]
    assert [s.attributes["gen_ai.compaction.result_event_id"] for s in compact] == [
        c.event_id for c in compaction.compactions
    ]
    for span, truth in zip(compact, compaction.compactions, strict=True):
        parent = spans[span.parent.span_id]  # inside the invocation that triggered it
        assert parent.name.startswith("invoke_workflow ")
        assert parent.context.trace_id == next(
            s.context.trace_id
            for s in spans.values()
            if s.name.startswith("generate_content ")  # the one span naming the invocation
            and s.attributes.get("gcp.vertex.agent.invocation_id") == truth.after
        )
    assert not [n for n in names if "summariser" in n]
    assert names.count("generate_content scripted-helper") == sum(compaction.model_calls.values())


# --- 2. rewind -------------------------------------------------------------------------------


def _rewind_events(events: list[dict[str, Any]], session_id: str) -> list[dict[str, Any]]:
    return [
        e
        for e in events
        if e["session_id"] == session_id and "rewind_before_invocation_id" in _actions(e)
    ]


def test_a_rewind_is_one_content_less_user_event(rewind: Any) -> None:
    rows = rewind.store.events()
    events = [{**r["event_data"], "session_id": r["session_id"]} for r in rows]
    for truth in rewind.rewinds:
        (event,) = _rewind_events(events, truth.session_id)
        assert event["author"] == "user"
        assert "content" not in event
        assert E_UUID.match(event["invocation_id"]), event["invocation_id"]
        assert event["invocation_id"] not in rewind.invocations[truth.session_id]
        assert len(_of(events, event["invocation_id"])) == 1
        assert event["actions"]["rewind_before_invocation_id"] == truth.before
        assert event["actions"]["state_delta"] == dict(truth.delta)
        assert event["actions"]["artifact_delta"] == {}
        assert set(_actions(event)) == {"rewind_before_invocation_id", "state_delta"}


def test_a_rewind_deletes_nothing_and_undoes_every_later_invocation(rewind: Any) -> None:
    rows = rewind.store.events()
    for truth in rewind.rewinds:
        session = [r["event_data"] for r in rows if r["session_id"] == truth.session_id]
        order = [e["invocation_id"] for e in session]
        (marker,) = [e for e in session if "rewind_before_invocation_id" in _actions(e)]
        at = order.index(marker["invocation_id"])
        turns = rewind.invocations[truth.session_id]
        undone = [
            i for i in turns if order.index(i) >= order.index(truth.before) and order.index(i) < at
        ]
        assert undone == list(truth.undone)
        for invocation in truth.undone:  # still stored, each with its message and answer
            assert len(_of(session, invocation)) >= 2


def test_rewound_state_is_stored_as_nulls_and_prefixed_keys_stay(
    rewind: Any, w: ModuleType
) -> None:
    stored = w.stored_states(rewind.store.url)
    main = stored[rewind.session_id]
    assert main == {
        "channel": None,
        "ticket": "T-9",
        "plan": "basic",
        "discount": None,
        "note": None,
    }
    assert stored["app"] == {"banner": "winter", "promo": "premium"}  # not reverted
    assert stored["user"] == {"segment": "smb", "locale": "fr"}  # not reverted
    assert stored[rewind.cart_session_id] == {"cart": None}
    merged = {**main, **{f"app:{k}": v for k, v in stored["app"].items()}}
    merged |= {f"user:{k}": v for k, v in stored["user"].items()}
    assert merged == rewind.states[rewind.session_id]
    assert set(w.KEY_FATES) == set(merged)


def test_creation_state_is_in_no_event_until_the_rewind_nulls_it(
    rewind: Any, w: ModuleType
) -> None:
    rows = rewind.store.events()
    for session_id, creation in (
        (rewind.session_id, w.CREATION_STATE),
        (rewind.cart_session_id, w.CART_STATE),
    ):
        session = [r["event_data"] for r in rows if r["session_id"] == session_id]
        for key in (k for k in creation if ":" not in k):
            writes = [e for e in session if key in (e.get("actions") or {}).get("state_delta", {})]
            assert len(writes) == 1, key
            assert "rewind_before_invocation_id" in _actions(writes[0])
            assert writes[0]["actions"]["state_delta"][key] is None


def test_no_rewind_delta_names_an_app_or_user_key(rewind: Any) -> None:
    events = _data(rewind.store.events())
    for event in events:
        if "rewind_before_invocation_id" in _actions(event):
            assert not [k for k in event["actions"]["state_delta"] if ":" in k]


# --- 3. resume -------------------------------------------------------------------------------


def test_the_worker_was_killed_while_charging(resume: Any) -> None:
    assert resume.worker_exitcode == -signal.SIGKILL
    first, second = resume.runs
    assert (first.pid, second.pid) == (resume.worker_pid, os.getpid())
    assert first.at < resume.killed_at < second.at


def test_the_resumed_call_ran_again_with_the_same_call_id(resume: Any) -> None:
    assert {(r.call_id, r.invocation_id) for r in resume.runs} == {
        (resume.charge_call_id, resume.resumed)
    }
    events = _data(resume.store.events())
    calls = [e for e in events if any(c["id"] == resume.charge_call_id for c in _calls(e))]
    answers = [e for e in events if any(r["id"] == resume.charge_call_id for r in _responses(e))]
    assert len(calls) == len(answers) == 1  # one call stored, answered once, after the resume
    assert calls[0]["id"] in resume.worker_events
    assert answers[0]["id"] not in resume.worker_events
    assert calls[0]["timestamp"] < resume.runs[0].at
    assert answers[0]["timestamp"] > resume.killed_at
    assert calls[0]["invocation_id"] == answers[0]["invocation_id"] == resume.resumed


def test_the_resumed_invocation_keeps_its_id_and_its_one_message(resume: Any) -> None:
    events = _data(resume.store.events())
    stored_ids = {e["id"] for e in events}
    assert set(resume.worker_events) <= stored_ids
    messages = [e for e in _of(events, resume.resumed) if e["author"] == "user"]
    assert len(messages) == 1 and _parts(messages[0])[0].get("text")
    assert {e["invocation_id"] for e in events} == {resume.resumed, resume.approval}


def test_checkpoints_are_content_less_agent_events(resume: Any, w: ModuleType) -> None:
    events = _data(resume.store.events())
    agents = {w.RESUME_ROOT, w.CASHIER, w.NOTIFIER}
    found = collections.Counter(e["invocation_id"] for e in events if _is_checkpoint(e))
    assert found == collections.Counter(resume.checkpoints)
    for event in filter(_is_checkpoint, events):
        assert event["author"] in agents
        actions = _actions(event)
        assert actions in ({"end_of_agent": True}, {"agent_state": actions.get("agent_state")})
        if "agent_state" in actions:
            assert event["author"] == w.RESUME_ROOT
            assert actions["agent_state"]["current_sub_agent"] in {w.CASHIER, w.NOTIFIER}
    for invocation in resume.checkpoints:  # every agent ends with an end_of_agent event
        ended = [e["author"] for e in _of(events, invocation) if _actions(e).get("end_of_agent")]
        assert sorted(ended) == sorted(agents)


def test_model_calls_are_what_the_models_served(resume: Any) -> None:
    events = _data(resume.store.events())
    assert _model_calls(events) == collections.Counter(resume.model_calls)


def test_the_approval_arrives_as_a_user_response_in_its_invocation(resume: Any) -> None:
    events = _of(_data(resume.store.events()), resume.approval)
    (paused,) = [e for e in events if e.get("long_running_tool_ids")]
    assert paused["long_running_tool_ids"] == [resume.approval_call_id]
    answers = [e for e in events if any(r["id"] == resume.approval_call_id for r in _responses(e))]
    assert [e["author"] for e in answers] == ["user"]
    assert _responses(answers[0])[0]["response"] == {"status": "approved", "by": "ops-lead"}
    assert events.index(paused) < events.index(answers[0])


def test_the_journal_shows_the_charge_begun_before_the_crash(resume: Any, w: ModuleType) -> None:
    import sqlite3

    with sqlite3.connect(resume.journal) as conn:
        rows = conn.execute(
            "SELECT key, invocation_id, function_call_id, status, created_at, updated_at "
            "FROM tool_journal"
        ).fetchall()
    conn.close()
    ((key, invocation, call, status, created, updated),) = rows
    assert (key, invocation, call, status) == (
        w.CHARGE_KEY,
        resume.resumed,
        resume.charge_call_id,
        "DONE",
    )
    assert created == w.wall_time(resume.runs[0].at) < updated


# --- 4. a tool timeout retried ---------------------------------------------------------------


def test_the_tool_timed_out_once_and_ran_again(timeout: Any) -> None:
    assert timeout.tool_runs == ("USD", "CHF", "CHF")
    assert timeout.raised == ("TimeoutError",)


def test_a_retried_timeout_leaves_an_unanswered_call_and_a_content_less_error(
    timeout: Any, w: ModuleType
) -> None:
    events = _of(_data(timeout.store.events()), timeout.retried)
    kinds = [
        "message"
        if e["author"] == "user"
        else "error"
        if e.get("error_code")
        else "call"
        if _calls(e)
        else "response"
        if _responses(e)
        else "text"
        for e in events
    ]
    assert kinds == ["message", "call", "error", "call", "response", "text"]
    first, error, second, answer = events[1], events[2], events[3], events[4]
    assert error["error_code"] == "TimeoutError"
    assert error["error_message"] == ""  # str(TimeoutError())
    assert error["author"] == w.TIMEOUT_AGENT
    assert "content" not in error and "usage_metadata" not in error
    (call_1,), (call_2,) = _calls(first), _calls(second)
    assert (call_1["name"], call_1["args"]) == (call_2["name"], call_2["args"])
    assert call_1["id"] != call_2["id"]
    assert [r["id"] for r in _responses(answer)] == [call_2["id"]]
    answered = {r["id"] for e in events for r in _responses(e)}
    assert call_1["id"] not in answered


def test_the_timed_out_tool_span_is_an_error_without_its_call_id(timeout: Any) -> None:
    tools = [s for s in timeout.store.spans if s.name == "execute_tool fetch_rates"]
    failed = [s for s in tools if s.status.status_code.name == "ERROR"]
    assert len(tools) == len(timeout.tool_runs) and len(failed) == len(timeout.raised) == 1
    assert failed[0].attributes["error.type"] == "TimeoutError"
    assert failed[0].attributes["gen_ai.tool.call.id"] == "<not specified>"


def test_the_error_event_is_no_model_call(timeout: Any) -> None:
    events = _data(timeout.store.events())
    assert _model_calls(events) == collections.Counter(timeout.model_calls)
    assert timeout.model_calls[timeout.retried] == 3


# --- 5. max_llm_calls runaway ----------------------------------------------------------------


def test_the_limit_hit_is_a_content_less_error_event(runaway: Any, w: ModuleType) -> None:
    events = _of(_data(runaway.store.events()), runaway.runaway.invocation_id)
    last = events[-1]
    assert last["error_code"] == "LlmCallsLimitExceededError"
    assert last["error_message"] == runaway.limit_error
    assert str(w.LIMIT) in runaway.limit_error
    assert "content" not in last and last["author"] == w.SUPPORT
    assert [e for e in events if e.get("error_code")] == [last]


def test_runaway_model_calls_are_the_limit(runaway: Any, w: ModuleType) -> None:
    events = _data(runaway.store.events())
    assert runaway.runaway.model_calls == w.LIMIT
    assert _model_calls(events) == collections.Counter(
        {i.invocation_id: i.model_calls for i in runaway.invocations}
    )


# --- 6. the BigQuery Agent Analytics plugin --------------------------------------------------


def _rows_of(rows: list[dict[str, Any]], invocation_id: str) -> collections.Counter[str]:
    return collections.Counter(r["event_type"] for r in rows if r["invocation_id"] == invocation_id)


def test_the_plugin_creates_the_documented_table(analytics: Any, w: ModuleType) -> None:
    table = analytics.analytics.table_definition
    assert table.table_id == w.BQ_TABLE
    assert [f.name for f in table.schema] == list(w.COLUMNS)
    assert table.time_partitioning.type_ == "DAY"
    assert table.time_partitioning.field == "timestamp"
    assert table.clustering_fields == ["event_type", "agent", "user_id"]
    json_columns = {f.name for f in table.schema if f.field_type == "JSON"}
    assert json_columns == {"content", "attributes", "latency_ms"}
    assert analytics.analytics.table.column_names == list(w.COLUMNS)
    assert len(analytics.analytics.views) == len(set(analytics.analytics.views)) > 0


def test_rows_count_the_model_calls_adk_made(analytics: Any) -> None:
    rows = analytics.analytics.rows
    store = _model_calls(_data(analytics.runaway.store.events()))
    for invocation in analytics.runaway.invocations:
        types = _rows_of(rows, invocation.invocation_id)
        assert types["LLM_RESPONSE"] == invocation.model_calls == store[invocation.invocation_id]
        refused = 1 if invocation.limit_hit else 0
        assert types["LLM_REQUEST"] == invocation.model_calls + refused
        assert types["INVOCATION_STARTING"] == 1


def test_the_limit_hit_ends_in_error_rows_not_a_completion(analytics: Any) -> None:
    rows = analytics.analytics.rows
    for invocation in analytics.runaway.invocations:
        types = _rows_of(rows, invocation.invocation_id)
        mine = [r for r in rows if r["invocation_id"] == invocation.invocation_id]
        if invocation.limit_hit:
            assert types["INVOCATION_COMPLETED"] == 0
            errors = [r for r in mine if r["status"] == "ERROR"]
            assert [r["event_type"] for r in errors] == [
                "AGENT_ERROR",
                "NODE_ERROR",
                "INVOCATION_ERROR",
            ]
            assert {r["error_message"] for r in errors} == {analytics.runaway.limit_error}
            assert errors[1]["content"] == {"error_code": "LlmCallsLimitExceededError"}
            assert mine[-4]["event_type"] == "LLM_REQUEST"  # the refused call
        else:
            assert types["INVOCATION_COMPLETED"] == 1
            (done,) = [r for r in mine if r["event_type"] == "INVOCATION_COMPLETED"]
            assert set(done["latency_ms"]) == {"total_ms"}
            assert {r["status"] for r in mine} == {"OK"}


def test_tool_rows_pair_with_the_calls_adk_stored(analytics: Any) -> None:
    rows = analytics.analytics.rows
    events = _data(analytics.runaway.store.events())
    for invocation in analytics.runaway.invocations:
        calls = [c["name"] for e in _of(events, invocation.invocation_id) for c in _calls(e)]
        started = [
            r["content"]["tool"]
            for r in rows
            if r["invocation_id"] == invocation.invocation_id and r["event_type"] == "TOOL_STARTING"
        ]
        assert started == calls
        assert _rows_of(rows, invocation.invocation_id)["TOOL_COMPLETED"] == len(calls)


def test_state_deltas_are_redacted_and_the_message_delta_is_missing(
    analytics: Any, w: ModuleType
) -> None:
    rows = analytics.analytics.rows
    deltas = [r for r in rows if r["event_type"] == "STATE_DELTA"]
    assert [r["attributes"]["state_delta"] for r in deltas] == [
        {"temp:scratch": "[REDACTED]", "user:tier": "gold", "order_status": "shipped"}
    ]
    assert all(r["content"] is None for r in deltas)
    state = deltas[0]["attributes"]["session_metadata"]["state"]
    assert state["api_key"] == state["temp:request"] == "[REDACTED]"
    stored = w.stored_states(analytics.runaway.store.url)
    first = analytics.runaway.invocations[0].session_id
    assert stored[first]["api_key"] == w.USER_DELTA["api_key"]  # the ADK store keeps it
    assert "temp:request" not in stored[first]


def test_rows_share_the_invocation_trace_and_name_stored_events(analytics: Any) -> None:
    rows = analytics.analytics.rows
    spans = analytics.runaway.store.spans
    roots = {
        span.context.span_id: span for span in spans if span.name.startswith("invoke_workflow ")
    }
    stored = {e["id"] for e in _data(analytics.runaway.store.events())}
    for invocation in analytics.runaway.invocations:
        mine = [r for r in rows if r["invocation_id"] == invocation.invocation_id]
        (start,) = [r for r in mine if r["event_type"] == "INVOCATION_STARTING"]
        root = roots[int(start["span_id"], 16)]
        assert {r["trace_id"] for r in mine} == {f"{root.context.trace_id:032x}"}
        sources = {r["attributes"]["adk"].get("source_event_id") for r in mine} - {None}
        assert sources and sources <= stored


def test_the_exports_hold_the_same_rows(analytics: Any, w: ModuleType) -> None:
    import pyarrow.parquet as pq

    saved = analytics.analytics
    nested = [json.loads(line) for line in saved.nested.read_text().splitlines()]
    extract = [json.loads(line) for line in saved.extract.read_text().splitlines()]
    parquet = pq.read_table(saved.parquet)
    assert nested == saved.rows == w.export_rows(parquet, nested=True)
    assert len(extract) == len(nested)
    for flat, deep in zip(extract, nested, strict=True):
        assert flat["timestamp"].endswith(" UTC")
        assert flat["timestamp"].replace(" UTC", "Z").replace(" ", "T") == deep["timestamp"]
        for column in ("content", "attributes", "latency_ms"):
            if deep[column] is None:
                assert column not in flat  # NULLs are left out
            else:
                assert json.loads(flat[column]) == deep[column]
        for part, deep_part in zip(
            flat.get("content_parts", []), deep["content_parts"], strict=True
        ):
            assert part["part_index"] == str(deep_part["part_index"])  # INT64 as a string


def test_nothing_was_dropped_and_rows_went_to_the_default_stream(
    analytics: Any, w: ModuleType
) -> None:
    saved = analytics.analytics
    assert not any(saved.drops.values()), saved.drops
    assert set(saved.streams) == {
        f"projects/{w.BQ_PROJECT}/datasets/{w.BQ_DATASET}/tables/{w.BQ_TABLE}/_default"
    }


def test_compaction_and_rewind_never_reach_the_table(markers: Any) -> None:
    events = _data(markers.store.events())
    compactions = [e for e in events if "compaction" in _actions(e)]
    rewinds = [e for e in events if "rewind_before_invocation_id" in _actions(e)]
    assert len(compactions) == len(rewinds) == 1
    rows = markers.analytics.rows
    assert not [r for r in rows if r["event_type"] == "EVENT_COMPACTION"]
    marker_ids = {compactions[0]["invocation_id"], rewinds[0]["invocation_id"]}
    assert not [r for r in rows if r["invocation_id"] in marker_ids]
    assert collections.Counter(r["event_type"] for r in rows)["LLM_RESPONSE"] == len(
        markers.invocations
    )  # the summary call is not logged
    assert {r["invocation_id"] for r in rows} == set(markers.invocations)


def test_checkpoints_are_logged_as_agent_state_checkpoint_rows(markers: Any) -> None:
    events = _data(markers.store.events())
    checkpoints = {e["id"] for e in events if _is_checkpoint(e)}
    rows = [r for r in markers.analytics.rows if r["event_type"] == "AGENT_STATE_CHECKPOINT"]
    assert {r["attributes"]["adk"]["source_event_id"] for r in rows} == checkpoints
    assert len(rows) == len(checkpoints) == len(markers.invocations)
    assert {json.dumps(r["content"], sort_keys=True) for r in rows} == {
        json.dumps({"agent_state": None, "end_of_agent": True}, sort_keys=True)
    }
