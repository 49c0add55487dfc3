"""One agent's turn inside an invocation: model calls, tools, transfers, sub-agents.

Each method advances the invocation's clock and records what ADK would: the model's event (text
or function call), the tool's response event, and their ``call_llm`` / ``execute_tool`` spans.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from incidentkit.simulate.model import Event, Part, Span
from incidentkit.simulate.world import MODEL

if TYPE_CHECKING:
    from incidentkit.simulate.script import Invocation


@dataclass(slots=True)
class Call:
    """A function call the model asked for."""

    call_id: str
    name: str
    args: dict[str, Any]
    llm_span: Span
    event: Event


HISTORY_OVERHEAD = 40
"""Tokens a turn adds to the history beyond the model's output (roles, tool answers)."""


@dataclass
class Agent:
    """One agent's turn inside an invocation (one ``invoke_agent`` span)."""

    inv: Invocation
    name: str
    span: Span
    branch: str | None = None
    calls: list[Call] = field(default_factory=list)

    # -- model calls -------------------------------------------------------------------------
    def _llm(self, ms: int | None) -> Span:
        inv = self.inv
        inv.llm_calls += 1
        if inv.llm_calls % 20 == 0:
            inv.log(
                "WARN",
                f"run.many_llm_calls inv={inv.id} agent={self.name} calls={inv.llm_calls}",
            )
        span = inv.span("call_llm", self.span, agent=self.name)
        span.model = MODEL
        inv.now += inv.world.llm_ms() if ms is None else ms
        span.end = inv.now
        # Every call re-sends the invocation's history: the prompt grows by each answer.
        if not inv.history_tokens:
            inv.history_tokens = inv.world.between(300, 1500)  # instructions and the message
        output = inv.world.between(10, 400)
        span.tokens = (inv.history_tokens, output)
        inv.history_tokens += output + HISTORY_OVERHEAD
        return span

    def _model_event(self, span: Span, parts: list[Part], **extra: Any) -> Event:
        event = self.inv.event(self.name, "model", parts, branch=self.branch, model=True, **extra)
        event.tokens = span.tokens
        span.event_id = event.event_id
        if self.inv.traced:
            span.java_event_id = self.inv.world.ids.uuid()
        return event

    def say(
        self,
        text: str,
        *,
        ms: int | None = None,
        state_delta: dict[str, Any] | None = None,
        partials: list[dict[str, Any]] | None = None,
        error_code: str | None = None,
        error_message: str | None = None,
        escalate: bool | None = None,
    ) -> Event:
        """One model call ending in text; ``partials`` are streamed chunks' state deltas."""
        span = self._llm(ms)
        if partials:
            finish = self.inv.now
            self.inv.now = span.start + 1
            for delta in partials:
                self.inv.now += max(1, (finish - span.start) // (len(partials) + 1))
                chunk = self.inv.event(
                    self.name, "model", [Part("text", text=text[:12])], branch=self.branch
                )
                chunk.partial = True
                chunk.state_delta = dict(delta)
            self.inv.now = max(self.inv.now + 1, finish)
        return self._model_event(
            span,
            [Part("text", text=text)],
            state_delta=state_delta or {},
            error_code=error_code,
            error_message=error_message,
            escalate=escalate,
        )

    def request(
        self, name: str, args: dict[str, Any], *, ms: int | None = None, long_running: bool = False
    ) -> Call:
        """One model call ending in a function call."""
        span = self._llm(ms)
        call_id = self.inv.world.ids.call()
        event = self._model_event(
            span,
            [Part("call", call_id=call_id, name=name, payload=args)],
            long_running=[call_id] if long_running else None,
        )
        call = Call(call_id, name, args, span, event)
        self.calls.append(call)
        if long_running:
            self.inv.paused = True
        return call

    def start_llm(self) -> None:
        """A model call that never returns (the worker dies or hangs during it)."""
        self.inv.llm_calls += 1
        self.inv.span("call_llm", self.span, agent=self.name)
        self.inv.now += self.inv.world.between(200, 900)

    # -- tools -------------------------------------------------------------------------------
    def _tool_span(self, call: Call) -> Span:
        span = self.inv.span("execute_tool", call.llm_span, agent=self.name)
        span.agent_span_id = self.span.span_id
        span.tool, span.call_id = call.name, call.call_id
        span.description = f"Tool {call.name}."
        return span

    def respond(
        self,
        call: Call,
        response: dict[str, Any],
        *,
        ms: int | None = None,
        state_delta: dict[str, Any] | None = None,
        transfer_to: str | None = None,
    ) -> Event:
        """The tool runs and its response event is appended."""
        span = self._tool_span(call)
        self.inv.now += self.inv.world.tool_ms() if ms is None else ms
        span.end = self.inv.now
        event = self.inv.event(
            self.name,
            "user",
            [Part("response", call_id=call.call_id, name=call.name, payload=response)],
            branch=self.branch,
            state_delta=state_delta or {},
            transfer_to_agent=transfer_to,
        )
        span.event_id = event.event_id
        return event

    def tool_error(self, call: Call, exc: str, message: str, *, ms: int | None = None) -> None:
        """The tool throws: error span, ``tool.error`` line, and no response event."""
        span = self._tool_span(call)
        self.inv.now += self.inv.world.tool_ms() if ms is None else ms
        span.end = self.inv.now
        span.error = (exc, message, message)
        self.inv.log(
            "ERROR",
            f"tool.error inv={self.inv.id} tool={call.name} call={call.call_id}",
            throwable=(f"{exc}: {message}", *frames(call.name)),
        )

    def start_tool(self, call: Call) -> None:
        """The tool starts and never returns (blocked read, or the worker dies)."""
        self._tool_span(call)
        self.inv.now += 1

    def tool(
        self,
        name: str,
        args: dict[str, Any],
        response: dict[str, Any],
        *,
        state_delta: dict[str, Any] | None = None,
        llm_ms: int | None = None,
        tool_ms: int | None = None,
    ) -> Call:
        call = self.request(name, args, ms=llm_ms)
        self.respond(call, response, ms=tool_ms, state_delta=state_delta)
        return call

    def transfer(self, to: str, *, ms: int | None = None) -> Agent:
        """``transfer_to_agent``: call, response with transferToAgent, nested agent span."""
        call = self.request("transfer_to_agent", {"agent_name": to}, ms=ms)
        self.respond(call, {}, ms=self.inv.world.between(1, 5), transfer_to=to)
        return self.inv.agent(to, parent=self)

    def sub(self, name: str) -> Agent:
        """A sub-agent run by this workflow agent (Sequential/Loop). It keeps the parent's
        branch: ADK extends a branch only under a ParallelAgent (Java ``BaseAgent``
        ``createInvocationContext``, Python ``ParallelAgent``), so a loop's events carry none."""
        return self.inv.agent(name, parent=self, branch=self.branch)

    def end(self) -> None:
        self.inv.now += 1
        self.span.end = self.inv.now
        if self in self.inv.stack:
            self.inv.stack.remove(self)


def frames(tool: str | None = None) -> tuple[str, ...]:
    if tool:
        return (
            f"\tat com.example.agent.tools.{_camel(tool)}Tool.call({_camel(tool)}Tool.java:57)",
            "\tat com.google.adk.tools.FunctionTool.runAsync(FunctionTool.java:231)",
            "\t... 18 common frames omitted",
        )
    return (
        "\tat com.google.adk.flows.llmflows.BaseLlmFlow.callLlm(BaseLlmFlow.java:448)",
        "\tat io.reactivex.rxjava3.internal.operators.flowable.FlowableDefer.subscribeActual"
        "(FlowableDefer.java:35)",
        "\t... 41 common frames omitted",
    )


def _camel(name: str) -> str:
    return "".join(word[:1].upper() + word[1:] for word in name.split("_"))
