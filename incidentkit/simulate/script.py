"""Scripting one invocation: what the agents do, in order; the evidence follows from it.

An :class:`Invocation` advances its own clock as agents call the model and tools. It records
the events the session service stores, the spans the tracer would export, the diagnostics
plugin's log records and the run ledger row, and ends in one of four ways: ``finish`` (ok),
``fail`` (an error the runner saw), ``crash`` (the worker died: nothing more is written) or
``hang`` (blocked forever in a tool or model call: open spans are never exported).
"""

from __future__ import annotations

from typing import Any

from incidentkit.simulate.agent import Agent, frames
from incidentkit.simulate.model import Bundle, Event, JournalRow, LedgerRow, LogRecord, Part, Span
from incidentkit.simulate.world import HEARTBEAT_MS, LEASE_MS, RunStat, Session, World

LIMIT_JAVA = "Max number of llm calls limit of {} exceeded"


class Invocation:
    """One ``runAsync`` call: a user turn and everything the agents did for it."""

    def __init__(
        self,
        world: World,
        session: Session,
        *,
        start: int,
        root: str,
        text: str | None = None,
        parts: list[Part] | None = None,
        owner: str | None = "worker-1",
        attempts: int = 0,
        state_delta: dict[str, Any] | None = None,
        ledger: bool = True,
        run: tuple[str, int, dict[str, Any]] | None = None,
    ) -> None:
        self.world, self.session, self.root = world, session, root
        self.id = world.ids.invocation()
        self.traced = world.tracing
        self.trace = world.ids.trace() if self.traced else ""
        self.start = start
        self.now = start
        self.llm_calls = 0
        self.history_tokens = 0
        self.paused = False
        self.recorded_at: int | None = None
        self.out = Bundle(start=start, service=f"{session.app}-agent")
        self.stack: list[Agent] = []
        self.owner, self.attempts, self.with_ledger = owner, attempts, ledger
        self.run_id = world.ids.uuid()
        self.started_at = start - world.between(4, 15)
        user_parts = parts if parts is not None else [Part("text", text=text or "")]
        self.request = {"role": "user", "parts": [_part_json(p) for p in user_parts]}
        if run is not None:  # a re-drive continues the ledger row of the original run
            self.run_id, self.started_at, self.request = run
        self.root_span = self.span("invocation", None)
        self.now += world.between(1, 4)
        self.event("user", "user", user_parts, state_delta=state_delta or {})
        self.log(
            "INFO",
            f"run.start inv={self.id} app={session.app} user={session.user} session={session.id}",
        )
        self.run_start = self.now
        self.ended: int | None = None

    # -- recording ---------------------------------------------------------------------------
    def span(self, kind: Any, parent: Span | None, *, agent: str = "") -> Span:
        span = Span(
            trace_id=self.trace,
            span_id=self.world.ids.span() if self.traced else "",
            parent_id=None if parent is None else parent.span_id,
            kind=kind,
            start=self.now,
            invocation_id=self.id,
            session_id=self.session.id,
            agent=agent,
            root_agent=self.root,
        )
        if self.traced:
            self.out.spans.append(span)
        return span

    def event(self, author: str, role: str | None, parts: list[Part], **fields: Any) -> Event:
        self.now += 1
        event = Event(
            app=self.session.app,
            user=self.session.user,
            session=self.session.id,
            invocation_id=self.id,
            event_id=self.world.ids.uuid(),
            author=author,
            ts=self.now,
            role=role,
            parts=parts,
            **fields,
        )
        self.out.events.append(event)
        if author != "user" and self.recorded_at is None and not event.partial:
            self.recorded_at = self.now
        return event

    def log(self, level: Any, message: str, *, throwable: tuple[str, ...] = ()) -> None:
        self.now += 1
        self.out.logs.append(LogRecord(self.now, level, message, throwable=throwable))

    def journal(self, row: JournalRow) -> None:
        self.out.journal.append(row)

    def agent(self, name: str, *, parent: Agent | None = None, branch: str | None = None) -> Agent:
        span = self.span("invoke_agent", parent.span if parent else self.root_span, agent=name)
        span.description = self.world.describe(name)
        agent = Agent(self, name, span, branch)
        self.stack.append(agent)
        self.now += 1
        return agent

    def pause(self, ms: int) -> None:
        self.now += ms

    # -- endings -----------------------------------------------------------------------------
    def _close_spans(self) -> None:
        for agent in reversed(self.stack):
            agent.end()
        self.now += 1
        self.root_span.end = self.now

    def _stat(self, outcome: str | None) -> None:
        if self.world.keep_stats:
            self.world.stats.append(
                RunStat(
                    self.session.app,
                    self.id,
                    self.run_start,
                    self.ended,
                    self.llm_calls,
                    outcome,
                )
            )

    def _run_end(self, outcome: str) -> None:
        self.now += 1
        self.ended = self.now
        ms = self.now - self.run_start
        self.out.logs.append(
            LogRecord(
                self.now,
                "INFO",
                f"run.end inv={self.id} outcome={outcome} ms={ms} llmCalls={self.llm_calls}",
            )
        )
        self._stat(outcome)

    def finish(self, *, status: str | None = None) -> Bundle:
        """Normal end: spans closed, ``run.end outcome=ok``, ledger DONE (PAUSED if paused)."""
        self._close_spans()
        self._run_end("ok")
        final = status or ("PAUSED" if self.paused else "DONE")
        return self._ledger(final, updated=self.now + self.world.between(2, 9))

    def fail(self, exc: str, message: str, *, root_message: str) -> Bundle:
        """The runner's Flowable errors: agent and root spans ERROR, run.end error, run.error."""
        for agent in reversed(self.stack):
            agent.span.error = (exc, message, message)
            agent.end()
        self.now += 1
        self.root_span.end = self.now
        self.root_span.error = (exc, message, root_message)
        self._run_end("error")
        self.log("ERROR", f"run.error inv={self.id}", throwable=(f"{exc}: {message}", *frames()))
        return self._ledger("FAILED", updated=self.now + self.world.between(2, 9))

    def fail_limit(self, limit: int) -> Bundle:
        """``maxLlmCalls`` exceeded on the next model call (ADK Python also stores an event)."""
        self.event(
            self.root,
            None,
            [],
            error_code="LlmCallsLimitExceededError",
            error_message=f"Max number of llm calls limit of `{limit}` exceeded",
            only="adk-python",
        )
        failing = [agent.span for agent in self.stack] + [self.root_span]
        out = self.fail(
            "com.google.adk.models.LlmCallsLimitExceededException",
            LIMIT_JAVA.format(limit),
            root_message="Error in runAsync Flowable execution",
        )
        for span in failing:
            span.limit = limit
        return out

    def crash(self, *, at: int, status: str = "RUNNING") -> Bundle:
        """The worker dies at ``at``: nothing more is written, open spans are lost."""
        if at < self.now:
            raise ValueError(f"crash at {at} before the invocation's last record {self.now}")
        self._stat(None)
        return self._ledger(status, updated=None, alive_until=at)

    def hang(self, *, alive_until: int) -> Bundle:
        """Blocked forever; the worker is alive and renews the lease until ``alive_until``."""
        self._stat(None)
        return self._ledger("RUNNING", updated=None, alive_until=alive_until)

    def _ledger(
        self, status: str, *, updated: int | None, alive_until: int | None = None
    ) -> Bundle:
        if self.with_ledger:
            last = alive_until if alive_until is not None else (updated or self.now)
            beats = max(0, (last - self.started_at) // HEARTBEAT_MS)
            heartbeat = self.started_at + beats * HEARTBEAT_MS
            lease = heartbeat + LEASE_MS
            touched = updated if updated is not None else max(heartbeat, self.recorded_at or 0)
            self.out.ledger.append(
                LedgerRow(
                    run_id=self.run_id,
                    app=self.session.app,
                    user=self.session.user,
                    session=self.session.id,
                    invocation_id=self.id if self.recorded_at is not None else None,
                    request=self.request,
                    status=status,
                    owner=self.owner,
                    lease_until=lease,
                    attempts=self.attempts,
                    started_at=self.started_at,
                    updated_at=max(touched, self.started_at),
                )
            )
        return self.out


def _part_json(part: Part) -> dict[str, Any]:
    if part.kind == "text":
        return {"text": part.text}
    if part.kind == "response":
        return {
            "functionResponse": {"id": part.call_id, "name": part.name, "response": part.payload}
        }
    return {"functionCall": {"args": part.payload, "id": part.call_id, "name": part.name}}
