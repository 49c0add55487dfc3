"""A small world written by the real google-adk, for the conformance tests.

``build_world`` runs a scripted two-agent app through ADK's own ``Runner`` over
``DatabaseSessionService`` (SQLite or PostgreSQL) or ``SqliteSessionService``, captures the
spans ADK emits with the OpenTelemetry SDK's in-memory exporter, and writes the same evidence
the way it reaches an incident in production:

- the session store itself (``DatabaseSessionService`` schema v1, or ``SqliteSessionService``);
- ``<session id>.session.json`` files, exactly what ``adk run --save_session`` writes
  (``google/adk/cli/cli.py`` ``run_cli``);
- ``spans.otlp.jsonl``, OTLP/JSON lines as the OpenTelemetry collector's ``file`` exporter
  writes them (hex ids, 64-bit integers as decimal strings, enums as integers).

Nothing here touches the network: the model is a ``BaseLlm`` subclass that replays a script.
This module imports google-adk, opentelemetry-sdk and aiosqlite (the project's ``adk`` extra).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections.abc import AsyncGenerator, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from google.adk.agents import LlmAgent, RunConfig
from google.adk.agents.invocation_context import LlmCallsLimitExceededError
from google.adk.events._internal_metadata import public_session
from google.adk.models import BaseLlm, LlmRequest, LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, DatabaseSessionService, Session
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.adk.sessions.vertex_ai_session_service import VertexAiSessionService
from google.adk.tools import ToolContext
from google.genai import types
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from pydantic import Field, PrivateAttr

APP = "ik_conformance"
USER = "user-7"
ROOT_AGENT = "triage_agent"
SUB_AGENT = "billing_agent"
SERVICE = "ik-adk-conformance"
LIMIT = 1
"""``RunConfig.max_llm_calls`` of the run that hits the limit."""
SCHEMA_ENV = "ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN"
ENTERPRISE_ENV = "GOOGLE_GENAI_USE_ENTERPRISE"
"""ADK 2.x telemetry schema switch: ``2`` (default, semconv-aligned) or ``1`` (legacy)."""

# --- the scripted model ----------------------------------------------------------------------


class ScriptedLlm(BaseLlm):
    """A stand-in model that answers each call with the next pre-scripted response."""

    script: list[LlmResponse] = Field(default_factory=list)
    _served: int = PrivateAttr(default=0)

    @property
    def unused(self) -> int:
        return len(self.script) - self._served

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        if self._served >= len(self.script):
            raise AssertionError(f"{self.model}: the script has no response left")
        response = self.script[self._served]
        self._served += 1
        yield response.model_copy(deep=True)


_USAGE = types.GenerateContentResponseUsageMetadata(
    prompt_token_count=10, candidates_token_count=5, total_token_count=15
)


def _model(*parts: types.Part) -> LlmResponse:
    return LlmResponse(
        content=types.Content(role="model", parts=list(parts)),
        finish_reason=types.FinishReason.STOP,
        usage_metadata=_USAGE,
    )


def call_part(name: str, **args: Any) -> types.Part:
    """A model's function call; no id, so ADK assigns ``adk-<uuid>`` as it does for Gemini."""
    return types.Part(function_call=types.FunctionCall(name=name, args=args))


def text_part(text: str) -> types.Part:
    """A model's text answer."""
    return types.Part(text=text)


def user_message(text: str) -> types.Content:
    """The user's message that starts an invocation."""
    return types.Content(role="user", parts=[types.Part(text=text)])


# --- tools -----------------------------------------------------------------------------------


def lookup_order(order_id: str) -> dict[str, str]:
    """Look up the shipping status of an order."""
    return {"order_id": order_id, "status": "shipped"}


def record_status(order_id: str, status: str, tool_context: ToolContext) -> dict[str, str]:
    """Remember an order's status in the session state."""
    tool_context.state["temp:scratch"] = order_id  # ADK strips temp: keys before storing
    tool_context.state["user:tier"] = "gold"
    tool_context.state["app:region"] = "eu-west"
    tool_context.state["order_status"] = status
    tool_context.state["last_order"] = {"id": order_id, "items": 2, "express": True}
    return {"recorded": order_id}


def _agents() -> tuple[LlmAgent, list[ScriptedLlm]]:
    billing_model = ScriptedLlm(
        model="scripted-billing", script=[_model(text_part("Refund issued for A-42."))]
    )
    triage_model = ScriptedLlm(
        model="scripted-triage",
        script=[
            # session 1, invocation 1: two parallel calls, a state-writing call, an answer
            _model(
                call_part("lookup_order", order_id="A-42"),
                call_part("lookup_order", order_id="C-9"),
            ),
            _model(call_part("record_status", order_id="A-42", status="shipped")),
            _model(text_part("Both orders have shipped.")),
            # session 1, invocation 2: transfer to the billing agent (which answers)
            _model(call_part("transfer_to_agent", agent_name=SUB_AGENT)),
            # session 2: one call, then the next model call exceeds max_llm_calls
            _model(call_part("lookup_order", order_id="B-7")),
        ],
    )
    billing = LlmAgent(
        name=SUB_AGENT,
        model=billing_model,
        description="Handles refunds.",
        instruction="Issue refunds.",
    )
    root = LlmAgent(
        name=ROOT_AGENT,
        model=triage_model,
        description="Answers order questions.",
        instruction="Answer questions about orders.",
        tools=[lookup_order, record_status],
        sub_agents=[billing],
    )
    return root, [triage_model, billing_model]


# --- spans -----------------------------------------------------------------------------------

_EXPORTER: InMemorySpanExporter | None = None


def span_exporter() -> InMemorySpanExporter:
    """The in-memory exporter behind the process-wide tracer provider (installed once).

    ADK takes its tracer from the global provider (``google/adk/telemetry/tracing.py``:
    ``trace.get_tracer("gcp.vertex.agent", ...)``, a proxy until a provider is set), so the
    provider must be global; OpenTelemetry allows setting it once per process.
    """
    global _EXPORTER
    if _EXPORTER is None:
        provider = trace.get_tracer_provider()
        if not isinstance(provider, TracerProvider):
            provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
            trace.set_tracer_provider(provider)
        _EXPORTER = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    return _EXPORTER


def _any_value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, bytes):
        return {"bytesValue": base64.b64encode(value).decode("ascii")}
    if isinstance(value, Mapping):
        return {"kvlistValue": _key_values(value)} if value else {"kvlistValue": {}}
    if isinstance(value, Sequence):
        return (
            {"arrayValue": {"values": [_any_value(v) for v in value]}}
            if value
            else {"arrayValue": {}}
        )
    raise TypeError(f"no OTLP AnyValue for {value!r}")


def _key_values(attributes: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    return [{"key": key, "value": _any_value(value)} for key, value in (attributes or {}).items()]


def _otlp_span(span: ReadableSpan) -> dict[str, Any]:
    context = span.get_span_context()
    assert context is not None
    out: dict[str, Any] = {
        "traceId": f"{context.trace_id:032x}",
        "spanId": f"{context.span_id:016x}",
    }
    if context.trace_state:
        out["traceState"] = context.trace_state.to_header()
    if span.parent is not None:
        out["parentSpanId"] = f"{span.parent.span_id:016x}"
    # What the SDK's OTLP exporter sends: "has is_remote" plus "is remote" when it is.
    out["flags"] = 0x100 | (0x200 if span.parent is not None and span.parent.is_remote else 0)
    out["name"] = span.name
    kind = {
        SpanKind.INTERNAL: 1,
        SpanKind.SERVER: 2,
        SpanKind.CLIENT: 3,
        SpanKind.PRODUCER: 4,
        SpanKind.CONSUMER: 5,
    }[span.kind]
    out["kind"] = kind
    out["startTimeUnixNano"] = str(span.start_time)
    out["endTimeUnixNano"] = str(span.end_time)
    if span.attributes:
        out["attributes"] = _key_values(span.attributes)
    if span.events:
        out["events"] = [
            {"timeUnixNano": str(event.timestamp), "name": event.name}
            | ({"attributes": _key_values(event.attributes)} if event.attributes else {})
            for event in span.events
        ]
    if span.links:
        out["links"] = [
            {
                "traceId": f"{link.context.trace_id:032x}",
                "spanId": f"{link.context.span_id:016x}",
            }
            | ({"attributes": _key_values(link.attributes)} if link.attributes else {})
            for link in span.links
        ]
    status: dict[str, Any] = {}
    if span.status.status_code is StatusCode.OK:
        status = {"code": 1}
    elif span.status.status_code is StatusCode.ERROR:
        status = ({"message": span.status.description} if span.status.description else {}) | {
            "code": 2
        }
    out["status"] = status
    return out


def otlp_json_lines(spans: Sequence[ReadableSpan]) -> list[str]:
    """Spans as the collector's file exporter writes them: one ``TracesData`` per line.

    One line per trace (the collector writes one line per batch it received), spans grouped
    by resource, then by instrumentation scope; lowercase hex ids, 64-bit integers as decimal
    strings, enums as integers, empty fields left out.
    """
    by_trace: dict[int, list[ReadableSpan]] = {}
    for span in spans:
        context = span.get_span_context()
        assert context is not None
        by_trace.setdefault(context.trace_id, []).append(span)
    lines = []
    for batch in by_trace.values():
        resources: dict[int, tuple[Resource, dict[tuple[str, str, str], list[ReadableSpan]]]] = {}
        for span in batch:
            _, scopes = resources.setdefault(id(span.resource), (span.resource, {}))
            scope = span.instrumentation_scope
            key = (
                scope.name if scope else "",
                (scope.version or "") if scope else "",
                (scope.schema_url or "") if scope else "",
            )
            scopes.setdefault(key, []).append(span)
        resource_spans = []
        for resource, scopes in resources.values():
            scope_spans = []
            for (name, version, schema_url), members in scopes.items():
                entry: dict[str, Any] = {
                    "scope": {"name": name} | ({"version": version} if version else {}),
                    "spans": [_otlp_span(span) for span in members],
                }
                if schema_url:
                    entry["schemaUrl"] = schema_url
                scope_spans.append(entry)
            block: dict[str, Any] = {
                "resource": {"attributes": _key_values(resource.attributes)},
                "scopeSpans": scope_spans,
            }
            if resource.schema_url:
                block["schemaUrl"] = resource.schema_url
            resource_spans.append(block)
        lines.append(json.dumps({"resourceSpans": resource_spans}, separators=(",", ":")))
    return lines


# --- the world -------------------------------------------------------------------------------


@dataclass(frozen=True)
class World:
    """What ADK wrote, and ADK's own reading of it."""

    folder: Path
    store: str
    sessions: tuple[Session, ...]
    """Every session as the session service's ``get_session`` returns it after all runs."""
    spans: tuple[ReadableSpan, ...]
    limit_error: LlmCallsLimitExceededError
    session_files: tuple[Path, ...]
    spans_file: Path
    telemetry_schema: str

    @property
    def events(self) -> list[Any]:
        return [event for session in self.sessions for event in session.events]


@contextmanager
def scoped_env(name: str, value: str) -> Iterator[None]:
    """Set the environment variable ``name`` to ``value`` for the ``with`` block."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


async def _drain(runner: Runner, session_id: str, text: str, **kwargs: Any) -> None:
    agen = runner.run_async(
        user_id=USER, session_id=session_id, new_message=user_message(text), **kwargs
    )
    try:
        async for _ in agen:
            pass
    finally:
        await agen.aclose()


VERTEX = "vertex+"
"""``vertex+http://host:port``: ``VertexAiSessionService`` against a local Agent Engine."""
ENGINE_ID = "4242424242"


class LocalVertexAiSessionService(VertexAiSessionService):
    """ADK's own ``VertexAiSessionService``, its SDK client pointed at a local server (the
    hook ADK gives subclasses for a custom endpoint)."""

    def __init__(self, base_url: str) -> None:
        super().__init__(agent_engine_id=ENGINE_ID, express_mode_api_key="local-test-key")
        self._base_url = base_url

    def _api_client_http_options_override(self) -> Any:
        return {"base_url": self._base_url}


def session_service(store: str) -> BaseSessionService:
    """``DatabaseSessionService`` for a SQLAlchemy async URL; ``SqliteSessionService`` (the
    ``adk web`` / ``adk api_server`` default) for a plain ``.db`` file path;
    ``VertexAiSessionService`` for ``vertex+<base url>``."""
    if store.startswith(VERTEX):
        return LocalVertexAiSessionService(store.removeprefix(VERTEX))
    if "://" in store:
        return DatabaseSessionService(db_url=store)
    return SqliteSessionService(db_path=store)


async def _run(store: str) -> tuple[tuple[Session, ...], LlmCallsLimitExceededError]:
    root, models = _agents()
    service = session_service(store)
    runner = Runner(app_name=APP, agent=root, session_service=service)
    try:
        first = await service.create_session(app_name=APP, user_id=USER, state={"channel": "chat"})
        await _drain(
            runner,
            first.id,
            "Where are orders A-42 and C-9?",
            state_delta={"ticket": "T-1", "temp:request": "r-1"},
        )
        await _drain(runner, first.id, "Refund A-42, please.")
        second = await service.create_session(app_name=APP, user_id=USER)
        limit_error: LlmCallsLimitExceededError | None = None
        try:
            await _drain(
                runner, second.id, "Where is B-7?", run_config=RunConfig(max_llm_calls=LIMIT)
            )
        except LlmCallsLimitExceededError as err:
            limit_error = err
        if limit_error is None:
            raise AssertionError("the max_llm_calls run did not raise LlmCallsLimitExceededError")
        unused = {model.model: model.unused for model in models if model.unused}
        if unused:
            raise AssertionError(f"the scenario did not run as scripted; unused responses {unused}")
        sessions = []
        for session_id in (first.id, second.id):
            session = await service.get_session(app_name=APP, user_id=USER, session_id=session_id)
            assert session is not None
            sessions.append(session)
        return tuple(sessions), limit_error
    finally:
        await runner.close()
        close = getattr(service, "close", None)  # VertexAiSessionService holds no connection
        if close is not None:
            await close()


def save_session_json(session: Session, folder: Path) -> Path:
    """Write ``session`` as ``adk run --save_session`` does (``cli.py`` ``run_cli``)."""
    path = folder / f"{session.id}.session.json"
    path.write_text(
        public_session(session).model_dump_json(indent=2, exclude_none=True, by_alias=True),
        encoding="utf-8",
    )
    return path


def build_world(store: str, folder: Path, *, telemetry_schema: str = "2") -> World:
    """Run the scripted app through ADK into ``store``; write session JSON and spans to
    ``folder``.

    ``store`` is an async SQLAlchemy URL for ``DatabaseSessionService``
    (``sqlite+aiosqlite:///...``, ``postgresql+psycopg://...``) or a file path for
    ``SqliteSessionService``. ``telemetry_schema`` is ADK's
    ``ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN`` (``"2"`` default names, ``"1"`` legacy names).
    """
    exporter = span_exporter()
    exporter.clear()
    # Express mode (an API key, no project) makes the SDK call the local server's routes.
    vertex = scoped_env(ENTERPRISE_ENV, "true") if store.startswith(VERTEX) else nullcontext()
    with scoped_env(SCHEMA_ENV, telemetry_schema), vertex:
        sessions, limit_error = asyncio.run(_run(store))
    spans = tuple(exporter.get_finished_spans())
    exporter.clear()
    folder.mkdir(parents=True, exist_ok=True)
    session_dir = folder / "saved_sessions"
    session_dir.mkdir(exist_ok=True)
    files = tuple(save_session_json(session, session_dir) for session in sessions)
    spans_file = folder / "spans.otlp.jsonl"
    spans_file.write_text("".join(line + "\n" for line in otlp_json_lines(spans)), encoding="utf-8")
    return World(
        folder=folder,
        store=store,
        sessions=sessions,
        spans=spans,
        limit_error=limit_error,
        session_files=files,
        spans_file=spans_file,
        telemetry_schema=telemetry_schema,
    )


def stored_event_rows(url: str) -> list[dict[str, Any]]:
    """ADK's ``events`` table read directly (sync URL), ``event_data`` decoded."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT id, app_name, user_id, session_id, invocation_id, timestamp, "
                    "event_data FROM events"
                )
            ).mappings()
            out = [dict(row) for row in rows]
    finally:
        engine.dispose()
    for row in out:
        if isinstance(row["event_data"], str):  # TEXT on SQLite, jsonb (decoded) on PostgreSQL
            row["event_data"] = json.loads(row["event_data"])
    return out
