"""Conformance with the real google-adk: the kit loads exactly what ADK wrote.

Each test runs a scripted app through ADK's own ``Runner`` into a ``DatabaseSessionService``
store (SQLite and PostgreSQL), then compares the kit's frames with the ``events`` table read
directly, with ADK's own reading of the sessions (``get_session``), with the spans ADK
emitted, and with ``adk run --save_session`` files. docs/adk-conformance.md says what each
check guards and what to do when one fails after an ADK upgrade.
"""

from __future__ import annotations

import importlib.util
import json
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

import incidentkit
from incidentkit.evidence import Evidence
from incidentkit.sources.spans import PAYLOAD_KEYS, REDACTED

pytestmark = [pytest.mark.adk, pytest.mark.xdist_group("adk_conformance")]  # worlds built once

INSTALL = "pip install -e '.[adk]'"
MICROSECOND = pd.Timedelta(microseconds=1)


def _missing_extra() -> str | None:
    """Why the ADK conformance tests cannot run here, or None when they can."""
    missing = [name for name in ("google.adk", "opentelemetry.sdk", "aiosqlite") if not _has(name)]
    if not missing:
        return None
    return (
        f"the ADK conformance tests need {', '.join(missing)}, from the project's adk extra "
        f"(google-adk[db], opentelemetry-sdk, aiosqlite); install it: {INSTALL}"
    )


def _adk_world() -> ModuleType:
    """The scenario module (import errors past the extra check mean ADK's API changed)."""
    from . import adk_world

    return adk_world


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # the parent package is missing
        return False


@dataclass(frozen=True)
class Store:
    """Where ADK writes (an async URL, or a file for SqliteSessionService), how the test reads
    it (a sync URL), and the manifest's [events] line."""

    backend: str
    adk_store: str
    read_url: str
    events_section: str
    environ: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Scenario:
    """One run of the ADK scenario into one fresh store.

    Without the adk extra there is no run: reading ``world`` or ``store`` fails the test with
    the install command (a failure, never a skip).
    """

    built_store: Store | None
    built_world: Any
    missing: str | None = None

    @property
    def world(self) -> Any:
        if self.missing:
            pytest.fail(self.missing, pytrace=False)
        return self.built_world

    @property
    def store(self) -> Store:
        if self.missing or self.built_store is None:
            pytest.fail(self.missing or "no store", pytrace=False)
        return self.built_store


@pytest.fixture(scope="module")
def pg_databases(pg_admin_url: str) -> Iterator[Callable[[], str]]:
    """Makes fresh PostgreSQL databases that live as long as this module's tests."""
    admin = sa.create_engine(pg_admin_url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    names: list[str] = []

    def create() -> str:
        name = f"ik_adk_{uuid.uuid4().hex[:12]}"
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


@pytest.fixture(scope="module")
def runs() -> dict[tuple[str, str], Scenario]:
    """Scenario runs of this module, by (backend, telemetry schema): each runs once."""
    return {}


@pytest.fixture(
    params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres), "sqlite-service"]
)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def scenario(
    request: pytest.FixtureRequest,
    backend: str,
    runs: dict[tuple[str, str], Scenario],
    tmp_path_factory: pytest.TempPathFactory,
) -> Scenario:
    """The scenario run into a fresh store of ``backend``; ``indirect`` picks the telemetry
    schema ADK emits ("2", the 2.x default, or "1", the legacy names)."""
    schema = str(getattr(request, "param", "2"))
    missing = _missing_extra()
    if missing:
        return Scenario(None, None, missing)
    if (backend, schema) not in runs:
        adk_world = _adk_world()
        folder = tmp_path_factory.mktemp(f"adk-{backend}-{schema}")
        db = folder / "adk.db"
        if backend == "sqlite":  # DatabaseSessionService on SQLite
            store = Store(
                backend, f"sqlite+aiosqlite:///{db}", f"sqlite:///{db}", f"path = {_toml(db)}"
            )
        elif backend == "sqlite-service":  # SqliteSessionService (adk web's default store)
            store = Store(backend, str(db), f"sqlite:///{db}", f"path = {_toml(db)}")
        else:
            url = request.getfixturevalue("pg_databases")()
            store = Store(backend, url, url, 'url = "env:IK_ADK_DB"', {"IK_ADK_DB": url})
        world = adk_world.build_world(store.adk_store, folder, telemetry_schema=schema)
        runs[backend, schema] = Scenario(store, world)
    return runs[backend, schema]


def _toml(path: Path) -> str:
    return json.dumps(str(path))  # a TOML basic string


def _open(scenario: Scenario, folder: Path, **filters: Any) -> Evidence:
    """The kit's view of the scenario, through a manifest written in ``folder``."""
    manifest = folder / "evidence.toml"
    manifest.write_text(
        f'title = "ADK conformance"\nallow_outside = true\n\n'
        f"[events]\n{scenario.store.events_section}\n\n"
        f"[spans]\npath = {_toml(scenario.world.spans_file)}\n",
        encoding="utf-8",
    )
    return incidentkit.open_evidence(manifest, environ=scenario.store.environ, **filters)


def _no_rejects(evidence: Evidence) -> None:
    rejects = evidence.rejects
    assert rejects.empty, "the kit rejected rows ADK wrote:\n" + rejects.to_string()


def _scope(key: str) -> str:
    for prefix in ("app", "user", "temp"):
        if key.startswith(prefix + ":"):
            return prefix
    return "session"


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _expected_events(world: Any) -> pd.DataFrame:
    """The events frame as ADK's own ``Session.events`` define it (ts as float seconds)."""
    rows = []
    for session in world.sessions:
        for seq, event in enumerate(session.events):
            parts = event.content.parts if event.content and event.content.parts else []
            text = "".join(p.text for p in parts if p.text and not p.thought) or None
            rows.append(
                {
                    "event_id": event.id,
                    "app_name": session.app_name,
                    "user_id": session.user_id,
                    "session_id": session.id,
                    "invocation_id": event.invocation_id,
                    "seq": seq,
                    "author": event.author,
                    "branch": event.branch,
                    "partial": bool(event.partial),
                    "turn_complete": bool(event.turn_complete),
                    "interrupted": bool(event.interrupted),
                    "error_code": event.error_code,
                    "error_message": event.error_message,
                    "transfer_to_agent": event.actions.transfer_to_agent,
                    "escalate": bool(event.actions.escalate),
                    "long_running_tool_ids": tuple(sorted(event.long_running_tool_ids or ())),
                    "final_response": event.is_final_response(),
                    "text": text,
                    "timestamp": event.timestamp,
                }
            )
    return pd.DataFrame.from_records(rows)


def _frame_like(expected: list[dict[str, Any]], got: pd.DataFrame) -> pd.DataFrame:
    """``expected`` rows as a frame with ``got``'s columns and dtypes."""
    frame = pd.DataFrame.from_records(expected, columns=list(got.columns))
    for col in got.columns:
        if got[col].dtype == object:
            frame[col] = frame[col].astype(object)
        elif str(got[col].dtype) == "str":
            frame[col] = frame[col].astype(object).where(frame[col].notna(), None).astype("str")
        else:
            frame[col] = frame[col].astype(got[col].dtype)
    return frame


def _sorted(frame: pd.DataFrame, by: Iterable[str]) -> pd.DataFrame:
    return frame.sort_values(list(by), kind="stable").reset_index(drop=True)


def _check_times(got: pd.Series, seconds: pd.Series, what: str) -> None:
    expected = pd.to_datetime(seconds.astype(float), unit="s", utc=True)
    off = (got.reset_index(drop=True) - expected.reset_index(drop=True)).abs()
    assert (off <= MICROSECOND).all(), f"{what}: times differ from ADK's by up to {off.max()}"


# --- events ----------------------------------------------------------------------------------


def test_events_are_exactly_the_rows_adk_stored(scenario: Scenario, tmp_path: Path) -> None:
    world = scenario.world
    rows = _adk_world().stored_event_rows(scenario.store.read_url)
    evidence = _open(scenario, tmp_path)
    events = evidence.events
    _no_rejects(evidence)

    assert len(events) == len(rows)
    assert sorted(events["event_id"]) == sorted(row["id"] for row in rows)
    stored_invocations = {row["id"]: row["invocation_id"] for row in rows}
    assert dict(zip(events["event_id"], events["invocation_id"], strict=True)) == stored_invocations
    # ADK's own reading agrees with its table (else the scenario, not the kit, is wrong).
    assert {event.id for event in world.events} == set(stored_invocations)


def test_events_frame_matches_adk_session_events(scenario: Scenario, tmp_path: Path) -> None:
    world = scenario.world
    events = _open(scenario, tmp_path).events
    expected = _expected_events(world)
    got = _sorted(events, ["session_id", "seq"])
    want = _sorted(expected, ["session_id", "seq"])

    _check_times(got["ts"], want["timestamp"], "events.ts")
    columns = [c for c in want.columns if c != "timestamp"]
    pd.testing.assert_frame_equal(
        got[columns], _frame_like(want[columns].to_dict("records"), got[columns])
    )
    assert got["source_format"].notna().all()


def test_limit_error_transfer_and_final_responses(scenario: Scenario, tmp_path: Path) -> None:
    world = scenario.world
    events = _open(scenario, tmp_path).events.set_index("event_id")
    adk = _adk_world()
    limit = [e for e in world.events if e.error_code]
    assert len(limit) == 1, "ADK should persist exactly one LlmCallsLimitExceededError event"
    row = events.loc[limit[0].id]
    assert row["error_code"] == "LlmCallsLimitExceededError"
    assert row["error_message"] == str(world.limit_error)
    assert row["error_message"] == f"Max number of llm calls limit of `{adk.LIMIT}` exceeded"
    assert bool(row["final_response"]) is limit[0].is_final_response() is True

    transfers = [e for e in world.events if e.actions.transfer_to_agent]
    assert [events.loc[e.id, "transfer_to_agent"] for e in transfers] == [adk.SUB_AGENT]
    finals = {e.id for e in world.events if e.is_final_response()}
    assert set(events.index[events["final_response"]]) == finals


def test_filters_select_what_adk_stored_in_them(scenario: Scenario, tmp_path: Path) -> None:
    world = scenario.world
    first, second = world.sessions
    invocations = list(dict.fromkeys(event.invocation_id for event in first.events))
    assert len(invocations) == 2
    # A window opening between the two invocations of the first session (naive-UTC columns).
    last_of_first = max(e.timestamp for e in first.events if e.invocation_id == invocations[0])
    first_of_next = min(e.timestamp for e in first.events if e.invocation_id == invocations[1])
    # (Whole microseconds: sql.where's to_pydatetime warns on nanoseconds; see the doc.)
    start = pd.Timestamp((last_of_first + first_of_next) / 2, unit="s", tz="UTC").floor("us")
    cases: list[tuple[dict[str, Any], set[str]]] = [
        (
            {"window": (start, start + pd.Timedelta(hours=1))},
            {e.id for e in world.events if e.timestamp >= start.timestamp()},
        ),
        ({"session_ids": [second.id]}, {e.id for e in second.events}),
        (
            {"invocation_ids": [invocations[1]]},
            {e.id for e in world.events if e.invocation_id == invocations[1]},
        ),
        ({"app_name": "another_app"}, set()),
    ]
    for i, (filters, expected) in enumerate(cases):
        folder = tmp_path / f"case{i}"
        folder.mkdir()
        evidence = _open(scenario, folder, **filters)
        assert set(evidence.events["event_id"]) == expected, filters
        assert set(evidence.calls["event_id"]) <= expected, filters
        assert set(evidence.state_writes["event_id"]) <= expected, filters
    assert 0 < len(cases[0][1]) < len(world.events)


# --- calls, responses, state -----------------------------------------------------------------


def test_calls_and_responses_match_adk(scenario: Scenario, tmp_path: Path) -> None:
    world = scenario.world
    evidence = _open(scenario, tmp_path)
    calls, responses = evidence.calls, evidence.responses
    want_calls: list[dict[str, Any]] = []
    want_responses: list[dict[str, Any]] = []
    seconds: dict[str, list[float]] = {"calls": [], "responses": []}
    for session in world.sessions:
        for seq, event in enumerate(session.events):
            common = {
                "event_id": event.id,
                "session_id": session.id,
                "invocation_id": event.invocation_id,
                "seq": seq,
                "author": event.author,
            }
            for call in event.get_function_calls():
                want_calls.append(
                    common
                    | {
                        "call_id": call.id,
                        "name": call.name,
                        "args": call.args,
                        "args_key": _canonical(call.args),
                        "long_running": call.id in (event.long_running_tool_ids or ()),
                    }
                )
                seconds["calls"].append(event.timestamp)
            for response in event.get_function_responses():
                want_responses.append(
                    common
                    | {"call_id": response.id, "name": response.name, "response": response.response}
                )
                seconds["responses"].append(event.timestamp)

    assert len(calls) == len(want_calls) > 0
    assert len(responses) == len(want_responses) > 0
    for name, got, want in (
        ("calls", calls, want_calls),
        ("responses", responses, want_responses),
    ):
        got = _sorted(got, ["session_id", "seq", "call_id"])
        expected = _frame_like(want, got.drop(columns="ts"))
        expected["timestamp"] = seconds[name]
        expected = _sorted(expected, ["session_id", "seq", "call_id"])
        _check_times(got["ts"], expected["timestamp"], f"{name}.ts")
        pd.testing.assert_frame_equal(
            got.drop(columns="ts"), expected.drop(columns="timestamp"), obj=name
        )
    # Every call was answered, with ADK-assigned ids.
    assert set(calls["call_id"]) == set(responses["call_id"])
    assert calls["call_id"].str.startswith("adk-").all()


def test_state_writes_match_stored_deltas(scenario: Scenario, tmp_path: Path) -> None:
    world = scenario.world
    rows = _adk_world().stored_event_rows(scenario.store.read_url)
    stored = {row["id"]: row["event_data"]["actions"]["state_delta"] for row in rows}
    adk_deltas = {event.id: event.actions.state_delta for event in world.events}
    assert stored == adk_deltas  # what ADK stored is what ADK reads back

    state = _open(scenario, tmp_path).state_writes
    want = []
    for session in world.sessions:
        for seq, event in enumerate(session.events):
            for key, value in stored[event.id].items():
                want.append(
                    {
                        "event_id": event.id,
                        "session_id": session.id,
                        "invocation_id": event.invocation_id,
                        "seq": seq,
                        "author": event.author,
                        "key": key,
                        "scope": _scope(key),
                        "value": value,
                        "removed": value is None,
                        "partial": bool(event.partial),
                        "timestamp": event.timestamp,
                    }
                )
    keys = {row["key"] for row in want}
    assert {"user:tier", "app:region", "order_status", "last_order", "ticket"} <= keys
    assert not any(key.startswith("temp:") for delta in stored.values() for key in delta), (
        "ADK 2.13 strips temp: keys before storing; this ADK stored one"
    )
    assert not state["key"].str.startswith("temp:").any()

    got = _sorted(state, ["session_id", "seq", "key"])
    expected = _frame_like(want, got.drop(columns="ts"))
    expected["timestamp"] = [row["timestamp"] for row in want]
    expected = _sorted(expected, ["session_id", "seq", "key"])
    _check_times(got["ts"], expected["timestamp"], "state_writes.ts")
    pd.testing.assert_frame_equal(got.drop(columns="ts"), expected.drop(columns="timestamp"))


# --- adk run --save_session ------------------------------------------------------------------


def test_saved_session_json_loads_like_the_database(scenario: Scenario, tmp_path: Path) -> None:
    world = scenario.world
    database = _open(scenario, tmp_path)
    manifest = tmp_path / "saved" / "evidence.toml"
    manifest.parent.mkdir()
    paths = ", ".join(_toml(path) for path in world.session_files)
    manifest.write_text(f"allow_outside = true\n[events]\npaths = [{paths}]\n", encoding="utf-8")
    saved = incidentkit.open_evidence(manifest)
    _no_rejects(saved)

    pd.testing.assert_frame_equal(
        saved.events.drop(columns="source_format"), database.events.drop(columns="source_format")
    )
    for name in ("calls", "responses", "state_writes"):
        pd.testing.assert_frame_equal(saved.frame(name), database.frame(name), obj=name)
    assert set(saved.events["source_format"]).isdisjoint(set(database.events["source_format"]))


# --- spans -----------------------------------------------------------------------------------


def _expected_kind(name: str, parent_name: str | None) -> str:
    """What a span measures, from ADK's span names (adk-formats.md §3, §5.7)."""
    if name == "invocation" or name.startswith("invoke_workflow "):
        return "invocation"
    if name.startswith("invoke_agent "):
        return "invoke_agent"
    if name == "call_llm":
        return "call_llm"
    if name.startswith("generate_content "):
        # legacy schema: call_llm wraps generate_content; the model call counts once
        return "other" if parent_name == "call_llm" else "call_llm"
    if name.startswith("execute_tool "):
        return "execute_tool"
    return "other"


def _spread(frame: pd.DataFrame, col: str) -> pd.Series:
    """The documented rule: a trace whose spans name exactly one value shares it."""
    named = frame.dropna(subset=[col]).groupby("trace_id")[col].unique()
    single = {trace: values[0] for trace, values in named.items() if len(values) == 1}
    return frame[col].where(frame[col].notna(), frame["trace_id"].map(single))


def _expected_spans(world: Any) -> pd.DataFrame:
    names = {span.context.span_id: span.name for span in world.spans}
    rows = []
    for span in world.spans:
        attrs = dict(span.attributes or {})
        parent = span.parent.span_id if span.parent else None
        kind = _expected_kind(span.name, names.get(parent) if parent else None)
        agent = attrs.get("gen_ai.agent.name")
        if agent is None and kind == "invoke_agent":
            agent = span.name.removeprefix("invoke_agent ")
        tool = attrs.get("gen_ai.tool.name")
        if tool is None and kind == "execute_tool":
            tool = span.name.removeprefix("execute_tool ")
        rows.append(
            {
                "trace_id": f"{span.context.trace_id:032x}",
                "span_id": f"{span.context.span_id:016x}",
                "parent_span_id": None if parent is None else f"{parent:016x}",
                "name": span.name,
                "kind": kind,
                "start": pd.Timestamp(span.start_time, unit="ns", tz="UTC"),
                "end": pd.Timestamp(span.end_time, unit="ns", tz="UTC"),
                "status": span.status.status_code.name,
                "status_message": span.status.description,
                "invocation_id": attrs.get("gcp.vertex.agent.invocation_id"),
                "session_id": attrs.get(
                    "gcp.vertex.agent.session_id", attrs.get("gen_ai.conversation.id")
                ),
                "agent_name": agent,
                "tool_name": tool,
                "tool_call_id": attrs.get("gen_ai.tool.call.id"),
            }
        )
    frame = pd.DataFrame.from_records(rows)
    for col in ("invocation_id", "session_id"):
        frame[col] = _spread(frame, col)
    return frame


@pytest.mark.parametrize("scenario", ["2", "1"], ids=["semconv", "legacy"], indirect=True)
def test_spans_match_what_adk_emitted(scenario: Scenario, tmp_path: Path) -> None:
    world = scenario.world
    lines = world.spans_file.read_text(encoding="utf-8").splitlines()
    exported = sum(
        len(scope["spans"])
        for line in lines
        for resource in json.loads(line)["resourceSpans"]
        for scope in resource["scopeSpans"]
    )
    assert exported == len(world.spans) > 0
    evidence = _open(scenario, tmp_path)
    spans = evidence.spans
    _no_rejects(evidence)
    assert len(spans) == len(world.spans)

    want = _sorted(_expected_spans(world), ["trace_id", "span_id"])
    got = _sorted(spans, ["trace_id", "span_id"])
    columns = [c for c in want.columns]
    pd.testing.assert_frame_equal(
        got[columns], _frame_like(want[columns].to_dict("records"), got[columns])
    )
    expected_duration = (want["end"] - want["start"]).dt.total_seconds() * 1000.0
    pd.testing.assert_series_equal(
        got["duration_ms"], expected_duration, check_names=False, rtol=0, atol=1e-9
    )

    # Attributes as exported, payloads redacted.
    for span, attrs in zip(world.spans, _by_span(world, spans), strict=True):
        for key, value in (span.attributes or {}).items():
            expected = REDACTED if key in PAYLOAD_KEYS else value
            if isinstance(expected, tuple):
                expected = list(expected)
            assert attrs.get(key) == expected, f"{span.name}: attribute {key}"

    # Every tool execution joins to the function call ADK stored, by id.
    events = evidence.events
    calls = set(evidence.calls["call_id"])
    tools = got[got["kind"].eq("execute_tool")]
    merged = tools["name"].eq("execute_tool (merged)")
    assert set(tools.loc[~merged, "tool_call_id"]) == calls
    # ADK's parallel-call span carries the merged response event's id as its call id.
    assert set(tools.loc[merged, "tool_call_id"]) <= set(events["event_id"])
    # Each trace is one invocation of one session, named by ADK's own ids.
    assert got["invocation_id"].notna().all(), "some spans got no invocation id"
    assert set(got["invocation_id"]) == set(events["invocation_id"])
    assert got["session_id"].notna().all(), "some spans got no session id"
    assert set(got["session_id"]) == set(events["session_id"])
    assert got.groupby("trace_id")["invocation_id"].agg(lambda ids: len(set(ids)) == 1).all()
    # The limit run's error reached the spans.
    failed = got[got["status"].eq("ERROR")]
    assert not failed.empty
    assert set(failed["status_message"]) == {f"LlmCallsLimitExceededError: {world.limit_error}"}


def _by_span(world: Any, spans: pd.DataFrame) -> list[dict[str, Any]]:
    attributes = dict(zip(spans["span_id"], spans["attributes"], strict=True))
    return [attributes[f"{span.context.span_id:016x}"] for span in world.spans]
