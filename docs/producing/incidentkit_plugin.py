"""An ADK Python plugin that writes the evidence incidentkit reads beside ADK's own stores.

ADK stores sessions and emits spans; it keeps no run ledger, no side-effect journal and no
diagnostics log lines. This file writes all three, for an app built on google-adk 2.x:

- the run ledger ``agent_run``: a row claimed before each run (RUNNING, owner, lease_until,
  attempts), its lease renewed by a timer while the run lives, and finished DONE, PAUSED (the
  last event waits on a long-running tool call) or FAILED;
- the side-effect journal ``tool_journal``: an INTENT entry before a tool marked with
  :func:`side_effect` acts, a DONE entry with its result after, keyed by business identity;
- the diagnostics lines ``run.start``, ``run.end``, ``model.error``, ``tool.error``,
  ``run.error``, ``run.many_llm_calls`` and ``rx.undeliverable``, one line per event, ids on
  every line, in the text format incidentkit's ``[diagnostics]`` section reads.

Copy it into your app; it needs google-adk and SQLAlchemy (which ``google-adk[db]`` brings).
``docs/producing-evidence.md`` explains each part; ``docs/producing/schema.sql`` is the DDL::

    ledger = Ledger(sa.create_engine(url), owner=f"{socket.gethostname()}:{os.getpid()}")
    logging.getLogger(DIAGNOSTICS).addHandler(diagnostics_handler("diagnostics.log"))
    logging.getLogger(DIAGNOSTICS).setLevel(logging.INFO)  # run.start/run.end are INFO
    plugin = IncidentkitPlugin(ledger, Journal(ledger.engine))
    runner = Runner(app=App(name="invoicing", root_agent=root, plugins=[plugin]),
                    session_service=sessions)

    @side_effect("send-invoice:{invoice_id}")
    def send_invoice(invoice_id: str) -> dict[str, str]: ...
"""

from __future__ import annotations

import asyncio
import logging
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import sqlalchemy as sa
from google.adk.agents.callback_context import CallbackContext
from google.adk.agents.invocation_context import InvocationContext
from google.adk.events import Event
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from sqlalchemy.dialects import postgresql

DIAGNOSTICS = "agent.diagnostics"
"""The logger the diagnostics lines go to; give it :func:`diagnostics_handler`."""
RUNNING, PAUSED, DONE, FAILED, PARKED = "RUNNING", "PAUSED", "DONE", "FAILED", "PARKED"
INTENT = "INTENT"

_log = logging.getLogger(__name__)  # the plugin's own trouble, not diagnostics lines

# --- the tables (the same columns as schema.sql; create_all is for SQLite and tests) ----------

metadata = sa.MetaData()
_JSON = sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql")
_UUID = sa.String(36).with_variant(postgresql.UUID(as_uuid=False), "postgresql")
_TIME = sa.DateTime(timezone=True)  # SQLite keeps no zone: the times written are UTC

agent_run = sa.Table(
    "agent_run",
    metadata,
    sa.Column("run_id", _UUID, primary_key=True),
    sa.Column("app_name", sa.Text, nullable=False),
    sa.Column("user_id", sa.String(128), nullable=False),
    sa.Column("session_id", sa.String(128), nullable=False),
    sa.Column("invocation_id", sa.String(256)),
    sa.Column("request", _JSON, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("owner", sa.String(128)),
    sa.Column("lease_until", _TIME),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("started_at", _TIME, nullable=False),
    sa.Column("updated_at", _TIME, nullable=False),
)
tool_journal = sa.Table(
    "tool_journal",
    metadata,
    sa.Column("key", sa.String(256), primary_key=True),
    sa.Column("invocation_id", sa.String(256), nullable=False),
    sa.Column("function_call_id", sa.String(256), nullable=False, server_default=""),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("result", _JSON),
    sa.Column("created_at", _TIME, nullable=False),
    sa.Column("updated_at", _TIME, nullable=False),
)


def utcnow() -> datetime:
    """The worker's clock, in UTC (every time this file writes comes from it)."""
    return datetime.now(UTC)


# --- the run ledger ----------------------------------------------------------------------------


class Ledger:
    """The run ledger: claim a row before a run, renew its lease, finish it; and the sweeper's
    claim of expired rows. Every write is conditional on ``owner``, so a worker presumed dead
    cannot take back a run a sweeper reassigned."""

    def __init__(
        self,
        engine: sa.Engine,
        *,
        owner: str,
        lease: timedelta = timedelta(seconds=60),
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.engine, self.owner, self.lease, self.clock = engine, owner, lease, clock

    def create_tables(self) -> None:
        """Create ``agent_run`` and ``tool_journal`` (on PostgreSQL, prefer schema.sql)."""
        metadata.create_all(self.engine)

    def claim(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        invocation_id: str | None,
        request: Mapping[str, Any],
    ) -> str:
        """Write a RUNNING row held by this worker; returns its run id."""
        now, run_id = self.clock(), str(uuid.uuid4())
        with self.engine.begin() as conn:
            conn.execute(
                agent_run.insert().values(
                    run_id=run_id,
                    app_name=app_name,
                    user_id=user_id,
                    session_id=session_id,
                    invocation_id=invocation_id,
                    request=dict(request),
                    status=RUNNING,
                    owner=self.owner,
                    lease_until=now + self.lease,
                    attempts=0,
                    started_at=now,
                    updated_at=now,
                )
            )
        return run_id

    def renew(self, run_ids: Sequence[str]) -> int:
        """Extend the lease of the RUNNING rows this worker still holds; returns how many."""
        if not run_ids:
            return 0
        now = self.clock()
        with self.engine.begin() as conn:
            done = conn.execute(
                agent_run.update()
                .where(
                    agent_run.c.run_id.in_(list(run_ids)),
                    agent_run.c.owner == self.owner,
                    agent_run.c.status == RUNNING,
                )
                .values(lease_until=now + self.lease, updated_at=now)
            )
        return done.rowcount

    def finish(self, run_id: str, status: str) -> bool:
        """Move this worker's RUNNING row to ``status`` and drop its lease; False when the row
        is no longer this worker's (a sweeper claimed it) or no longer RUNNING."""
        with self.engine.begin() as conn:
            done = conn.execute(
                agent_run.update()
                .where(
                    agent_run.c.run_id == run_id,
                    agent_run.c.owner == self.owner,
                    agent_run.c.status == RUNNING,
                )
                .values(status=status, lease_until=None, updated_at=self.clock())
            )
        return done.rowcount == 1

    def claim_expired(
        self, *, limit: int = 10, now: datetime | None = None
    ) -> list[dict[str, Any]]:
        """The sweeper: take over up to ``limit`` RUNNING rows whose lease expired, counting the
        attempt. The WHERE is checked again by the UPDATE itself, so two sweepers never take
        the same row (PostgreSQL re-reads a row another transaction changed)."""
        at = now or self.clock()
        expired = (agent_run.c.status == RUNNING) & (agent_run.c.lease_until < at)
        oldest = (
            sa.select(agent_run.c.run_id)
            .where(expired)
            .order_by(agent_run.c.lease_until)
            .limit(limit)
            .with_for_update(skip_locked=True)  # PostgreSQL; SQLite locks the whole file
        )
        with self.engine.begin() as conn:
            rows = conn.execute(
                agent_run.update()
                .where(agent_run.c.run_id.in_(oldest.scalar_subquery()), expired)
                .values(
                    owner=self.owner,
                    attempts=agent_run.c.attempts + 1,
                    lease_until=at + self.lease,
                    updated_at=at,
                )
                .returning(*agent_run.c)
            )
            return [dict(row) for row in rows.mappings()]


# --- the side-effect journal -------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One journal entry: INTENT (about to act) or DONE (acted; ``result`` is what it gave)."""

    key: str
    status: str
    result: Any


class Journal:
    """The side-effect journal, keyed by the business identity of the effect (never by the
    function call id: a re-driven run calls again with a new id for the same intent)."""

    def __init__(self, engine: sa.Engine, *, clock: Callable[[], datetime] = utcnow) -> None:
        self.engine, self.clock = engine, clock

    def find(self, key: str) -> Entry | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(tool_journal.c.key, tool_journal.c.status, tool_journal.c.result).where(
                    tool_journal.c.key == key
                )
            ).first()
        return None if row is None else Entry(row.key, row.status, row.result)

    def intent(self, key: str, *, invocation_id: str, function_call_id: str) -> None:
        """Record that the effect is about to happen (again: a re-drive takes the entry over)."""
        now = self.clock()
        mine = {"invocation_id": invocation_id, "function_call_id": function_call_id}
        with self.engine.begin() as conn:
            moved = conn.execute(
                tool_journal.update()
                .where(tool_journal.c.key == key, tool_journal.c.status == INTENT)
                .values(**mine, updated_at=now)
            )
            if moved.rowcount == 0:
                conn.execute(
                    tool_journal.insert().values(
                        key=key, status=INTENT, result=None, created_at=now, updated_at=now, **mine
                    )
                )

    def done(self, key: str, result: Any) -> None:
        """Record that the effect happened, with what it returned (replayed on a re-drive)."""
        with self.engine.begin() as conn:
            conn.execute(
                tool_journal.update()
                .where(tool_journal.c.key == key)
                .values(status=DONE, result=result, updated_at=self.clock())
            )


@dataclass(frozen=True)
class SideEffect:
    """How a tool's effect is journaled: the key template over its arguments, and how to ask
    the downstream system whether it already saw a key (returns its result, or None)."""

    key: str
    lookup: Callable[[str], dict[str, Any] | None] | None = None


F = TypeVar("F", bound=Callable[..., Any])


def side_effect(
    key: str, *, lookup: Callable[[str], dict[str, Any] | None] | None = None
) -> Callable[[F], F]:
    """Mark a tool function as changing the outside world, journaled under ``key``, a format
    string over its arguments (``"send-invoice:{invoice_id}"``). Give the same template to the
    kit as the app's ``key_templates``. ``lookup(key)`` asks the downstream system whether it
    saw the key (its result, or None); without it, a call that finds an INTENT refuses to act.
    The function itself is left unchanged."""

    def mark(func: F) -> F:
        func.__side_effect__ = SideEffect(key, lookup)  # type: ignore[attr-defined]
        return func

    return mark


def side_effect_of(tool: BaseTool) -> SideEffect | None:
    """The :class:`SideEffect` of a FunctionTool's function, if :func:`side_effect` marked it."""
    marked = getattr(getattr(tool, "func", None), "__side_effect__", None)
    return marked if isinstance(marked, SideEffect) else None


# --- diagnostics lines -------------------------------------------------------------------------

_MISSING = frozenset({"-", "?", "null"})  # values the kit reads as "no value"


def token(value: object) -> str:
    """``value`` as the text after ``key=``: ``-`` for None; whitespace, ``%`` and characters
    that cannot be printed percent-encoded (UTF-8), so a value never splits a token, adds a
    token or ends a line. The kit reads the token as written."""
    text = "" if value is None else str(value)
    if not text:
        return "-"
    if text in _MISSING:  # a real value spelled like "no value"
        return "".join(f"%{b:02X}" for b in text.encode())
    return "".join(
        "".join(f"%{b:02X}" for b in c.encode("utf-8", "backslashreplace"))
        if c == "%" or c.isspace() or not c.isprintable()
        else c
        for c in text
    )


class DiagnosticsFormatter(logging.Formatter):
    """``2026-11-29T03:10:00.123Z INFO agent.diagnostics - run.start inv=…``: UTC with an
    offset, then level, logger and message; every stack line indented, so the kit joins it
    to its record whatever the exception's message holds."""

    converter = staticmethod(time.gmtime)

    def __init__(self) -> None:
        super().__init__(
            "%(asctime)s.%(msecs)03dZ %(levelname)s %(name)s - %(message)s", "%Y-%m-%dT%H:%M:%S"
        )

    def formatException(self, ei: Any) -> str:  # noqa: N802 - logging's name
        return textwrap.indent(super().formatException(ei), "    ", lambda _: True)

    def formatStack(self, stack_info: str) -> str:  # noqa: N802 - logging's name
        return textwrap.indent(stack_info, "    ", lambda _: True)


def diagnostics_handler(path: str) -> logging.Handler:
    """A UTF-8 file handler writing the diagnostics lines in the kit's text format."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(DiagnosticsFormatter())
    return handler


def install_undeliverable_handler(
    loop: asyncio.AbstractEventLoop, logger: logging.Logger | None = None
) -> None:
    """Log errors nobody received (a task's exception never retrieved, a callback that
    raised) as ``rx.undeliverable`` lines: Python's counterpart of RxJava's global handler."""
    log = logger or logging.getLogger(DIAGNOSTICS)

    def handle(_: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception") or RuntimeError(context.get("message"))
        log.error("rx.undeliverable", exc_info=error)

    loop.set_exception_handler(handle)


# --- the plugin --------------------------------------------------------------------------------


@dataclass
class _Run:
    run_id: str
    started: float  # time.monotonic()
    llm_calls: int = 0
    paused: bool = False


class IncidentkitPlugin(BasePlugin):
    """Writes the run ledger, the journal of :func:`side_effect` tools and the diagnostics
    lines. It only observes: every callback returns None, except a journaled tool whose
    effect already happened, which returns the stored result instead of acting again."""

    def __init__(
        self,
        ledger: Ledger,
        journal: Journal | None = None,
        *,
        name: str = "incidentkit",
        heartbeat: timedelta = timedelta(seconds=20),
        max_run: timedelta = timedelta(hours=1),
        many_llm_calls_every: int = 20,
        logger: logging.Logger | None = None,
    ) -> None:
        super().__init__(name)
        self.ledger, self.journal = ledger, journal
        self.heartbeat, self.max_run = heartbeat, max_run
        self.every = many_llm_calls_every
        self.log = logger or logging.getLogger(DIAGNOSTICS)
        self._runs: dict[str, _Run] = {}  # by invocation id
        self._intents: dict[str, str] = {}  # function call id -> journal key with an INTENT
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    # the run: claim, renew, finish

    async def on_user_message_callback(
        self, *, invocation_context: InvocationContext, user_message: types.Content
    ) -> types.Content | None:
        # Before ADK stores the user message: the row predates the run's first event.
        await self._claim(invocation_context, user_message)
        return None

    async def before_run_callback(
        self, *, invocation_context: InvocationContext
    ) -> types.Content | None:
        ctx = invocation_context
        await self._claim(ctx, ctx.user_content)  # a resumed invocation skips on_user_message
        self.log.info(
            "run.start inv=%s app=%s user=%s session=%s",
            *map(token, (ctx.invocation_id, ctx.app_name, ctx.user_id, ctx.session.id)),
        )
        return None

    async def on_event_callback(
        self, *, invocation_context: InvocationContext, event: Event
    ) -> Event | None:
        run = self._runs.get(invocation_context.invocation_id)
        if run is not None and not event.partial:  # partial events are never stored
            # Paused when the run's last stored event waits on a long-running call; a
            # long-running call answered later in the same run is no pause.
            run.paused = bool(event.long_running_tool_ids)
        return None

    async def after_run_callback(self, *, invocation_context: InvocationContext) -> None:
        await self._finish(invocation_context, "ok")

    async def on_run_error_callback(
        self, *, invocation_context: InvocationContext, error: Exception
    ) -> None:
        await self._finish(invocation_context, "error")
        self.log.error("run.error inv=%s", token(invocation_context.invocation_id), exc_info=error)

    async def close(self) -> None:
        self._stop.set()
        if self._beat is not None:
            await asyncio.to_thread(self._beat.join)

    # model calls

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        run = self._runs.get(callback_context.invocation_id)
        if run is not None:
            run.llm_calls += 1
            if run.llm_calls % self.every == 0:
                self.log.warning(
                    "run.many_llm_calls inv=%s agent=%s calls=%d",
                    token(callback_context.invocation_id),
                    token(callback_context.agent_name),
                    run.llm_calls,
                )
        return None

    async def on_model_error_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest, error: Exception
    ) -> LlmResponse | None:
        self.log.error(
            "model.error inv=%s agent=%s",
            token(callback_context.invocation_id),
            token(callback_context.agent_name),
            exc_info=error,
        )
        return None  # the error propagates unchanged

    # tool calls: the journal of side effects, and tool.error

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        effect = side_effect_of(tool)
        if effect is None or self.journal is None:
            return None
        try:
            key = effect.key.format(**tool_args)
        except (KeyError, IndexError) as err:  # refuse to act unjournaled
            raise ValueError(f"{tool.name}: its arguments do not fill {effect.key!r}") from err
        prior = await asyncio.to_thread(self.journal.find, key)
        if prior is not None and prior.status == DONE:
            return dict(prior.result or {})  # it happened: replay, do not act twice
        if prior is not None:  # an INTENT: a crash after acting (W4), or before?
            seen = None if effect.lookup is None else await asyncio.to_thread(effect.lookup, key)
            if seen is not None:
                await asyncio.to_thread(self.journal.done, key, seen)
                return seen
            if effect.lookup is None:  # guessing either way is worse than asking
                raise RuntimeError(
                    f"{tool.name}: the journal holds an INTENT for {key} and no lookup can tell "
                    "whether it took effect; ask the downstream system, then record DONE or "
                    "delete the entry"
                )
        call_id = tool_context.function_call_id or ""
        await asyncio.to_thread(
            self.journal.intent,
            key,
            invocation_id=tool_context.invocation_id,
            function_call_id=call_id,
        )
        self._intents[call_id] = key
        return None

    async def after_tool_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        result: dict[str, Any],
    ) -> dict[str, Any] | None:
        key = self._intents.pop(tool_context.function_call_id or "", None)
        if key is not None and self.journal is not None:
            await asyncio.to_thread(self.journal.done, key, result)
        return None

    async def on_tool_error_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        error: Exception,
    ) -> dict[str, Any] | None:
        # An INTENT stays: whether the effect happened is for the downstream system to say.
        self._intents.pop(tool_context.function_call_id or "", None)
        if not isinstance(error, asyncio.CancelledError):  # cancelled: not the tool's error
            self.log.error(
                "tool.error inv=%s tool=%s call=%s",
                token(tool_context.invocation_id),
                token(tool.name),
                token(tool_context.function_call_id),
                exc_info=error,
            )
        return None

    # internals

    async def _claim(self, ctx: InvocationContext, message: types.Content | None) -> None:
        if ctx.invocation_id in self._runs:
            return
        request = message.model_dump(mode="json", exclude_none=True) if message else {}
        run_id = await asyncio.to_thread(
            self.ledger.claim,
            app_name=ctx.app_name,
            user_id=ctx.user_id,
            session_id=ctx.session.id,
            invocation_id=ctx.invocation_id,  # ADK gives plugins the id before the first event
            request=request,
        )
        with self._lock:
            self._runs[ctx.invocation_id] = _Run(run_id, time.monotonic())
            if self._beat is None:
                self._beat = threading.Thread(target=self._renew, name="ledger-lease", daemon=True)
                self._beat.start()

    async def _finish(self, ctx: InvocationContext, outcome: str) -> None:
        with self._lock:  # removed first: a run being finished is no longer renewed
            run = self._runs.pop(ctx.invocation_id, None)
        if run is None:
            return
        status = FAILED if outcome == "error" else PAUSED if run.paused else DONE
        try:
            if not await asyncio.to_thread(self.ledger.finish, run.run_id, status):
                _log.warning("run %s was no longer this worker's to finish %s", run.run_id, status)
        except sa.exc.SQLAlchemyError:
            # The lease runs out and the sweeper finds the run's last events: ACTUALLY_DONE.
            _log.exception("could not finish run %s as %s", run.run_id, status)
        self.log.info(
            "run.end inv=%s outcome=%s ms=%d llmCalls=%d",
            token(ctx.invocation_id),
            outcome,
            round((time.monotonic() - run.started) * 1000),
            run.llm_calls,
        )

    def _renew(self) -> None:
        """The lease timer: renews every run still alive; a run older than ``max_run`` (its
        caller went away without a callback) is dropped, so its lease runs out."""
        while not self._stop.wait(self.heartbeat.total_seconds()):
            limit = time.monotonic() - self.max_run.total_seconds()
            with self._lock:
                for inv in [inv for inv, run in self._runs.items() if run.started < limit]:
                    _log.warning("run %s outlived max_run; its lease will lapse", inv)
                    del self._runs[inv]
                held = [run.run_id for run in self._runs.values()]
            try:
                self.ledger.renew(held)
            except sa.exc.SQLAlchemyError:
                _log.exception("could not renew the leases of %d run(s)", len(held))
