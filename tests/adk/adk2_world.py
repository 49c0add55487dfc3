"""ADK 2.x incidents written by the real google-adk, for issue 30's conformance tests.

Each ``build_*`` function runs one small scripted app through ADK's own ``Runner`` over
``DatabaseSessionService`` on SQLite (aiosqlite) into a fresh folder and returns what ADK did,
recorded while it ran (the invocations it yielded, the model calls it made, the tool runs, the
summaries it asked for): the truth the flows must match. Each folder holds

- ``adk.db``, the session store (``DatabaseSessionService`` schema v1);
- ``spans.otlp.jsonl``, the spans ADK emitted (OpenTelemetry SDK, in-memory exporter), as the
  collector's file exporter writes them (``adk_world.otlp_json_lines``);
- ``evidence.toml``: ``[events] format = "adk-python-db"`` and ``[spans]``.

The incidents (one store each):

- :func:`build_compaction`: ``EventsCompactionConfig`` (sliding window) fires four times in a
  session of twelve invocations; the summariser is a scripted model too.
- :func:`build_rewind`: ``Runner.rewind_async`` over an overwrite (two invocations undone),
  and over state set at ``create_session`` (nulled: adk-python #4933); ``app:``/``user:`` keys
  stay as they were.
- :func:`build_resume`: a resumable app whose worker is SIGKILLed in a child process while a
  tool runs, resumed in this process (same invocation id, the call run again with the same
  function-call id, a ``tool_journal`` that shows it), then a long-running approval answered
  by a user ``function_response`` inside its invocation.
- :func:`build_timeout`: a tool raising ``TimeoutError``, retried by the agent node's
  ``RetryConfig`` (no resumability): an unanswered call, an error event, an identical call.
- :func:`build_runaway`: ``RunConfig(max_llm_calls=LIMIT)`` hit by a looping model.
- :func:`build_analytics`: the same app and runs as :func:`build_runaway` with the BigQuery
  Agent Analytics plugin, its rows captured at the Storage Write API client (the Arrow batches
  the plugin would send), saved as ``bq extract`` would (newline-delimited JSON, JSON columns
  as text and as nested objects, and Parquet).
- :func:`build_analytics_markers`: the plugin over a resumable app with compaction and a
  rewind: which ADK 2.x markers reach the table.

Nothing touches the network: the models replay scripts, the plugin's credentials are a
throwaway service-account key read through ``google.auth.default()``, its BigQuery client and
write client are captures. This module needs the project's ``adk`` extra, and the plugin also
``google-adk[bigquery-analytics]`` (google-cloud-bigquery, google-cloud-bigquery-storage).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import signal
import sqlite3
import time
import warnings
from collections.abc import AsyncGenerator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from google.adk.agents import LlmAgent, RunConfig, SequentialAgent
from google.adk.agents.invocation_context import LlmCallsLimitExceededError
from google.adk.apps.app import App, EventsCompactionConfig, ResumabilityConfig
from google.adk.apps.llm_event_summarizer import LlmEventSummarizer
from google.adk.events import Event
from google.adk.models import BaseLlm, LlmRequest, LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions import DatabaseSessionService
from google.adk.tools import ToolContext
from google.adk.tools.long_running_tool import LongRunningFunctionTool
from google.adk.workflow import RetryConfig
from google.genai import types
from opentelemetry.sdk.trace import ReadableSpan
from pydantic import Field, PrivateAttr

from .adk_world import call_part, otlp_json_lines, span_exporter, text_part, user_message

if TYPE_CHECKING:
    import pyarrow as pa

USER = "user-30"
DB = "adk.db"
SPANS = "spans.otlp.jsonl"
MANIFEST = "evidence.toml"

# --- the scripted model ----------------------------------------------------------------------

AGENT_USAGE = (10, 5)
"""Prompt and candidates tokens of every agent model call."""
SUMMARY_USAGE = (400, 30)
"""Prompt and candidates tokens of every summariser call (the compaction's cost)."""


def reply(*parts: types.Part, usage: tuple[int, int] = AGENT_USAGE) -> LlmResponse:
    """A model response of ``parts`` with usage metadata."""
    prompt, candidates = usage
    return LlmResponse(
        content=types.Content(role="model", parts=list(parts)),
        finish_reason=types.FinishReason.STOP,
        usage_metadata=types.GenerateContentResponseUsageMetadata(
            prompt_token_count=prompt,
            candidates_token_count=candidates,
            total_token_count=prompt + candidates,
        ),
    )


class Scripted(BaseLlm):
    """A stand-in model answering each call with the next response of its script."""

    script: list[LlmResponse] = Field(default_factory=list)
    _served: int = PrivateAttr(default=0)

    @property
    def served(self) -> int:
        return self._served

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        if self._served >= len(self.script):
            raise AssertionError(f"{self.model}: ADK made a model call the script did not plan")
        response = self.script[self._served]
        self._served += 1
        yield response.model_copy(deep=True)


# --- the store, spans and manifest every incident writes --------------------------------------


@dataclass(frozen=True)
class Store:
    """One incident's evidence folder."""

    folder: Path
    spans: tuple[ReadableSpan, ...]

    @property
    def db(self) -> Path:
        return self.folder / DB

    @property
    def url(self) -> str:
        """A sync SQLAlchemy URL of the store, to read it directly."""
        return f"sqlite:///{self.db}"

    @property
    def manifest(self) -> Path:
        return self.folder / MANIFEST

    @property
    def spans_file(self) -> Path:
        return self.folder / SPANS

    def events(self) -> list[dict[str, Any]]:
        """The ``events`` table, ``event_data`` decoded, in session and stored-time order."""
        return stored_events(self.url)

    def span_names(self) -> list[str]:
        return [span.name for span in self.spans]


def stored_events(url: str) -> list[dict[str, Any]]:
    """ADK's ``events`` table read directly, ``event_data`` decoded, ordered by session, the
    event's own timestamp and then the stored order."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT rowid AS stored, id, app_name, user_id, session_id, invocation_id, "
                    "timestamp, event_data FROM events"
                )
            ).mappings()
            out = [dict(row) for row in rows]
    finally:
        engine.dispose()
    for row in out:
        row["event_data"] = json.loads(row["event_data"])
    out.sort(key=lambda r: (r["session_id"], r["event_data"]["timestamp"], r["stored"]))
    return out


def stored_states(url: str) -> dict[str, dict[str, Any]]:
    """``sessions.state`` by session id, ``app_states`` under ``"app"``, ``user_states`` under
    ``"user"`` (one app and user per store), decoded as stored."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    out: dict[str, dict[str, Any]] = {}
    try:
        with engine.connect() as conn:
            for sid, state in conn.execute(sa.text("SELECT id, state FROM sessions")):
                out[sid] = json.loads(state)
            for (state,) in conn.execute(sa.text("SELECT state FROM app_states")):
                out["app"] = json.loads(state)
            for (state,) in conn.execute(sa.text("SELECT state FROM user_states")):
                out["user"] = json.loads(state)
    finally:
        engine.dispose()
    return out


@contextmanager
def _quiet() -> Iterator[None]:
    """ADK warns about features it marks experimental (resumability, compaction) and, since
    2.13, deprecates ``SequentialAgent`` for ``Workflow``: both are expected here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"\[EXPERIMENTAL\]", category=UserWarning)
        warnings.filterwarnings(
            "ignore", message="SequentialAgent is deprecated", category=DeprecationWarning
        )
        yield


@contextmanager
def _capturing() -> Iterator[list[ReadableSpan]]:
    """Collect the spans ADK emits in the block (the list is filled on exit)."""
    exporter = span_exporter()
    exporter.clear()
    spans: list[ReadableSpan] = []
    try:
        yield spans
    finally:
        spans.extend(exporter.get_finished_spans())
        exporter.clear()


def _async_url(folder: Path) -> str:
    return f"sqlite+aiosqlite:///{folder / DB}"


def _toml(value: str) -> str:
    return json.dumps(value)  # a TOML basic string


def _finish(folder: Path, title: str, spans: Sequence[ReadableSpan], extra: str = "") -> Store:
    (folder / SPANS).write_text(
        "".join(line + "\n" for line in otlp_json_lines(spans)), encoding="utf-8"
    )
    (folder / MANIFEST).write_text(
        f"title = {_toml(title)}\n\n"
        f'[events]\npath = "{DB}"\nformat = "adk-python-db"\n\n'
        f'[spans]\npath = "{SPANS}"\n' + extra,
        encoding="utf-8",
    )
    return Store(folder=folder, spans=tuple(spans))


def _fresh(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if any(folder.iterdir()):
        raise ValueError(f"{folder} is not empty; each incident writes a fresh folder")
    return folder


async def _turn(
    runner: Runner,
    session_id: str,
    message: types.Content | None,
    *,
    invocation_id: str | None = None,
    **kwargs: Any,
) -> list[Event]:
    """Run one invocation (or resume one) to its end; the events ADK yielded."""
    events: list[Event] = []
    agen = runner.run_async(
        user_id=USER,
        session_id=session_id,
        new_message=message,
        invocation_id=invocation_id,
        **kwargs,
    )
    try:
        async for event in agen:
            events.append(event)
    finally:
        await agen.aclose()
    return events


def _one_invocation(events: Sequence[Event]) -> str:
    ids = {event.invocation_id for event in events}
    if len(ids) != 1:
        raise AssertionError(f"one invocation expected, ADK yielded events of {sorted(ids)}")
    return ids.pop()


def lookup_order(order_id: str) -> dict[str, str]:
    """Look up the shipping status of an order."""
    return {"order_id": order_id, "status": "shipped"}


# --- 1. compaction ---------------------------------------------------------------------------

COMPACTION_APP = "ik_compaction"
COMPACTION_AGENT = "helper_agent"
TURNS = 12
COMPACTION_INTERVAL = 3
OVERLAP_SIZE = 1
TOOL_TURNS = frozenset({0, 4, 8})
"""Invocations (0-based) whose model calls a tool first: two model calls instead of one."""


@dataclass(frozen=True)
class Compaction:
    """One summary ADK asked for, as the summariser returned it."""

    event_id: str
    invocation_id: str
    after: str
    """The user invocation after which it fired."""
    covered: tuple[str, ...]
    """The invocation ids of the events it summarised, in order, each once."""
    covered_events: tuple[str, ...]
    start_timestamp: float
    end_timestamp: float
    summary: str


@dataclass(frozen=True)
class CompactionWorld:
    store: Store
    session_id: str
    invocations: tuple[str, ...]
    """The user invocations, in order (ids from the events ``run_async`` yielded)."""
    model_calls: Mapping[str, int]
    """Agent model calls per invocation (the summariser's are not among them)."""
    yielded: Mapping[str, int]
    """Events ``run_async`` yielded per invocation."""
    compactions: tuple[Compaction, ...]
    summariser_calls: int


class RecordingSummarizer(LlmEventSummarizer):
    """ADK's own LLM summariser, remembering what it was given and what it returned."""

    def __init__(self, llm: BaseLlm) -> None:
        super().__init__(llm=llm)
        self.calls: list[tuple[list[Event], Event | None]] = []

    async def maybe_summarize_events(self, *, events: list[Event]) -> Event | None:
        result = await super().maybe_summarize_events(events=events)
        self.calls.append((list(events), result))
        return result


async def _compaction(url: str) -> CompactionWorld:
    script = []
    for turn in range(TURNS):
        if turn in TOOL_TURNS:
            script.append(reply(call_part("lookup_order", order_id=f"A-{turn}")))
        script.append(reply(text_part(f"Answer {turn + 1}.")))
    model = Scripted(model="scripted-helper", script=script)
    summariser_model = Scripted(
        model="scripted-summariser",
        script=[reply(text_part(f"Summary {n}."), usage=SUMMARY_USAGE) for n in range(1, 9)],
    )
    summarizer = RecordingSummarizer(summariser_model)
    agent = LlmAgent(
        name=COMPACTION_AGENT, model=model, instruction="Answer.", tools=[lookup_order]
    )
    app = App(
        name=COMPACTION_APP,
        root_agent=agent,
        events_compaction_config=EventsCompactionConfig(
            summarizer=summarizer,
            compaction_interval=COMPACTION_INTERVAL,
            overlap_size=OVERLAP_SIZE,
        ),
    )
    service = DatabaseSessionService(db_url=url)
    runner = Runner(app=app, session_service=service)
    try:
        session = await service.create_session(app_name=COMPACTION_APP, user_id=USER)
        invocations: list[str] = []
        calls: dict[str, int] = {}
        yielded: dict[str, int] = {}
        after: list[str] = []
        for turn in range(TURNS):
            before, summaries = model.served, len(summarizer.calls)
            events = await _turn(runner, session.id, user_message(f"Question {turn + 1}?"))
            invocation = _one_invocation(events)
            invocations.append(invocation)
            calls[invocation] = model.served - before
            yielded[invocation] = len(events)
            after.extend([invocation] * (len(summarizer.calls) - summaries))
    finally:
        await runner.close()
        await service.close()
    compactions = []
    for (given, result), trigger in zip(summarizer.calls, after, strict=True):
        if result is None or result.actions.compaction is None:
            raise AssertionError("the summariser returned no compaction event")
        compaction = result.actions.compaction
        text = compaction.compacted_content.parts[0].text if compaction.compacted_content else None
        compactions.append(
            Compaction(
                event_id=result.id,
                invocation_id=result.invocation_id,
                after=trigger,
                covered=tuple(dict.fromkeys(event.invocation_id for event in given)),
                covered_events=tuple(event.id for event in given),
                start_timestamp=float(compaction.start_timestamp),
                end_timestamp=float(compaction.end_timestamp),
                summary=text or "",
            )
        )
    return CompactionWorld(
        store=Store(folder=Path(), spans=()),
        session_id=session.id,
        invocations=tuple(invocations),
        model_calls=calls,
        yielded=yielded,
        compactions=tuple(compactions),
        summariser_calls=summariser_model.served,
    )


def build_compaction(folder: Path) -> CompactionWorld:
    """Twelve invocations in one session of an app compacting every three (overlap one)."""
    folder = _fresh(folder)
    with _quiet(), _capturing() as spans:
        world = asyncio.run(_compaction(_async_url(folder)))
    store = _finish(folder, "ADK 2.x compaction: four summaries in twelve invocations", spans)
    return replace(world, store=store)


# --- 2. rewind -------------------------------------------------------------------------------

REWIND_APP = "ik_rewind"
REWIND_AGENT = "planner_agent"
CREATION_STATE = {"channel": "chat", "user:segment": "smb", "app:banner": "winter"}
"""``create_session`` state of the main session (no event carries it)."""
CART_STATE = {"cart": ["A-1", "B-2"]}
"""``create_session`` state of the second session, which one rewind nulls."""
REWIND_DELTA = {"plan": "basic", "discount": None, "note": None, "channel": None}
"""The state delta ADK computes for the main session's rewind (before invocation 2 of 4)."""
CART_REWIND_DELTA = {"cart": None}
KEY_FATES = {
    "ticket": "written before the rewind point (user message state_delta): kept",
    "plan": "overwritten in an undone invocation: restored to its earlier value",
    "discount": "first written in an undone invocation: nulled",
    "note": "first written in an undone invocation: nulled",
    "channel": "set at create_session, in no event: nulled by the rewind (adk-python #4933)",
    "user:locale": "user: key overwritten in an undone invocation: not reverted",
    "app:promo": "app: key overwritten in an undone invocation: not reverted",
    "user:segment": "user: key set at create_session: untouched",
    "app:banner": "app: key set at create_session: untouched",
}
"""What the main session's rewind did to each key (the truth ``vanished_state`` must say)."""


def choose_plan(plan: str, tool_context: ToolContext) -> dict[str, str]:
    """Choose the customer's plan."""
    tool_context.state["plan"] = plan
    tool_context.state["user:locale"] = "de" if plan == "basic" else "fr"
    tool_context.state["app:promo"] = plan
    if plan != "basic":
        tool_context.state["discount"] = 10
    return {"plan": plan}


def add_note(note: str, tool_context: ToolContext) -> dict[str, str]:
    """Attach a note to the order."""
    tool_context.state["note"] = note
    return {"note": note}


@dataclass(frozen=True)
class Rewind:
    session_id: str
    before: str
    """``rewind_before_invocation_id``."""
    undone: tuple[str, ...]
    """Every invocation from ``before`` up to the rewind: ADK drops all of them
    (``events/_rewind_events.py`` ``_apply_rewinds``), not only ``before``."""
    delta: Mapping[str, Any]
    """The state delta the rewind event must carry."""


@dataclass(frozen=True)
class RewindWorld:
    store: Store
    session_id: str
    """The main session: plan basic, premium (overwrite), a note, the rewind, one more turn."""
    cart_session_id: str
    """The second session: one turn over creation state, then a rewind before it."""
    invocations: Mapping[str, tuple[str, ...]]
    """User invocations per session, in order."""
    rewinds: tuple[Rewind, ...]
    states: Mapping[str, Mapping[str, Any]]
    """``get_session().state`` per session after everything (app:/user: keys merged in)."""


async def _rewind(url: str) -> RewindWorld:
    model = Scripted(
        model="scripted-planner",
        script=[
            reply(call_part("choose_plan", plan="basic")),
            reply(text_part("Basic plan chosen.")),
            reply(call_part("choose_plan", plan="premium")),
            reply(text_part("Premium plan chosen, 10% off.")),
            reply(call_part("add_note", note="rush")),
            reply(text_part("Noted.")),
            reply(text_part("You are on the basic plan.")),
            reply(text_part("Your cart has two items.")),
        ],
    )
    agent = LlmAgent(
        name=REWIND_AGENT, model=model, instruction="Plan.", tools=[choose_plan, add_note]
    )
    service = DatabaseSessionService(db_url=url)
    runner = Runner(app_name=REWIND_APP, agent=agent, session_service=service)
    try:
        main = await service.create_session(
            app_name=REWIND_APP, user_id=USER, state=dict(CREATION_STATE)
        )
        invocations: list[str] = []
        for text, delta in (
            ("The basic plan, please.", {"ticket": "T-9"}),
            ("Premium instead.", None),
            ("Add a note: rush.", None),
        ):
            events = await _turn(runner, main.id, user_message(text), state_delta=delta)
            invocations.append(_one_invocation(events))
        await runner.rewind_async(
            user_id=USER, session_id=main.id, rewind_before_invocation_id=invocations[1]
        )
        after = await _turn(runner, main.id, user_message("Which plan am I on?"))
        invocations.append(_one_invocation(after))
        cart = await service.create_session(
            app_name=REWIND_APP, user_id=USER, state=dict(CART_STATE)
        )
        cart_turn = _one_invocation(await _turn(runner, cart.id, user_message("My cart?")))
        await runner.rewind_async(
            user_id=USER, session_id=cart.id, rewind_before_invocation_id=cart_turn
        )
        if model.served != len(model.script):
            raise AssertionError(f"the planner made {model.served} of its scripted calls")
        states = {}
        for sid in (main.id, cart.id):
            session = await service.get_session(app_name=REWIND_APP, user_id=USER, session_id=sid)
            assert session is not None
            states[sid] = dict(session.state)
    finally:
        await runner.close()
        await service.close()
    return RewindWorld(
        store=Store(folder=Path(), spans=()),
        session_id=main.id,
        cart_session_id=cart.id,
        invocations={main.id: tuple(invocations), cart.id: (cart_turn,)},
        rewinds=(
            Rewind(main.id, invocations[1], tuple(invocations[1:3]), REWIND_DELTA),
            Rewind(cart.id, cart_turn, (cart_turn,), CART_REWIND_DELTA),
        ),
        states=states,
    )


def build_rewind(folder: Path) -> RewindWorld:
    """A rewind over an overwrite, and one over state set at ``create_session``."""
    folder = _fresh(folder)
    with _quiet(), _capturing() as spans:
        world = asyncio.run(_rewind(_async_url(folder)))
    store = _finish(folder, "ADK 2.x rewind over an overwrite and over creation state", spans)
    return replace(world, store=store)


# --- 3. resume -------------------------------------------------------------------------------

RESUME_APP = "ik_resume"
RESUME_ROOT = "checkout"
CASHIER = "cashier_agent"
NOTIFIER = "notifier_agent"
JOURNAL = "journal.db"
CHARGE_KEY = "charge:A-1"
RUNS = "tool_runs.jsonl"
"""Each execution of ``charge_card``: pid, call id, invocation id, time (the world's truth)."""


WORKER_EVENTS = "worker_events.jsonl"
"""What the worker's ``run_async`` yielded before it died, and its model calls (truth)."""


@dataclass(frozen=True)
class ToolRun:
    pid: int
    call_id: str
    invocation_id: str
    at: float


@dataclass
class _Work:
    folder: Path | None = None
    """Where ``charge_card`` logs its runs and keeps its journal."""
    hang: Path | None = None
    """Set in the worker: ``charge_card`` creates this file, then blocks until killed."""


_WORK = _Work()


def wall_time(at: float) -> str:
    """A UTC wall time as SQLAlchemy's ``DateTime`` stores it in SQLite."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def _append_line(path: Path, record: Mapping[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")


def charge_card(order_id: str, amount: float, tool_context: ToolContext) -> dict[str, Any]:
    """Charge the customer's card for an order (not idempotent)."""
    folder = _WORK.folder
    if folder is None:
        raise AssertionError("charge_card runs only inside build_resume")
    call_id = tool_context.function_call_id or ""
    invocation_id = tool_context.invocation_id
    now = time.time()
    _append_line(
        folder / RUNS,
        {"pid": os.getpid(), "call_id": call_id, "invocation_id": invocation_id, "at": now},
    )
    # The journal a careful tool keeps (the kit's tool_journal table, written with sqlite3 so
    # the worker process stays cheap to start): INTENT before the side effect, DONE after it.
    # This tool never reads it first, so a run after a crash charges again: ADK resumes a
    # tool call at-least-once.
    with sqlite3.connect(folder / JOURNAL) as conn:
        conn.execute(
            "INSERT INTO tool_journal (key, invocation_id, function_call_id, status, created_at,"
            " updated_at) VALUES (?, ?, ?, 'INTENT', ?, ?) ON CONFLICT (key) DO UPDATE SET"
            " invocation_id = excluded.invocation_id, function_call_id ="
            " excluded.function_call_id, status = 'INTENT', updated_at = excluded.updated_at",
            (CHARGE_KEY, invocation_id, call_id, wall_time(now), wall_time(now)),
        )
    conn.close()
    if _WORK.hang is not None:
        _WORK.hang.write_text("charging", encoding="utf-8")
        time.sleep(600)  # the worker is killed here: charged, the journal still INTENT
    result = {"charged": order_id, "amount": amount}
    with sqlite3.connect(folder / JOURNAL) as conn:
        conn.execute(
            "UPDATE tool_journal SET status = 'DONE', result = ?, updated_at = ? WHERE key = ?",
            (json.dumps(result), wall_time(time.time()), CHARGE_KEY),
        )
    conn.close()
    return result


def request_approval(order_id: str) -> None:
    """Ask a human to approve a refund; the answer arrives later as a function response."""
    return None


def _resume_app(cashier: list[LlmResponse], notifier: list[LlmResponse]) -> App:
    cashier_agent = LlmAgent(
        name=CASHIER,
        model=Scripted(model="scripted-cashier", script=cashier),
        instruction="Charge and refund orders.",
        tools=[charge_card, LongRunningFunctionTool(func=request_approval)],
    )
    notifier_agent = LlmAgent(
        name=NOTIFIER,
        model=Scripted(model="scripted-notifier", script=notifier),
        instruction="Tell the customer.",
    )
    return App(
        name=RESUME_APP,
        root_agent=SequentialAgent(name=RESUME_ROOT, sub_agents=[cashier_agent, notifier_agent]),
        resumability_config=ResumabilityConfig(is_resumable=True),
    )


def _models(app: App) -> list[Scripted]:
    root = app.root_agent
    assert isinstance(root, SequentialAgent)
    out = []
    for agent in root.sub_agents:
        assert isinstance(agent, LlmAgent) and isinstance(agent.model, Scripted)
        out.append(agent.model)
    return out


def _is_checkpoint(event: Event) -> bool:
    return event.content is None and bool(
        event.actions.end_of_agent or event.actions.agent_state is not None
    )


def resume_worker(url: str, session_id: str, folder: str, hang: str) -> None:
    """The worker process: start the charge invocation; ``charge_card`` blocks until killed.
    Each event ``run_async`` yields, and each model call, is logged as it happens."""
    _WORK.folder, _WORK.hang = Path(folder), Path(hang)
    log = Path(folder) / WORKER_EVENTS

    async def run() -> None:
        app = _resume_app([reply(call_part("charge_card", order_id="A-1", amount=12.5))], [])
        models = _models(app)
        service = DatabaseSessionService(db_url=url)
        runner = Runner(app=app, session_service=service)
        async for event in runner.run_async(
            user_id=USER, session_id=session_id, new_message=user_message("Charge order A-1.")
        ):
            _append_line(
                log,
                {
                    "event_id": event.id,
                    "invocation_id": event.invocation_id,
                    "checkpoint": _is_checkpoint(event),
                    "model_calls": sum(model.served for model in models),
                },
            )

    with _quiet():
        asyncio.run(run())
    raise AssertionError("the worker finished; charge_card should have blocked until killed")


@dataclass(frozen=True)
class ResumeWorld:
    store: Store
    session_id: str
    resumed: str
    """The invocation the worker started and this process resumed."""
    charge_call_id: str
    worker_pid: int
    worker_exitcode: int
    killed_at: float
    """Epoch seconds, just after the worker died."""
    runs: tuple[ToolRun, ...]
    """Every execution of ``charge_card`` (from its own log)."""
    worker_events: tuple[str, ...]
    """Ids of the events the worker's ``run_async`` yielded before it died."""
    approval: str
    """The invocation paused on the long-running approval and continued by its answer."""
    approval_call_id: str
    model_calls: Mapping[str, int]
    """Model calls per invocation, both processes counted."""
    checkpoints: Mapping[str, int]
    """Content-less ``end_of_agent`` / ``agent_state`` events yielded per invocation."""

    @property
    def journal(self) -> Path:
        return self.store.folder / JOURNAL


async def _resume(folder: Path, pause: float) -> ResumeWorld:
    from incidentkit.store import tool_journal

    url = _async_url(folder)
    journal = sa.create_engine(f"sqlite:///{folder / JOURNAL}", poolclass=sa.pool.NullPool)
    with journal.begin() as conn:
        tool_journal.create(conn)
    journal.dispose()
    service = DatabaseSessionService(db_url=url)
    try:
        session = await service.create_session(app_name=RESUME_APP, user_id=USER)
    finally:
        await service.close()
    marker = folder / "worker.charging"
    worker = multiprocessing.get_context("spawn").Process(
        target=resume_worker, args=(url, session.id, str(folder), str(marker)), daemon=True
    )
    worker.start()
    try:
        while not marker.exists():
            if not worker.is_alive():
                raise AssertionError(f"the worker exited ({worker.exitcode}) before charging")
            await asyncio.sleep(0.02)
    finally:
        if worker.is_alive():
            os.kill(worker.pid or 0, signal.SIGKILL)
        worker.join()
    killed_at = time.time()
    marker.unlink()
    await asyncio.sleep(pause)  # the restart takes a while
    logged = [
        json.loads(line)
        for line in (folder / WORKER_EVENTS).read_text(encoding="utf-8").splitlines()
    ]
    resumed = logged[-1]["invocation_id"]
    service = DatabaseSessionService(db_url=url)
    app = _resume_app(
        [
            reply(text_part("Charged A-1: 12.50 EUR.")),
            reply(call_part("request_approval", order_id="A-1")),
            reply(text_part("The refund of A-1 is approved.")),
        ],
        [reply(text_part("Receipt sent.")), reply(text_part("Refund notice sent."))],
    )
    models = _models(app)
    runner = Runner(app=app, session_service=service)
    _WORK.folder = folder
    try:
        # Resuming: no new message, the invocation's id. ADK finds the call the worker left
        # unanswered and runs the tool again, with the same function-call id.
        done = await _turn(runner, session.id, None, invocation_id=resumed)
        served = sum(model.served for model in models)
        refund = await _turn(runner, session.id, user_message("Refund order A-1."))
        approval = _one_invocation(refund)
        paused = [e for e in refund if e.long_running_tool_ids]
        if len(paused) != 1 or len(paused[0].long_running_tool_ids or ()) != 1:
            raise AssertionError("the refund should pause on one long-running call")
        approval_call = next(iter(paused[0].long_running_tool_ids or ()))
        answer = types.Content(
            role="user",
            parts=[
                types.Part(
                    function_response=types.FunctionResponse(
                        id=approval_call,
                        name="request_approval",
                        response={"status": "approved", "by": "ops-lead"},
                    )
                )
            ],
        )
        await asyncio.sleep(pause)  # the human takes a while
        continued = await _turn(runner, session.id, answer)
        if _one_invocation(continued) != approval or _one_invocation(done) != resumed:
            raise AssertionError("a resumed invocation ran under another invocation id")
        for model in models:
            if model.served != len(model.script):
                raise AssertionError(f"{model.model} made {model.served} of its scripted calls")
    finally:
        _WORK.folder = None
        await runner.close()
        await service.close()
    runs = tuple(
        ToolRun(**json.loads(line))
        for line in (folder / RUNS).read_text(encoding="utf-8").splitlines()
    )
    return ResumeWorld(
        store=Store(folder=Path(), spans=()),
        session_id=session.id,
        resumed=resumed,
        charge_call_id=runs[0].call_id,
        worker_pid=worker.pid or 0,
        worker_exitcode=worker.exitcode if worker.exitcode is not None else 0,
        killed_at=killed_at,
        runs=runs,
        worker_events=tuple(record["event_id"] for record in logged),
        approval=approval,
        approval_call_id=approval_call,
        model_calls={
            resumed: logged[-1]["model_calls"] + served,
            approval: sum(model.served for model in models) - served,
        },
        checkpoints={
            resumed: sum(record["checkpoint"] for record in logged)
            + sum(map(_is_checkpoint, done)),
            approval: sum(map(_is_checkpoint, [*refund, *continued])),
        },
    )


def build_resume(folder: Path, *, pause: float = 0.0) -> ResumeWorld:
    """A resumable app's worker SIGKILLed mid-tool in a child process, the invocation resumed
    here; then a long-running approval answered within its invocation.

    ``pause`` seconds pass between the kill and the resume, and before the approval's answer:
    0 keeps the build fast; a few seconds make the gaps larger than the kit's latency checks
    (``latency_cliff`` compares sources at 2 s).
    """
    folder = _fresh(folder)
    with _quiet(), _capturing() as spans:
        world = asyncio.run(_resume(folder, pause))
    store = _finish(
        folder,
        "ADK 2.x resume: a worker killed mid-tool, the invocation resumed; an approval",
        spans,
        extra=f'\n[journal]\npath = "{JOURNAL}"\ntable = "tool_journal"\ntimezone = "UTC"\n',
    )
    return replace(world, store=store)


# --- 4. tool timeout, retried ------------------------------------------------------------------

TIMEOUT_APP = "ik_timeout"
TIMEOUT_AGENT = "fx_agent"
TOOL_TIMEOUT = 0.05
"""Seconds the tool waits for its (never answering) backend on the first call."""


_RATE_RUNS: list[str] = []
"""The currency of every run of ``fetch_rates``; a name for each that raised."""
_RAISED: list[str] = []


async def fetch_rates(currency: str) -> dict[str, Any]:
    """Fetch the exchange rate of a currency from the rates backend."""
    _RATE_RUNS.append(currency)
    if currency == "CHF" and _RATE_RUNS.count("CHF") == 1:
        try:  # the CHF backend never answers the first time: the client's timeout fires
            await asyncio.wait_for(asyncio.Event().wait(), timeout=TOOL_TIMEOUT)
        except TimeoutError as err:
            _RAISED.append(type(err).__name__)
            raise
    return {"currency": currency, "rate": 1.08}


@dataclass(frozen=True)
class TimeoutWorld:
    store: Store
    session_id: str
    healthy: str
    retried: str
    model_calls: Mapping[str, int]
    tool_runs: tuple[str, ...]
    """The currency of each run of ``fetch_rates``, in order (CHF twice)."""
    raised: tuple[str, ...]
    """The exception the tool raised on its first CHF run (ADK names it in ``error_code``)."""


async def _timeout(url: str) -> TimeoutWorld:
    _RATE_RUNS.clear()
    _RAISED.clear()
    model = Scripted(
        model="scripted-fx",
        script=[
            reply(call_part("fetch_rates", currency="USD")),
            reply(text_part("1 EUR = 1.08 USD.")),
            reply(call_part("fetch_rates", currency="CHF")),  # times out
            reply(call_part("fetch_rates", currency="CHF")),  # the node's retry: same call
            reply(text_part("1 EUR = 1.08 CHF.")),
        ],
    )
    agent = LlmAgent(
        name=TIMEOUT_AGENT,
        model=model,
        instruction="Quote exchange rates.",
        tools=[fetch_rates],
        retry_config=RetryConfig(max_attempts=2, initial_delay=0.0, jitter=0.0),
    )
    service = DatabaseSessionService(db_url=url)
    runner = Runner(app_name=TIMEOUT_APP, agent=agent, session_service=service)
    try:
        session = await service.create_session(app_name=TIMEOUT_APP, user_id=USER)
        calls: dict[str, int] = {}
        ids = []
        for text in ("EUR in USD?", "EUR in CHF?"):
            before = model.served
            invocation = _one_invocation(await _turn(runner, session.id, user_message(text)))
            calls[invocation] = model.served - before
            ids.append(invocation)
    finally:
        await runner.close()
        await service.close()
    return TimeoutWorld(
        store=Store(folder=Path(), spans=()),
        session_id=session.id,
        healthy=ids[0],
        retried=ids[1],
        model_calls=calls,
        tool_runs=tuple(_RATE_RUNS),
        raised=tuple(_RAISED),
    )


def build_timeout(folder: Path) -> TimeoutWorld:
    """A healthy invocation, then one whose tool times out and whose agent node retries."""
    folder = _fresh(folder)
    with _quiet(), _capturing() as spans:
        world = asyncio.run(_timeout(_async_url(folder)))
    store = _finish(folder, "ADK 2.x tool timeout retried by the agent node", spans)
    return replace(world, store=store)


# --- 5. max_llm_calls runaway (and 6. with the BigQuery Agent Analytics plugin) ---------------

LIMIT_APP = "ik_limit"
SUPPORT = "support_agent"
BILLING = "billing_agent"
LIMIT = 4
"""``RunConfig.max_llm_calls`` of every invocation. The first invocation makes exactly LIMIT
calls (allowed: ADK refuses a call only when the count would exceed it); the runaway's fifth
call is refused."""
USER_DELTA = {"ticket": "T-7", "temp:request": "r-1", "api_key": "sk-not-a-real-key"}
"""The first message's state delta: a ``temp:`` key and a secret-like key."""


def check_service(service: str) -> dict[str, str]:
    """Check whether a backend service can take a request."""
    return {"status": "error", "message": "Service busy, try again later"}


def record_status(order_id: str, status: str, tool_context: ToolContext) -> dict[str, str]:
    """Remember an order's status in the session state."""
    tool_context.state["temp:scratch"] = order_id
    tool_context.state["user:tier"] = "gold"
    tool_context.state["order_status"] = status
    return {"recorded": order_id}


@dataclass(frozen=True)
class Invocation:
    session_id: str
    invocation_id: str
    model_calls: int
    limit_hit: bool


@dataclass(frozen=True)
class RunawayWorld:
    store: Store
    invocations: tuple[Invocation, ...]
    limit_error: str

    @property
    def runaway(self) -> Invocation:
        (hit,) = (i for i in self.invocations if i.limit_hit)
        return hit


async def _limit_runs(
    url: str, plugins: Sequence[BasePlugin] = ()
) -> tuple[tuple[Invocation, ...], str]:
    support_model = Scripted(
        model="scripted-support",
        script=[
            # session 1, invocation 1: a lookup, a state write, a transfer (billing answers)
            reply(call_part("lookup_order", order_id="A-42")),
            reply(call_part("record_status", order_id="A-42", status="shipped")),
            reply(call_part("transfer_to_agent", agent_name=BILLING)),
            # session 1, invocation 2: billing is the active agent (see below)
            # session 2: the same busy check, over and over, until ADK refuses the fifth call
            *[reply(call_part("check_service", service="payments")) for _ in range(LIMIT)],
        ],
    )
    billing_model = Scripted(
        model="scripted-billing",
        script=[
            reply(text_part("A-42 has shipped; no refund is due.")),
            reply(text_part("Your invoice is on its way.")),
        ],
    )
    billing = LlmAgent(name=BILLING, model=billing_model, instruction="Answer billing questions.")
    support = LlmAgent(
        name=SUPPORT,
        model=support_model,
        instruction="Answer order questions.",
        tools=[lookup_order, record_status, check_service],
        sub_agents=[billing],
    )
    app = App(name=LIMIT_APP, root_agent=support, plugins=list(plugins))
    service = DatabaseSessionService(db_url=url)
    runner = Runner(app=app, session_service=service)
    config = RunConfig(max_llm_calls=LIMIT)
    out: list[Invocation] = []
    error = ""
    try:
        first = await service.create_session(app_name=LIMIT_APP, user_id=USER)
        for text, delta in (
            ("Where is A-42, and do I get a refund?", dict(USER_DELTA)),
            ("And my invoice?", None),
        ):
            before = support_model.served + billing_model.served
            events = await _turn(
                runner, first.id, user_message(text), state_delta=delta, run_config=config
            )
            served = support_model.served + billing_model.served - before
            out.append(Invocation(first.id, _one_invocation(events), served, False))
        second = await service.create_session(app_name=LIMIT_APP, user_id=USER)
        before = support_model.served
        yielded: list[Event] = []
        try:
            agen = runner.run_async(
                user_id=USER,
                session_id=second.id,
                new_message=user_message("Pay my order B-7."),
                run_config=config,
            )
            async for event in agen:
                yielded.append(event)
        except LlmCallsLimitExceededError as err:
            error = str(err)
        if not error:
            raise AssertionError("the runaway did not raise LlmCallsLimitExceededError")
        out.append(
            Invocation(second.id, _one_invocation(yielded), support_model.served - before, True)
        )
        for model in (support_model, billing_model):
            if model.served != len(model.script):
                raise AssertionError(f"{model.model} made {model.served} of its scripted calls")
    finally:
        await runner.close()
        await service.close()
    return tuple(out), error


def build_runaway(folder: Path) -> RunawayWorld:
    """A healthy session (a lookup, a state write, a transfer) and one that ADK stops at
    ``max_llm_calls`` (:data:`LIMIT`)."""
    folder = _fresh(folder)
    with _quiet(), _capturing() as spans:
        invocations, error = asyncio.run(_limit_runs(_async_url(folder)))
    store = _finish(folder, "ADK 2.x max_llm_calls runaway", spans)
    return RunawayWorld(store=store, invocations=invocations, limit_error=error)


# --- 6. the BigQuery Agent Analytics plugin ----------------------------------------------------

BQ_PROJECT = "ik-test-project"
BQ_DATASET = "agent_analytics"
BQ_TABLE = "agent_events"
EXTRACT = "agent_events.jsonl"
"""``bq extract --destination_format NEWLINE_DELIMITED_JSON``: TIMESTAMP as
``YYYY-MM-DD HH:MM:SS.ffffff UTC``, INT64 as strings, JSON columns as JSON text, NULLs left out."""
NESTED = "agent_events.nested.jsonl"
"""The same rows with JSON columns as nested objects, RFC 3339 times, nulls kept."""
PARQUET = "agent_events.parquet"
"""The rows as the plugin's Arrow schema holds them (JSON columns as text)."""
VIEWS = "views.sql"
"""The per-event-type views the plugin creates: the JSON paths its own SQL reads."""
COLUMNS = (
    "timestamp",
    "event_id",
    "event_type",
    "agent",
    "session_id",
    "invocation_id",
    "user_id",
    "trace_id",
    "span_id",
    "parent_span_id",
    "content",
    "content_parts",
    "attributes",
    "latency_ms",
    "status",
    "error_message",
    "is_truncated",
)
"""The columns of the plugin's table (``_get_events_schema``), in order."""
JSON_EXTENSION = b"google:sqlType:json"


class _AppendResponse:
    """What the Storage Write API answers to an accepted append (no error)."""

    error = None
    row_errors = ()


@dataclass
class Capture:
    """What the plugin sent: the table it created, the views, the Arrow batches."""

    tables: list[Any] = field(default_factory=list)
    views: list[str] = field(default_factory=list)
    batches: list[pa.RecordBatch] = field(default_factory=list)
    streams: list[str] = field(default_factory=list)

    def table(self) -> pa.Table:
        import pyarrow as pa

        if not self.batches:
            raise AssertionError("the plugin sent no rows")
        return pa.Table.from_batches(self.batches)


class _CapturingBigQuery:
    """The plugin's ``bigquery.Client``: the table is missing, so the plugin creates it."""

    def __init__(self, capture: Capture) -> None:
        self._capture = capture

    def get_table(self, table_id: str) -> Any:
        from google.cloud import exceptions

        raise exceptions.NotFound(f"Not found: Table {table_id}")

    def create_table(self, table: Any) -> Any:
        self._capture.tables.append(table)
        return table

    def query(self, sql: str) -> Any:
        self._capture.views.append(sql)

        class _Job:
            def result(self) -> list[Any]:
                return []

        return _Job()

    def close(self) -> None:
        return None


def _write_client_class(capture: Capture) -> type:
    """A stand-in for ``BigQueryWriteAsyncClient`` that decodes each ``AppendRowsRequest``'s
    serialized Arrow schema and record batch: exactly the rows the plugin would send."""

    class CapturingWriteClient:
        transport = None

        def __init__(self, **kwargs: Any) -> None:
            self.kwargs = kwargs

        async def append_rows(self, requests: Any, metadata: Any = ()) -> Any:
            import pyarrow as pa

            async for request in requests:
                arrow = request.arrow_rows
                schema = pa.ipc.read_schema(pa.py_buffer(arrow.writer_schema.serialized_schema))
                batch = pa.ipc.read_record_batch(
                    pa.py_buffer(arrow.rows.serialized_record_batch), schema
                )
                capture.batches.append(batch)
                capture.streams.append(request.write_stream)

            async def responses() -> AsyncGenerator[_AppendResponse, None]:
                yield _AppendResponse()

            return responses()

    return CapturingWriteClient


def fake_adc(path: Path) -> Path:
    """Write throwaway application-default credentials (a service account with a fresh RSA
    key, never valid anywhere): ``google.auth.default()`` reads them without the network."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode("ascii")
    info = {
        "type": "service_account",
        "project_id": BQ_PROJECT,
        "private_key_id": "0" * 40,
        "private_key": pem,
        "client_email": f"incidentkit-test@{BQ_PROJECT}.iam.gserviceaccount.com",
        "client_id": "100000000000000000000",
        "token_uri": "https://oauth2.googleapis.com/token",
    }
    path.write_text(json.dumps(info), encoding="utf-8")
    return path


@contextmanager
def _analytics(folder: Path) -> Iterator[tuple[Capture, Any]]:
    """Patch the plugin module's write client with a capture and point ADC at fake
    credentials for the block; yields the capture and a factory of plugins."""
    from google.adk.plugins import bigquery_agent_analytics_plugin as bqaa

    capture = Capture()
    adc = fake_adc(folder / "fake-adc.json")
    saved_client = bqaa.BigQueryWriteAsyncClient
    saved_env = {name: os.environ.get(name) for name in ("GOOGLE_APPLICATION_CREDENTIALS",)}
    bqaa.BigQueryWriteAsyncClient = _write_client_class(capture)  # type: ignore[misc]
    os.environ["GOOGLE_APPLICATION_CREDENTIALS"] = str(adc)

    def plugin() -> Any:
        made = bqaa.BigQueryAgentAnalyticsPlugin(
            project_id=BQ_PROJECT, dataset_id=BQ_DATASET, table_id=BQ_TABLE
        )
        made.client = _CapturingBigQuery(capture)  # the bigquery.Client the plugin would make
        return made

    try:
        yield capture, plugin
    finally:
        bqaa.BigQueryWriteAsyncClient = saved_client  # type: ignore[misc]
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _json_fields(schema: pa.Schema) -> set[str]:
    return {
        f.name for f in schema if (f.metadata or {}).get(b"ARROW:extension:name") == JSON_EXTENSION
    }


def _bq_value(value: Any, *, nested: bool) -> Any:
    """One non-JSON value as ``bq extract`` (``nested=False``) or a nested dump writes it."""
    if isinstance(value, datetime):
        utc = value.astimezone(UTC)
        return (
            utc.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            if nested
            else utc.strftime("%Y-%m-%d %H:%M:%S.%f UTC")
        )
    if isinstance(value, int) and not isinstance(value, bool) and not nested:
        return str(value)  # INT64 as a JSON string
    return value


def export_rows(table: pa.Table, *, nested: bool) -> list[dict[str, Any]]:
    """The rows as JSON objects: JSON columns as text (``bq extract``) or nested objects.

    The JSON columns are those the plugin's Arrow schema marks ``google:sqlType:json``
    (``content``, ``attributes``, ``latency_ms``); ``content_parts.part_attributes`` is a
    STRING column holding JSON text, kept as text.
    """
    json_fields = _json_fields(table.schema)

    def cell(value: Any, is_json: bool) -> Any:
        if value is None:
            return None
        if is_json:
            return json.loads(value) if nested else value
        return _bq_value(value, nested=nested)

    rows = []
    for record in table.to_pylist():
        row: dict[str, Any] = {}
        for name, value in record.items():
            if name == "content_parts" and value is not None:
                out: Any = [
                    {
                        key: cell(item, False)
                        for key, item in part.items()
                        if nested or item is not None
                    }
                    for part in value
                ]
            else:
                out = cell(value, name in json_fields)
            if nested or out is not None:
                row[name] = out
        rows.append(row)
    return rows


@dataclass(frozen=True)
class Analytics:
    """The rows the plugin sent, and what it asked BigQuery to create."""

    folder: Path
    table: pa.Table
    table_definition: Any
    """The ``bigquery.Table`` the plugin created (schema, partitioning, clustering, labels)."""
    views: tuple[str, ...]
    streams: tuple[str, ...]
    drops: Mapping[str, int]

    @property
    def rows(self) -> list[dict[str, Any]]:
        """Rows as the nested export holds them (JSON columns decoded)."""
        return export_rows(self.table, nested=True)

    @property
    def extract(self) -> Path:
        return self.folder / EXTRACT

    @property
    def nested(self) -> Path:
        return self.folder / NESTED

    @property
    def parquet(self) -> Path:
        return self.folder / PARQUET


def _save_analytics(capture: Capture, folder: Path, drops: Mapping[str, int]) -> Analytics:
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    table = capture.table()
    for name, nested in ((EXTRACT, False), (NESTED, True)):
        (folder / name).write_text(
            "".join(
                json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n"
                for row in export_rows(table, nested=nested)
            ),
            encoding="utf-8",
        )
    pq.write_table(table, folder / PARQUET)
    (folder / VIEWS).write_text(
        "".join(f"{sql.strip()};\n\n" for sql in capture.views), encoding="utf-8"
    )
    for manifest, data in (
        (MANIFEST, EXTRACT),
        ("evidence.nested.toml", NESTED),
        ("evidence.parquet.toml", PARQUET),
    ):
        (folder / manifest).write_text(
            f'title = "BigQuery Agent Analytics rows ({data})"\n\n[events]\npath = "{data}"\n',
            encoding="utf-8",
        )
    if len(capture.tables) != 1:
        raise AssertionError(f"the plugin created {len(capture.tables)} tables, not one")
    return Analytics(
        folder=folder,
        table=table,
        table_definition=capture.tables[0],
        views=tuple(capture.views),
        streams=tuple(capture.streams),
        drops=dict(drops),
    )


@dataclass(frozen=True)
class AnalyticsWorld:
    runaway: RunawayWorld
    """The ADK store of the very same runs."""
    analytics: Analytics
    """The plugin's rows of them, saved under ``bigquery/``."""


def build_analytics(folder: Path) -> AnalyticsWorld:
    """:func:`build_runaway`'s runs with ``BigQueryAgentAnalyticsPlugin``: the ADK store in
    ``folder``, the plugin's rows in ``folder/bigquery``."""
    folder = _fresh(folder)
    with _quiet(), _analytics(folder) as (capture, plugin), _capturing() as spans:
        made = plugin()
        invocations, error = asyncio.run(_limit_runs(_async_url(folder), [made]))
        drops = made.get_drop_stats()
    (folder / "fake-adc.json").unlink()
    store = _finish(folder, "ADK 2.x max_llm_calls runaway (BigQuery plugin on)", spans)
    return AnalyticsWorld(
        runaway=RunawayWorld(store=store, invocations=invocations, limit_error=error),
        analytics=_save_analytics(capture, folder / "bigquery", drops),
    )


MARKERS_APP = "ik_markers"
MARKERS_AGENT = "concierge_agent"


@dataclass(frozen=True)
class MarkersWorld:
    store: Store
    analytics: Analytics
    session_id: str
    invocations: tuple[str, ...]
    rewound: str


async def _markers(url: str, plugin: BasePlugin) -> tuple[str, tuple[str, ...]]:
    model = Scripted(
        model="scripted-concierge", script=[reply(text_part(f"Reply {n}.")) for n in range(1, 4)]
    )
    summariser = Scripted(
        model="scripted-summariser", script=[reply(text_part("Summary."), usage=SUMMARY_USAGE)]
    )
    app = App(
        name=MARKERS_APP,
        root_agent=LlmAgent(name=MARKERS_AGENT, model=model, instruction="Help."),
        plugins=[plugin],
        resumability_config=ResumabilityConfig(is_resumable=True),
        events_compaction_config=EventsCompactionConfig(
            summarizer=LlmEventSummarizer(llm=summariser), compaction_interval=2, overlap_size=0
        ),
    )
    service = DatabaseSessionService(db_url=url)
    runner = Runner(app=app, session_service=service)
    try:
        session = await service.create_session(app_name=MARKERS_APP, user_id=USER)
        ids = []
        for n in range(1, 4):
            ids.append(
                _one_invocation(await _turn(runner, session.id, user_message(f"Request {n}.")))
            )
        await runner.rewind_async(
            user_id=USER, session_id=session.id, rewind_before_invocation_id=ids[2]
        )
        if (model.served, summariser.served) != (3, 1):
            raise AssertionError(f"model calls {model.served}, summaries {summariser.served}")
    finally:
        await runner.close()
        await service.close()
    return session.id, tuple(ids)


def build_analytics_markers(folder: Path) -> MarkersWorld:
    """The plugin over a resumable app that compacts after two invocations and rewinds the
    third: which ADK 2.x markers reach the table."""
    folder = _fresh(folder)
    with _quiet(), _analytics(folder) as (capture, plugin), _capturing() as spans:
        made = plugin()
        session_id, invocations = asyncio.run(_markers(_async_url(folder), made))
        drops = made.get_drop_stats()
    (folder / "fake-adc.json").unlink()
    store = _finish(folder, "ADK 2.x markers (BigQuery plugin on)", spans)
    return MarkersWorld(
        store=store,
        analytics=_save_analytics(capture, folder / "bigquery", drops),
        session_id=session_id,
        invocations=invocations,
        rewound=invocations[2],
    )
