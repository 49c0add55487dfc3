"""A world of runaway invocations written by the real google-adk, for the runaway flow.

``build_runaway_world`` runs one app, ``ik_runaway``, through ADK's own ``Runner`` with
``RunConfig(max_llm_calls=LIMIT)`` over ``SqliteSessionService`` or ``DatabaseSessionService``
(SQLite or PostgreSQL) and writes what an incident of it leaves behind: the session store,
``spans.otlp.jsonl`` (as ``adk_world`` writes it) and an ``evidence.toml`` whose
``[apps.ik_runaway]`` profile names the loop's exit key but not the limit.

The app: ``support_agent`` (tools ``lookup_order``, ``check_service``) with sub-agents
``billing_agent`` (tool ``get_invoice``), ``refunds_agent`` (tool ``issue_refund``) and the
``LoopAgent`` ``review_loop`` (``max_iterations=None``) over ``draft_agent`` and
``review_agent``, whose tool ``approve_draft`` writes ``review:approved`` and escalates. Every
model is a ``PlannedLlm`` that answers from one shared, ordered plan and fails the build when
ADK calls a model the plan did not expect; each response carries usage metadata whose prompt
count grows with the request's history.

The invocations (:func:`plan`): healthy ones of 1-4 model calls, then three that ADK stops at
the limit: the same ``check_service`` call over and over (the tool answers "Service busy, try
again later"), ``billing_agent`` and ``refunds_agent`` transferring to each other, and the
review loop cycling without ever approving. :class:`RunawayWorld` holds the truth of each.
"""

from __future__ import annotations

import asyncio
import enum
import json
import time
import warnings
from collections import Counter, deque
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent, LoopAgent, RunConfig
from google.adk.agents.invocation_context import LlmCallsLimitExceededError
from google.adk.models import BaseLlm, LlmRequest, LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import Session
from google.adk.tools import ToolContext
from google.genai import types
from opentelemetry.sdk.trace import ReadableSpan
from pydantic import PrivateAttr

from .adk_world import (
    SCHEMA_ENV,
    call_part,
    otlp_json_lines,
    scoped_env,
    session_service,
    span_exporter,
    stored_event_rows,
    text_part,
    user_message,
)

APP = "ik_runaway"
USER = "user-11"
LIMIT = 8
"""``RunConfig.max_llm_calls`` of every invocation (healthy ones need at most 4)."""
ROOT = "support_agent"
BILLING = "billing_agent"
REFUNDS = "refunds_agent"
LOOP = "review_loop"
DRAFT = "draft_agent"
REVIEW = "review_agent"
EXIT_KEY = "review:approved"
"""The state key whose write ends the review loop (with an escalation)."""
BUSY = {"status": "error", "message": "Service busy, try again later"}
BACKENDS = ("sqlite", "db-sqlite", "db-postgresql")
"""``SqliteSessionService``; ``DatabaseSessionService`` on a SQLite file; on PostgreSQL."""
TRANSFER = "transfer_to_agent"


class Kind(enum.StrEnum):
    """What an invocation of the world is."""

    HEALTHY = "healthy"
    REPEAT = "repeat"
    PING_PONG = "ping_pong"
    LOOP = "loop"


# --- tools -----------------------------------------------------------------------------------


def lookup_order(order_id: str) -> dict[str, str]:
    """Look up the shipping status of an order."""
    return {"order_id": order_id, "status": "shipped"}


def check_service(service: str) -> dict[str, str]:
    """Check whether a backend service can take a request."""
    return dict(BUSY)


def get_invoice(invoice_id: str) -> dict[str, Any]:
    """Fetch an invoice."""
    return {"invoice_id": invoice_id, "amount": 42.0, "currency": "EUR"}


def issue_refund(order_id: str) -> dict[str, str]:
    """Refund an order."""
    return {"refunded": order_id}


def approve_draft(tool_context: ToolContext) -> dict[str, bool]:
    """Approve the current draft; this ends the review loop."""
    tool_context.state[EXIT_KEY] = True
    tool_context.actions.escalate = True
    return {"approved": True}


# --- the plan and the model that follows it ---------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One model call: the agent ADK must call, and the parts its model answers with."""

    agent: str
    parts: tuple[types.Part, ...]


@dataclass(frozen=True)
class Turn:
    """One planned invocation: the user's message, the model calls ADK should make in order,
    and, when ADK must stop it at the limit, the agent whose next call it refuses."""

    session: int
    kind: Kind
    text: str
    steps: tuple[Step, ...]
    refused: str | None = None
    repeated: tuple[str, dict[str, Any]] | None = None
    ping_pong: tuple[str, str] | None = None
    loop_iterations: int = 0
    """Loop iterations begun (``draft_agent`` ran); the last one of a runaway is cut short."""
    loop_completed: int = 0
    """Loop iterations in which ``review_agent`` answered."""


@dataclass(frozen=True)
class Served:
    """A model call ADK made: the agent and the usage its response carried."""

    agent: str
    prompt_tokens: int
    candidates_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.candidates_tokens


@dataclass
class Conductor:
    """The plan of the running invocation, shared by every agent's model."""

    pending: deque[Step] = field(default_factory=deque)
    served: list[Served] = field(default_factory=list)

    def answer(self, agent: str, request: LlmRequest) -> LlmResponse:
        if not self.pending:
            raise AssertionError(f"ADK called {agent}'s model but the plan has no call left")
        step = self.pending.popleft()
        if step.agent != agent:
            raise AssertionError(f"the plan expected {step.agent}'s model, ADK called {agent}'s")
        # Prompt tokens grow with the history ADK sends; a call costs more than a word.
        prompt = 220 + 40 * len(request.contents)
        candidates = sum(
            16 if part.function_call else 6 + 2 * len((part.text or "").split())
            for part in step.parts
        )
        self.served.append(Served(agent, prompt, candidates))
        return LlmResponse(
            content=types.Content(role="model", parts=[p.model_copy() for p in step.parts]),
            finish_reason=types.FinishReason.STOP,
            usage_metadata=types.GenerateContentResponseUsageMetadata(
                prompt_token_count=prompt,
                candidates_token_count=candidates,
                total_token_count=prompt + candidates,
            ),
        )


class PlannedLlm(BaseLlm):
    """A stand-in model for one agent: each call takes the next step of the shared plan."""

    agent: str
    _conductor: Conductor | None = PrivateAttr(default=None)

    @classmethod
    def of(cls, agent: str, conductor: Conductor) -> PlannedLlm:
        llm = cls(model=f"scripted-{agent}", agent=agent)
        llm._conductor = conductor
        return llm

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        assert self._conductor is not None
        yield self._conductor.answer(self.agent, llm_request)


def _say(agent: str, text: str) -> Step:
    return Step(agent, (text_part(text),))


def _use(agent: str, name: str, **args: Any) -> Step:
    return Step(agent, (call_part(name, **args),))


def _to(agent: str, target: str) -> Step:
    return _use(agent, TRANSFER, agent_name=target)


def plan() -> tuple[Turn, ...]:
    """The invocations, in the order they run; ``session`` numbers the session they run in."""

    def healthy(session: int, text: str, *steps: Step, loops: int = 0) -> Turn:
        return Turn(session, Kind.HEALTHY, text, steps, loop_iterations=loops, loop_completed=loops)

    both = Step(
        ROOT, (call_part("lookup_order", order_id="A-4"), call_part("lookup_order", order_id="A-5"))
    )
    repeat_args = {"service": "payments"}
    # support_agent hands over once; then the pair alternates until the limit.
    pair = [BILLING, REFUNDS]
    ping_pong = [_to(ROOT, BILLING)] + [
        _to(pair[i % 2], pair[(i + 1) % 2]) for i in range(LIMIT - 1)
    ]
    cycle = [_to(ROOT, LOOP)]
    while len(cycle) < LIMIT:
        n = len(cycle) // 2 + 1
        cycle.append(_say(DRAFT, f"Draft {n} of the apology letter."))
        if len(cycle) < LIMIT:
            cycle.append(_say(REVIEW, f"Draft {n} needs changes: name the order."))
    drafts = sum(step.agent == DRAFT for step in cycle)
    reviews = sum(step.agent == REVIEW for step in cycle)
    return (
        healthy(1, "Hi there.", _say(ROOT, "Hello! How can I help?")),
        healthy(
            1,
            "Where is order A-1?",
            _use(ROOT, "lookup_order", order_id="A-1"),
            _say(ROOT, "A-1 has shipped."),
        ),
        healthy(
            1,
            "Have A-2 and A-3 shipped?",
            _use(ROOT, "lookup_order", order_id="A-2"),
            _use(ROOT, "lookup_order", order_id="A-3"),
            _say(ROOT, "Both have shipped."),
        ),
        healthy(2, "Where are A-4 and A-5?", both, _say(ROOT, "A-4 and A-5 have shipped.")),
        healthy(2, "Thanks!", _say(ROOT, "You're welcome.")),
        healthy(
            2,
            "What do I owe on invoice INV-9?",
            _to(ROOT, BILLING),
            _use(BILLING, "get_invoice", invoice_id="INV-9"),
            _say(BILLING, "INV-9 is 42.00 EUR."),
        ),
        healthy(3, "Hello.", _say(ROOT, "Hi! What can I do for you?")),
        healthy(
            3,
            "Write a note about the late delivery.",
            _to(ROOT, LOOP),
            _say(DRAFT, "Draft 1: we are sorry your order was late."),
            _use(REVIEW, "approve_draft"),
            _say(REVIEW, "Approved."),
            loops=1,
        ),
        healthy(
            4,
            "Is A-6 on its way?",
            _use(ROOT, "lookup_order", order_id="A-6"),
            _say(ROOT, "A-6 has shipped."),
        ),
        healthy(
            4,
            "Please refund A-7.",
            _to(ROOT, REFUNDS),
            _use(REFUNDS, "issue_refund", order_id="A-7"),
            _say(REFUNDS, "A-7 is refunded."),
        ),
        healthy(5, "Invoice question.", _to(ROOT, BILLING), _say(BILLING, "Which invoice?")),
        # ADK routes the next message to the agent that answered last (its legacy picker).
        healthy(
            5,
            "INV-12, please.",
            _use(BILLING, "get_invoice", invoice_id="INV-12"),
            _say(BILLING, "INV-12 is 42.00 EUR."),
        ),
        healthy(
            6,
            "Where is A-8?",
            _use(ROOT, "lookup_order", order_id="A-8"),
            _say(ROOT, "A-8 has shipped."),
        ),
        healthy(
            6,
            "Where is A-9? Refund it if it has not left.",
            _use(ROOT, "lookup_order", order_id="A-9"),
            _to(ROOT, REFUNDS),
            _say(REFUNDS, "A-9 has shipped, so no refund is due."),
        ),
        Turn(
            7,
            Kind.REPEAT,
            "Pay invoice INV-3 now.",
            tuple(_use(ROOT, "check_service", **repeat_args) for _ in range(LIMIT)),
            refused=ROOT,
            repeated=("check_service", repeat_args),
        ),
        Turn(
            8,
            Kind.PING_PONG,
            "I was charged twice for A-10.",
            tuple(ping_pong),
            refused=pair[(LIMIT - 1) % 2],
            ping_pong=(BILLING, REFUNDS),
        ),
        Turn(
            9,
            Kind.LOOP,
            "Write an apology letter for A-11.",
            tuple(cycle),
            refused=REVIEW if drafts > reviews else DRAFT,
            loop_iterations=drafts,
            loop_completed=reviews,
        ),
    )


def _agents(conductor: Conductor) -> LlmAgent:
    def llm(agent: str) -> PlannedLlm:
        return PlannedLlm.of(agent, conductor)

    billing = LlmAgent(
        name=BILLING,
        model=llm(BILLING),
        description="Answers invoice and payment questions.",
        instruction="Answer billing questions; hand refunds to the refunds agent.",
        tools=[get_invoice],
    )
    refunds = LlmAgent(
        name=REFUNDS,
        model=llm(REFUNDS),
        description="Handles refunds and double charges.",
        instruction="Refund orders; hand invoice questions to the billing agent.",
        tools=[issue_refund],
    )
    draft = LlmAgent(
        name=DRAFT,
        model=llm(DRAFT),
        instruction="Draft the letter.",
        output_key="review:draft",
    )
    review = LlmAgent(
        name=REVIEW,
        model=llm(REVIEW),
        instruction="Review the draft; call approve_draft when it is good.",
        tools=[approve_draft],
    )
    loop = LoopAgent(
        name=LOOP,
        description="Drafts and reviews letters until the reviewer approves.",
        sub_agents=[draft, review],
        max_iterations=None,
    )
    return LlmAgent(
        name=ROOT,
        model=llm(ROOT),
        description="Answers customer questions.",
        instruction="Answer questions about orders; hand over billing, refunds and letters.",
        tools=[lookup_order, check_service],
        sub_agents=[billing, refunds, loop],
    )


# --- the truth -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Invocation:
    """What one invocation was and what ADK did in it."""

    kind: Kind
    session_id: str
    invocation_id: str
    text: str
    model_calls: int
    """Calls ADK made to the models (the refused call never reaches a model)."""
    calls_by_agent: Mapping[str, int]
    limit: int
    limit_hit: bool
    error_message: str | None
    """The ``LlmCallsLimitExceededError`` ADK raised to the caller."""
    refused_agent: str | None
    """The agent whose model call ADK refused at the limit."""
    tool_calls: int
    """Function calls the models made, transfers included."""
    transfers: tuple[str, ...]
    """``transfer_to_agent`` targets, in order."""
    repeated_tool: str | None
    repeated_args: Mapping[str, Any] | None
    repeats: int
    ping_pong_agents: tuple[str, str] | None
    loop_agent: str | None
    loop_iterations: int
    loop_completed: int
    exit_key_written: bool
    prompt_tokens: int
    candidates_tokens: int
    total_tokens: int


@dataclass(frozen=True)
class RunawayWorld:
    """What ADK wrote for ``ik_runaway``, where it is, and the truth of each invocation."""

    folder: Path
    backend: str
    store: str
    """Where ADK wrote: a file path (``SqliteSessionService``) or an async SQLAlchemy URL."""
    read_url: str
    """A sync SQLAlchemy URL of the store (for ``adk_world.stored_event_rows``)."""
    manifest: Path
    environ: Mapping[str, str]
    """What the manifest's ``env:`` names need (PostgreSQL only)."""
    spans_file: Path
    telemetry_schema: str
    limit: int
    invocations: tuple[Invocation, ...]
    sessions: tuple[Session, ...]
    """Every session as ``get_session`` returns it after all runs (ADK's own reading)."""
    spans: tuple[ReadableSpan, ...]
    build_seconds: float

    @property
    def events(self) -> list[Any]:
        return [event for session in self.sessions for event in session.events]

    def stored_rows(self) -> list[dict[str, Any]]:
        """ADK's ``events`` table as stored (read with SQLAlchemy), ``event_data`` decoded."""
        return stored_event_rows(self.read_url)

    def of_kind(self, kind: Kind) -> list[Invocation]:
        return [inv for inv in self.invocations if inv.kind is kind]

    def one(self, kind: Kind) -> Invocation:
        (only,) = self.of_kind(kind)
        return only


def _truth(
    turn: Turn,
    session_id: str,
    invocation_id: str,
    served: Sequence[Served],
    error: LlmCallsLimitExceededError | None,
    session: Session,
) -> Invocation:
    calls = [part.function_call for step in turn.steps for part in step.parts if part.function_call]
    transfers = tuple(str((c.args or {})["agent_name"]) for c in calls if c.name == TRANSFER)
    written = any(
        EXIT_KEY in event.actions.state_delta
        for event in session.events
        if event.invocation_id == invocation_id
    )
    return Invocation(
        kind=turn.kind,
        session_id=session_id,
        invocation_id=invocation_id,
        text=turn.text,
        model_calls=len(served),
        calls_by_agent=dict(Counter(s.agent for s in served)),
        limit=LIMIT,
        limit_hit=error is not None,
        error_message=None if error is None else str(error),
        refused_agent=turn.refused,
        tool_calls=len(calls),
        transfers=transfers,
        repeated_tool=turn.repeated[0] if turn.repeated else None,
        repeated_args=turn.repeated[1] if turn.repeated else None,
        repeats=len(turn.steps) if turn.repeated else 0,
        ping_pong_agents=turn.ping_pong,
        loop_agent=LOOP if turn.loop_iterations else None,
        loop_iterations=turn.loop_iterations,
        loop_completed=turn.loop_completed,
        exit_key_written=written,
        prompt_tokens=sum(s.prompt_tokens for s in served),
        candidates_tokens=sum(s.candidates_tokens for s in served),
        total_tokens=sum(s.total_tokens for s in served),
    )


async def _invoke(
    runner: Runner, session_id: str, turn: Turn
) -> tuple[str, LlmCallsLimitExceededError | None]:
    """Run one turn; its invocation id (from the events ADK yields) and the limit error."""
    ids: set[str] = set()
    error: LlmCallsLimitExceededError | None = None
    agen = runner.run_async(
        user_id=USER,
        session_id=session_id,
        new_message=user_message(turn.text),
        run_config=RunConfig(max_llm_calls=LIMIT),
    )
    try:
        async for event in agen:
            ids.add(event.invocation_id)
    except LlmCallsLimitExceededError as err:
        error = err
    finally:
        await agen.aclose()
    if len(ids) != 1:
        raise AssertionError(f"{turn.text!r}: ADK yielded events of invocations {sorted(ids)}")
    return ids.pop(), error


async def _run(store: str) -> tuple[tuple[Invocation, ...], tuple[Session, ...]]:
    conductor = Conductor()
    service = session_service(store)
    runner = Runner(app_name=APP, agent=_agents(conductor), session_service=service)
    try:
        turns = plan()
        session_ids: dict[int, str] = {}
        runs: list[tuple[Turn, str, str, list[Served], LlmCallsLimitExceededError | None]] = []
        for turn in turns:
            if turn.session not in session_ids:
                created = await service.create_session(app_name=APP, user_id=USER)
                session_ids[turn.session] = created.id
            conductor.pending.extend(turn.steps)
            before = len(conductor.served)
            invocation_id, error = await _invoke(runner, session_ids[turn.session], turn)
            if conductor.pending:
                raise AssertionError(
                    f"{turn.text!r}: the scenario did not run as scripted; ADK left "
                    f"{len(conductor.pending)} planned model calls unmade"
                )
            if (error is None) != (turn.refused is None):
                raise AssertionError(
                    f"{turn.text!r}: planned a limit hit: {turn.refused is not None}; "
                    f"ADK raised {error!r}"
                )
            runs.append(
                (turn, session_ids[turn.session], invocation_id, conductor.served[before:], error)
            )
        sessions = {}
        for number, session_id in session_ids.items():
            session = await service.get_session(app_name=APP, user_id=USER, session_id=session_id)
            assert session is not None
            sessions[number] = session
        truth = tuple(
            _truth(turn, sid, iid, served, error, sessions[turn.session])
            for turn, sid, iid, served, error in runs
        )
        return truth, tuple(sessions.values())
    finally:
        await runner.close()
        await service.close()


def _toml(value: str) -> str:
    return json.dumps(value)  # a TOML basic string


def build_runaway_world(
    folder: Path, *, backend: str, url: str | None = None, telemetry_schema: str = "2"
) -> RunawayWorld:
    """Run :func:`plan` through ADK into a fresh store of ``backend`` and write the evidence
    (store, ``spans.otlp.jsonl``, ``evidence.toml``) to ``folder``.

    ``backend`` is one of :data:`BACKENDS`; ``db-postgresql`` needs ``url``, an empty database
    (``postgresql+psycopg://...``), which the manifest names as ``env:IK_ADK_DB``.
    ``telemetry_schema`` is ADK's ``ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN`` (``"2"`` or ``"1"``).
    """
    folder.mkdir(parents=True, exist_ok=True)
    environ: dict[str, str] = {}
    if backend == "sqlite":  # SqliteSessionService, the store of adk web / adk api_server
        db = folder / "session.db"
        store, read_url, events = str(db), f"sqlite:///{db}", f"path = {_toml(db.name)}"
    elif backend == "db-sqlite":
        db = folder / "adk.db"
        store, read_url = f"sqlite+aiosqlite:///{db}", f"sqlite:///{db}"
        events = f"path = {_toml(db.name)}"
    elif backend == "db-postgresql":
        if not url:
            raise ValueError("backend db-postgresql needs url, an empty PostgreSQL database")
        store, read_url, events = url, url, 'url = "env:IK_ADK_DB"'
        environ["IK_ADK_DB"] = url
    else:
        raise ValueError(f"unknown backend {backend!r}; choose one of {BACKENDS}")
    exporter = span_exporter()
    exporter.clear()
    started = time.perf_counter()
    with scoped_env(SCHEMA_ENV, telemetry_schema), warnings.catch_warnings():
        # ADK 2.13 deprecates LoopAgent for Workflow and warns each time it copies one.
        warnings.filterwarnings(
            "ignore", message="LoopAgent is deprecated", category=DeprecationWarning
        )
        invocations, sessions = asyncio.run(_run(store))
    seconds = time.perf_counter() - started
    spans = tuple(exporter.get_finished_spans())
    exporter.clear()
    spans_file = folder / "spans.otlp.jsonl"
    spans_file.write_text("".join(line + "\n" for line in otlp_json_lines(spans)), encoding="utf-8")
    manifest = folder / "evidence.toml"
    manifest.write_text(
        f'title = "ADK runaway world ({backend}, telemetry schema {telemetry_schema})"\n\n'
        f"[events]\n{events}\n\n"
        f"[spans]\npath = {_toml(spans_file.name)}\n\n"
        f"[apps.{APP}]\nloop_exit_keys = [{_toml(EXIT_KEY)}]\n",
        encoding="utf-8",
    )
    return RunawayWorld(
        folder=folder,
        backend=backend,
        store=store,
        read_url=read_url,
        manifest=manifest,
        environ=environ,
        spans_file=spans_file,
        telemetry_schema=telemetry_schema,
        limit=LIMIT,
        invocations=invocations,
        sessions=sessions,
        spans=spans,
        build_seconds=seconds,
    )
