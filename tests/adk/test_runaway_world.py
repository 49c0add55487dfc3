"""The runaway world written by the real google-adk, read through the kit's loaders.

``adk_runaway_world.build_runaway_world`` runs healthy invocations and three that ADK stops at
``max_llm_calls`` (identical tool calls, a transfer ping-pong, a loop agent that never exits)
into each store; these tests pin what ADK stored for them, as the kit's ``events``, ``calls``,
``responses``, ``state_writes`` and ``spans`` frames show it. They are the facts the runaway
flow's conformance test builds on. Like ``test_conformance.py`` they fail, never skip, without
the adk extra, naming the install command.
"""

from __future__ import annotations

import importlib.util
import json
import uuid
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pandas as pd
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from incidentkit.evidence import Evidence, open_evidence
from incidentkit.manifest import load_manifest

pytestmark = [pytest.mark.adk, pytest.mark.xdist_group("adk_runaway_world")]  # worlds built once

INSTALL = "pip install -e '.[adk]'"
LIMIT_CODE = "LlmCallsLimitExceededError"


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # the parent package is missing
        return False


def _world_module() -> ModuleType:
    """The world's module, or a failure naming the extra (import errors past that check mean
    ADK's API changed: fix adk_runaway_world.py)."""
    missing = [name for name in ("google.adk", "opentelemetry.sdk", "aiosqlite") if not _has(name)]
    if missing:
        pytest.fail(
            f"the ADK runaway world needs {', '.join(missing)}, from the project's adk extra "
            f"(google-adk[db], opentelemetry-sdk, aiosqlite); install it: {INSTALL}",
            pytrace=False,
        )
    from . import adk_runaway_world

    return adk_runaway_world


@pytest.fixture(scope="module")
def rw() -> ModuleType:
    return _world_module()


@pytest.fixture(scope="module")
def pg_databases(pg_admin_url: str) -> Iterator[Callable[[], str]]:
    """Makes fresh PostgreSQL databases that live as long as this module's tests."""
    admin = sa.create_engine(pg_admin_url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    names: list[str] = []

    def create() -> str:
        name = f"ik_runaway_{uuid.uuid4().hex[:12]}"
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        names.append(name)
        # psycopg 3 serves SQLAlchemy's sync and async engines under one driver name.
        url = make_url(pg_admin_url).set(drivername="postgresql+psycopg", database=name)
        return url.render_as_string(hide_password=False)

    yield create
    with admin.connect() as conn:
        for name in names:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(
    scope="module",
    params=["sqlite", "db-sqlite", pytest.param("db-postgresql", marks=pytest.mark.postgres)],
)
def world(
    request: pytest.FixtureRequest, rw: ModuleType, tmp_path_factory: pytest.TempPathFactory
) -> Any:
    """The world built once per backend (telemetry schema 2, ADK 2.x's default)."""
    backend = str(request.param)
    url = request.getfixturevalue("pg_databases")() if backend == "db-postgresql" else None
    return rw.build_runaway_world(
        tmp_path_factory.mktemp(f"runaway-{backend}"), backend=backend, url=url
    )


@pytest.fixture(scope="module")
def legacy_world(rw: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The world under ADK's legacy telemetry names (``ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1``)."""
    folder = tmp_path_factory.mktemp("runaway-legacy")
    return rw.build_runaway_world(folder, backend="sqlite", telemetry_schema="1")


def _open(world: Any) -> Evidence:
    evidence = open_evidence(world.manifest, environ=world.environ)
    rejects = evidence.rejects
    assert rejects.empty, "the kit rejected rows ADK wrote:\n" + rejects.to_string()
    return evidence


def _of(frame: pd.DataFrame, invocation: Any) -> pd.DataFrame:
    """``frame``'s rows of one invocation, in the order ADK stored them."""
    rows = frame.loc[frame["invocation_id"].eq(invocation.invocation_id)]
    return rows.sort_values("seq", kind="stable") if "seq" in rows else rows


def _model_events(evidence: Evidence, invocation: Any) -> pd.DataFrame:
    """The events a model call produced: an agent's events that answer no function call
    and carry no error (the frames keep no content role; a function response is the agent's
    too, with role ``user``)."""
    events = _of(evidence.events, invocation)
    answers = set(evidence.responses["event_id"])
    own = events["author"].ne("user") & events["error_code"].isna()
    return events.loc[own & ~events["event_id"].isin(answers)]


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# --- the world itself ------------------------------------------------------------------------


def test_the_world_has_healthy_traffic_and_three_runaways(world: Any, rw: ModuleType) -> None:
    kinds = rw.Kind
    healthy = world.of_kind(kinds.HEALTHY)
    assert len(healthy) >= 10
    assert {inv.model_calls for inv in healthy} == {1, 2, 3, 4}
    assert any(inv.tool_calls > len(inv.transfers) for inv in healthy), "a healthy tool call"
    assert not any(inv.limit_hit for inv in healthy)
    runaways = [inv for inv in world.invocations if inv.kind is not kinds.HEALTHY]
    assert sorted(inv.kind for inv in runaways) == sorted(
        [kinds.REPEAT, kinds.PING_PONG, kinds.LOOP]
    )
    for inv in runaways:
        # ADK counts before it calls the model: the call past the limit never reaches it.
        assert inv.limit_hit and inv.model_calls == inv.limit == world.limit == rw.LIMIT
        assert inv.error_message == f"Max number of llm calls limit of `{rw.LIMIT}` exceeded"
    assert all(
        inv.total_tokens == inv.prompt_tokens + inv.candidates_tokens > 0
        for inv in world.invocations
    )
    assert len({inv.invocation_id for inv in world.invocations}) == len(world.invocations)


def test_the_manifest_names_the_exit_key_but_not_the_limit(world: Any, rw: ModuleType) -> None:
    manifest = load_manifest(world.manifest)
    assert manifest.apps == {rw.APP: {"loop_exit_keys": [rw.EXIT_KEY]}}
    evidence = _open(world)
    assert set(evidence.events["event_id"]) == {event.id for event in world.events}
    assert set(evidence.events["app_name"]) == {rw.APP}
    assert len(evidence.spans) == len(world.spans)


# --- events ----------------------------------------------------------------------------------


def test_each_limit_hit_leaves_one_error_event(world: Any, rw: ModuleType) -> None:
    evidence = _open(world)
    events = evidence.events
    errors = events.loc[events["error_code"].notna()]
    hits = [inv for inv in world.invocations if inv.limit_hit]
    assert sorted(errors["invocation_id"]) == sorted(inv.invocation_id for inv in hits)
    # The error event's author is not the refused agent. ADK's node runner authors it
    # `ctx.event_author or node.name` (google/adk/workflow/_node_runner.py `_enrich_event`); a
    # node context inherits its parent's event_author (agents/context.py) and takes the author
    # of each event the node yields (llm_agent.py / base_agent.py `_run_impl`). So: the root
    # when refunds_agent is refused before its node yields anything, draft_agent (the last to
    # yield) when the loop's review_agent is refused.
    authors = {rw.Kind.REPEAT: rw.ROOT, rw.Kind.PING_PONG: rw.ROOT, rw.Kind.LOOP: rw.DRAFT}
    adk = {event.invocation_id: event for event in world.events if event.error_code}
    for inv in hits:
        own = _of(events, inv)
        (row,) = own.loc[own["error_code"].notna()].to_dict("records")
        assert row["event_id"] == adk[inv.invocation_id].id
        assert row["author"] == adk[inv.invocation_id].author
        assert row["error_code"] == LIMIT_CODE
        assert row["error_message"] == inv.error_message
        assert f"limit of `{inv.limit}` exceeded" in row["error_message"]
        assert row["author"] == authors[inv.kind], inv.kind
        assert row["final_response"] is True and pd.isna(row["text"])
        assert row["seq"] == own["seq"].max(), "the error event is the invocation's last"
        assert row["event_id"] not in set(evidence.calls["event_id"])


def test_the_stored_error_event_carries_only_the_error(world: Any, rw: ModuleType) -> None:
    rows = {
        row["invocation_id"]: row
        for row in world.stored_rows()
        if "error_code" in row["event_data"]
    }
    paths = {
        rw.Kind.REPEAT: f"{rw.ROOT}@1",
        rw.Kind.PING_PONG: f"{rw.ROOT}@1/{rw.REFUNDS}@4",  # refunds_agent's 4th turn, refused
        rw.Kind.LOOP: f"{rw.ROOT}@1/{rw.LOOP}@1",  # LoopAgent's sub-agents are not nodes
    }
    hits = [inv for inv in world.invocations if inv.limit_hit]
    assert set(rows) == {inv.invocation_id for inv in hits}
    for inv in hits:
        data = rows[inv.invocation_id]["event_data"]
        # No content, usage, finish reason or branch: the refused call produced nothing.
        assert data == {
            "id": data["id"],
            "invocation_id": inv.invocation_id,
            "author": data["author"],
            "error_code": LIMIT_CODE,
            "error_message": inv.error_message,
            "actions": {
                "state_delta": {},
                "artifact_delta": {},
                "requested_auth_configs": {},
                "requested_tool_confirmations": {},
            },
            "node_info": {"path": paths[inv.kind]},
            "timestamp": data["timestamp"],
        }


def test_model_events_are_the_model_calls_adk_made(world: Any) -> None:
    evidence = _open(world)
    for inv in world.invocations:
        model = _model_events(evidence, inv)
        # The refused call leaves no model event: only the error event (counted apart).
        assert len(model) == inv.model_calls, (inv.kind, inv.text)
        assert model["author"].value_counts().to_dict() == dict(inv.calls_by_agent), inv.text
        calls = _of(evidence.calls, inv)
        assert len(calls) == inv.tool_calls, inv.text
        assert set(calls["event_id"]) <= set(model["event_id"])
        # Every call was answered, the last one included, before the refused model call.
        assert set(_of(evidence.responses, inv)["call_id"]) == set(calls["call_id"])


def test_ping_pong_transfers_alternate(world: Any, rw: ModuleType) -> None:
    evidence = _open(world)
    inv = world.one(rw.Kind.PING_PONG)
    a, b = inv.ping_pong_agents
    assert inv.transfers == (a, *[b, a] * ((rw.LIMIT - 1) // 2), b)
    events = _of(evidence.events, inv)
    moves = events.loc[events["transfer_to_agent"].notna()]
    # The transfer lands on the function response event of the agent that transferred.
    assert list(moves["transfer_to_agent"]) == list(inv.transfers)
    assert list(moves["author"]) == [rw.ROOT, *inv.transfers[:-1]]
    assert set(moves["event_id"]) <= set(evidence.responses["event_id"])
    calls = _of(evidence.calls, inv)
    assert set(calls["name"]) == {"transfer_to_agent"}
    assert [args["agent_name"] for args in calls["args"]] == list(inv.transfers)
    assert inv.refused_agent == inv.transfers[-1]


def test_repeated_calls_share_one_args_key(world: Any, rw: ModuleType) -> None:
    evidence = _open(world)
    inv = world.one(rw.Kind.REPEAT)
    calls = _of(evidence.calls, inv)
    assert len(calls) == inv.repeats == rw.LIMIT
    assert set(calls["name"]) == {inv.repeated_tool}
    assert set(calls["args_key"]) == {_canonical(dict(inv.repeated_args))}
    assert all(args == inv.repeated_args for args in calls["args"])
    assert calls["call_id"].is_unique
    responses = _of(evidence.responses, inv)
    assert all(response == rw.BUSY for response in responses["response"])
    assert list(_model_events(evidence, inv)["author"]) == [rw.ROOT] * rw.LIMIT


def test_loop_cycles_and_never_writes_its_exit_key(world: Any, rw: ModuleType) -> None:
    evidence = _open(world)
    inv = world.one(rw.Kind.LOOP)
    assert inv.loop_agent == rw.LOOP
    assert (inv.loop_iterations, inv.loop_completed) == (rw.LIMIT // 2, rw.LIMIT // 2 - 1)
    authors = list(_model_events(evidence, inv)["author"])
    assert authors == [rw.ROOT] + [rw.DRAFT, rw.REVIEW] * inv.loop_completed + [rw.DRAFT]
    assert inv.refused_agent == rw.REVIEW
    writes = _of(evidence.state_writes, inv)
    assert set(writes["key"]) == {"review:draft"}
    assert len(writes) == inv.loop_iterations
    assert not _of(evidence.events, inv)["escalate"].any()
    assert not inv.exit_key_written
    # The healthy loop wrote the key and escalated, and ended.
    (done,) = [i for i in world.of_kind(rw.Kind.HEALTHY) if i.loop_agent]
    assert done.exit_key_written and done.loop_iterations == 1
    approved = _of(evidence.state_writes, done)
    assert approved.loc[approved["key"].eq(rw.EXIT_KEY), "value"].tolist() == [True]
    assert _of(evidence.events, done)["escalate"].sum() == 1


# --- spans -----------------------------------------------------------------------------------


def _by_invocation(evidence: Evidence, inv: Any) -> pd.DataFrame:
    spans = evidence.spans
    return spans.loc[spans["invocation_id"].eq(inv.invocation_id)]


def test_spans_count_the_model_calls_and_carry_the_limit_error(world: Any) -> None:
    evidence = _open(world)
    assert evidence.spans["invocation_id"].notna().all()
    for inv in world.invocations:
        spans = _by_invocation(evidence, inv)
        model = spans.loc[spans["kind"].eq("call_llm")]
        # Schema 2: one generate_content span per model call; the refused call has none.
        assert len(model) == inv.model_calls, inv.text
        assert model["agent_name"].value_counts().to_dict() == dict(inv.calls_by_agent)
        assert (model["status"] == "UNSET").all()
        usage = [
            (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"])
            for a in model["attributes"]
        ]
        assert sum(u[0] for u in usage) == inv.prompt_tokens
        assert sum(u[1] for u in usage) == inv.candidates_tokens
        failed = spans.loc[spans["status"].eq("ERROR")]
        if not inv.limit_hit:
            assert failed.empty, inv.text
            continue
        assert set(failed["status_message"]) == {f"{LIMIT_CODE}: {inv.error_message}"}
        assert set(failed["kind"]) == {"invocation", "invoke_agent"}
        # The refused agent's invoke_agent span is the deepest that failed.
        agents = failed.loc[failed["kind"].eq("invoke_agent")]
        deepest = agents.loc[~agents["span_id"].isin(agents["parent_span_id"])]
        assert deepest["agent_name"].tolist() == [inv.refused_agent]


def test_legacy_spans_keep_a_call_llm_span_for_the_refused_call(legacy_world: Any) -> None:
    world = legacy_world
    evidence = _open(world)
    for inv in world.invocations:
        spans = _by_invocation(evidence, inv)
        model = spans.loc[spans["kind"].eq("call_llm")]
        refused = model.loc[model["status"].eq("ERROR")]
        assert len(model) == inv.model_calls + inv.limit_hit, inv.text
        assert len(refused) == inv.limit_hit
        if inv.limit_hit:
            (row,) = refused.to_dict("records")
            # No ADK attribute on it (no agent, model or ids): only the exception the kit copies
            # from the span's exception event; its agent is the parent invoke_agent span's.
            assert row["name"] == "call_llm"
            assert row["attributes"] == {
                "exception.type": "google.adk.agents.invocation_context.LlmCallsLimitExceededError",
                "exception.message": inv.error_message,
            }
            (raw,) = [s for s in world.spans if f"{s.context.span_id:016x}" == row["span_id"]]
            assert not raw.attributes and [e.name for e in raw.events] == ["exception"]
            assert row["status_message"] == f"{LIMIT_CODE}: {inv.error_message}"
            parent = spans.loc[spans["span_id"].eq(row["parent_span_id"])]
            assert parent["agent_name"].tolist() == [inv.refused_agent]


# --- the runaway flow on what ADK wrote --------------------------------------------------------


def _findings(world: Any) -> dict[str, Any]:
    from incidentkit.flows import runaway

    incident, settings = runaway.setup(open_evidence(world.manifest, environ=world.environ))
    report = runaway.triage(incident, settings)
    return json.loads(runaway.findings(report, incident, settings).to_json())


def _flow_findings(world: Any, rw: ModuleType) -> None:
    """What the runaway flow concludes from ``world``, against what ADK did."""
    findings = _findings(world)
    assert findings["verdict"] == "ACTION_NEEDED"
    items = {item["id"]: item for item in findings["items"]}
    by_kind = {inv.kind: inv for inv in world.invocations}
    runaways = [inv for inv in world.invocations if inv.limit_hit]
    hits = {row["invocation_id"]: row for row in items["runaway/hit-limit"]["rows"]}
    assert set(hits) == {inv.invocation_id for inv in runaways}
    for inv in runaways:  # ADK made exactly the limit's calls; the refused one is not counted
        row = hits[inv.invocation_id]
        assert (row["model_calls"], row["limit"]) == (inv.model_calls, rw.LIMIT)
        assert f"error event {LIMIT_CODE}" in row["evidence"]
    [calls] = items["runaway/model-calls"]["rows"]
    healthy = [float(inv.model_calls) for inv in world.of_kind(rw.Kind.HEALTHY)]
    p99 = float(pd.Series(healthy).quantile(0.99))
    assert calls["healthy_p99"] == pytest.approx(p99)
    assert calls["recommended_max_llm_calls"] == 5 * -(-3 * p99 // 5)
    assert calls["configured_max_llm_calls"] == rw.LIMIT  # from the error's own message
    assert "the limit error's message" in items["runaway/model-calls"]["title"]
    assert (calls["source"], calls["sources_agree"]) == ("events", True)
    assert calls["invocations"] == len(world.invocations)
    loops = {row["kind"]: row for row in items["runaway/loops"]["rows"]}
    assert set(loops) == {
        "transfer_ping_pong",
        "repeated_identical_call",
        "loop_agent_exit_never_written",
    }  # and nothing healthy: the healthy loop wrote its exit key and escalated
    repeat, pong, loop = by_kind[rw.Kind.REPEAT], by_kind[rw.Kind.PING_PONG], by_kind[rw.Kind.LOOP]
    row = loops["repeated_identical_call"]
    assert row["invocation_id"] == repeat.invocation_id
    assert (row["tool"], row["args"], row["repeats"]) == (
        repeat.repeated_tool,
        dict(repeat.repeated_args),
        repeat.repeats,
    )
    assert row["error_string"] == "Service busy, try again later"
    row = loops["transfer_ping_pong"]
    assert row["invocation_id"] == pong.invocation_id
    assert row["agents"] == sorted(pong.ping_pong_agents)
    assert row["hit_limit"] is True and row["tool"] is None  # its transfers are not a repeat
    row = loops["loop_agent_exit_never_written"]
    assert row["invocation_id"] == loop.invocation_id
    assert row["iterations"] == loop.loop_iterations  # rounds begun, the last one cut short
    assert rw.LOOP in items["runaway/loops"]["title"]  # named by the spans' nesting
    assert rw.EXIT_KEY in items["runaway/loops"]["title"]
    cost = {row["invocation_id"]: row for row in items["runaway/cost"]["rows"]}
    assert {inv: row["tokens"] for inv, row in cost.items()} == {
        inv.invocation_id: inv.total_tokens for inv in runaways
    }
    total = sum(inv.total_tokens for inv in world.invocations)
    assert findings["summary"]["tokens"] == total
    for inv in runaways:
        assert cost[inv.invocation_id]["share"] == pytest.approx(inv.total_tokens / total)


def test_the_runaway_flow_diagnoses_what_adk_stored(world: Any, rw: ModuleType) -> None:
    _flow_findings(world, rw)


def test_the_runaway_flow_reads_the_legacy_spans_alike(legacy_world: Any, rw: ModuleType) -> None:
    """The legacy schema's extra failed call_llm span (the refused call) is not a model call:
    the spans still agree with the events."""
    _flow_findings(legacy_world, rw)
