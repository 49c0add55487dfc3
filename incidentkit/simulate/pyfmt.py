"""ADK Python 2.x shapes: ``DatabaseSessionService`` v1 ``event_data`` and semconv-2 spans.

Python stores no partial event and no ``temp:`` key (the session service trims them), has no
deletion sentinel (a removed key is stored as null), writes float-second timestamps and
naive-UTC ``timestamp`` columns, and persists the ``LlmCallsLimitExceededError`` event.
"""

from __future__ import annotations

from typing import Any

from incidentkit.simulate.javafmt import EMPTY, a_attr, i_attr, otlp_span, s_attr
from incidentkit.simulate.model import REMOVED, Event, Part, Span

LIMIT_PY = "Max number of llm calls limit of `{}` exceeded"


def stored(e: Event) -> bool:
    """Whether ADK Python's runner appends this event to the session store."""
    return not e.partial and e.only != "adk-java"


def durable_delta(e: Event) -> dict[str, Any]:
    """The state delta as stored: temp: keys trimmed, removals as null."""
    return {
        k: None if v is REMOVED else v
        for k, v in e.state_delta.items()
        if not k.startswith("temp:")
    }


def part(p: Part) -> dict[str, Any]:
    if p.kind == "text":
        return {"text": p.text}
    if p.kind == "call":
        return {"function_call": {"id": p.call_id, "args": p.payload, "name": p.name}}
    return {"function_response": {"id": p.call_id, "name": p.name, "response": p.payload}}


def event(e: Event) -> dict[str, Any]:
    """``event.model_dump(exclude_none=True, mode="json")``: snake_case, float seconds."""
    out: dict[str, Any] = {}
    if e.parts:
        out["content"] = {"parts": [part(p) for p in e.parts], "role": e.role}
    if e.model:
        prompt, candidates = e.tokens
        out["finish_reason"] = e.error_code or "STOP"
        out["usage_metadata"] = {
            "candidates_token_count": candidates,
            "prompt_token_count": prompt,
            "total_token_count": prompt + candidates,
        }
    if e.error_code is not None:
        out["error_code"] = e.error_code
    if e.error_message is not None:
        out["error_message"] = e.error_message
    out["invocation_id"] = e.invocation_id
    out["author"] = e.author
    actions: dict[str, Any] = {"state_delta": durable_delta(e), "artifact_delta": {}}
    if e.transfer_to_agent is not None:
        actions["transfer_to_agent"] = e.transfer_to_agent
    if e.escalate is not None:
        actions["escalate"] = e.escalate
    actions["requested_auth_configs"] = {}
    actions["requested_tool_confirmations"] = {}
    out["actions"] = actions
    out["node_info"] = {"path": "" if e.author == "user" else f"{e.author}@1"}
    if any(p.kind == "call" for p in e.parts):
        out["long_running_tool_ids"] = sorted(e.long_running or [])
    if e.branch is not None:
        out["branch"] = e.branch
    out["id"] = e.event_id
    out["timestamp"] = e.ts / 1000
    return out


def _error(sp: Span) -> Any:
    if sp.error is None:
        return None
    if sp.limit is not None:
        message = LIMIT_PY.format(sp.limit)
        return ("LlmCallsLimitExceededError", message, f"LlmCallsLimitExceededError: {message}")
    return sp.error


def span(sp: Span) -> dict[str, Any]:
    """Python 2.x names: invoke_workflow → invoke_agent → generate_content / execute_tool."""
    conversation = s_attr("gen_ai.conversation.id", sp.session_id)
    if sp.kind == "invocation":
        attrs = [
            s_attr("gen_ai.operation.name", "invoke_workflow"),
            s_attr("gen_ai.workflow.name", sp.root_agent),
            conversation,
        ]
        return otlp_span(sp, f"invoke_workflow {sp.root_agent}", None, attrs, _error(sp))
    if sp.kind == "invoke_agent":
        attrs = [
            s_attr("gen_ai.operation.name", "invoke_agent"),
            s_attr("gen_ai.agent.name", sp.agent),
            s_attr("gen_ai.agent.description", sp.description),
            conversation,
        ]
        return otlp_span(sp, f"invoke_agent {sp.agent}", sp.parent_id, attrs, _error(sp))
    if sp.kind == "call_llm":
        prompt, output = sp.tokens
        attrs = [
            s_attr("gen_ai.operation.name", "generate_content"),
            s_attr("gen_ai.provider.name", "gcp.gemini"),
            s_attr("gen_ai.request.model", sp.model),
            s_attr("gen_ai.agent.name", sp.agent),
            conversation,
            s_attr("gcp.vertex.agent.invocation_id", sp.invocation_id),
            s_attr("gcp.vertex.agent.event_id", sp.event_id),
            i_attr("gen_ai.usage.input_tokens", prompt),
            i_attr("gen_ai.usage.output_tokens", output),
            a_attr("gen_ai.response.finish_reasons", ["stop"]),
        ]
        return otlp_span(sp, f"generate_content {sp.model}", sp.parent_id, attrs, _error(sp))
    attrs = [
        s_attr("gen_ai.operation.name", "execute_tool"),
        s_attr("gen_ai.tool.name", sp.tool),
        s_attr("gen_ai.tool.description", sp.description),
        s_attr("gen_ai.tool.type", "FunctionTool"),
        s_attr("gen_ai.agent.name", sp.agent),
        s_attr("gen_ai.tool.call.id", sp.call_id),
        s_attr("gcp.vertex.agent.event_id", sp.event_id),
        s_attr("gcp.vertex.agent.invocation_id", sp.invocation_id),
        conversation,
        s_attr("gcp.vertex.agent.tool_call_args", EMPTY),
        s_attr("gcp.vertex.agent.tool_response", EMPTY),
    ]
    return otlp_span(sp, f"execute_tool {sp.tool}", sp.agent_span_id, attrs, _error(sp))
