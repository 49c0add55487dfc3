"""ADK Java shapes: ``Event.toJson()`` and the Java tracer's span names and attribute keys."""

from __future__ import annotations

from typing import Any

from incidentkit.simulate.model import REMOVED, Event, Part, Span

SENTINEL = "__ADK_SENTINEL_REMOVED__"
EMPTY = "{}"  # JSON span payloads with ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS=false


def part(p: Part) -> dict[str, Any]:
    if p.kind == "text":
        return {"text": p.text}
    if p.kind == "call":
        return {"functionCall": {"args": p.payload, "id": p.call_id, "name": p.name}}
    return {"functionResponse": {"id": p.call_id, "name": p.name, "response": p.payload}}


def event(e: Event) -> dict[str, Any]:
    """``Event.toJson()``: camelCase, epoch-millisecond ``timestamp``, empty Optionals omitted."""
    out: dict[str, Any] = {"id": e.event_id, "invocationId": e.invocation_id, "author": e.author}
    if e.parts:
        out["content"] = {"parts": [part(p) for p in e.parts], "role": e.role}
    actions: dict[str, Any] = {
        "stateDelta": {k: SENTINEL if v is REMOVED else v for k, v in e.state_delta.items()},
        "artifactDelta": {},
    }
    if e.transfer_to_agent is not None:
        actions["transferToAgent"] = e.transfer_to_agent
    if e.escalate is not None:
        actions["escalate"] = e.escalate
    actions["requestedAuthConfigs"] = {}
    actions["requestedToolConfirmations"] = {}
    out["actions"] = actions
    if e.long_running:
        out["longRunningToolIds"] = list(e.long_running)
    if e.partial is not None:
        out["partial"] = e.partial
    if e.error_code is not None:
        out["errorCode"] = e.error_code
    if e.model and not e.partial:
        out["finishReason"] = e.error_code or "STOP"
    if e.error_message is not None:
        out["errorMessage"] = e.error_message
    if e.model:
        prompt, candidates = e.tokens
        out["usageMetadata"] = {
            "promptTokenCount": prompt,
            "candidatesTokenCount": candidates,
            "totalTokenCount": prompt + candidates,
        }
    if e.branch is not None:
        out["branch"] = e.branch
    out["timestamp"] = e.ts
    return out


def dump_line(e: Event) -> dict[str, Any]:
    """One line of the JSONL dump: the event plus appName, userId and sessionId."""
    out = event(e)
    out["appName"] = e.app
    out["userId"] = e.user
    out["sessionId"] = e.session
    return out


def s_attr(key: str, value: str) -> dict[str, Any]:
    return {"key": key, "value": {"stringValue": value}}


def i_attr(key: str, value: int) -> dict[str, Any]:
    return {"key": key, "value": {"intValue": str(value)}}


def a_attr(key: str, values: list[str]) -> dict[str, Any]:
    return {
        "key": key,
        "value": {"arrayValue": {"values": [{"stringValue": v} for v in values]}},
    }


def otlp_span(
    sp: Span, name: str, parent: str | None, attributes: list[dict[str, Any]], error: Any
) -> dict[str, Any]:
    """An OTLP/JSON span: hex ids, int64 times as decimal strings, status and exception."""
    assert sp.end is not None
    out: dict[str, Any] = {"traceId": sp.trace_id, "spanId": sp.span_id}
    if parent:
        out["parentSpanId"] = parent
    out.update(
        {
            "flags": 256,
            "name": name,
            "kind": 1,
            "startTimeUnixNano": f"{sp.start}000000",
            "endTimeUnixNano": f"{sp.end}000000",
            "attributes": attributes,
        }
    )
    if error is None:
        out["status"] = {}
    else:
        exc_type, exc_message, status_message = error
        out["events"] = [
            {
                "timeUnixNano": f"{sp.end}000000",
                "name": "exception",
                "attributes": [
                    s_attr("exception.type", exc_type),
                    s_attr("exception.message", exc_message),
                ],
            }
        ]
        out["status"] = {"message": status_message, "code": 2}
    return out


_OP_AGENT = s_attr("gen_ai.operation.name", "invoke_agent")
_OP_LLM = s_attr("gen_ai.operation.name", "call_llm")
_OP_TOOL = s_attr("gen_ai.operation.name", "execute_tool")
_SYSTEM = s_attr("gen_ai.system", "gcp.vertex.agent")
_REQUEST = s_attr("gcp.vertex.agent.llm_request", EMPTY)
_RESPONSE = s_attr("gcp.vertex.agent.llm_response", EMPTY)
_ARGS = s_attr("gcp.vertex.agent.tool_call_args", EMPTY)
_RESULT = s_attr("gcp.vertex.agent.tool_response", EMPTY)
_TOOL_TYPE = s_attr("gen_ai.tool.type", "FunctionTool")
_FINISH = a_attr("gen_ai.response.finish_reasons", ["stop"])


def span(sp: Span) -> dict[str, Any]:
    """Java span names: invocation → invoke_agent <agent> → call_llm → execute_tool <tool>."""
    if sp.kind == "invocation":
        return otlp_span(sp, "invocation", None, [], sp.error)
    if sp.kind == "invoke_agent":
        attrs = [
            _OP_AGENT,
            s_attr("gen_ai.agent.name", sp.agent),
            s_attr("gen_ai.agent.description", sp.description),
            s_attr("gen_ai.conversation.id", sp.session_id),
        ]
        return otlp_span(sp, f"invoke_agent {sp.agent}", sp.parent_id, attrs, sp.error)
    if sp.kind == "call_llm":
        prompt, output = sp.tokens
        attrs = [
            _SYSTEM,
            _OP_LLM,
            s_attr("gen_ai.request.model", sp.model),
            s_attr("gcp.vertex.agent.invocation_id", sp.invocation_id),
            s_attr("gcp.vertex.agent.event_id", sp.java_event_id),
            s_attr("gcp.vertex.agent.session_id", sp.session_id),
            _REQUEST,
            _RESPONSE,
            i_attr("gen_ai.usage.input_tokens", prompt),
            i_attr("gen_ai.usage.output_tokens", output),
            _FINISH,
        ]
        return otlp_span(sp, "call_llm", sp.parent_id, attrs, sp.error)
    attrs = [
        _OP_TOOL,
        s_attr("gen_ai.tool.name", sp.tool),
        s_attr("gen_ai.tool.description", sp.description),
        _TOOL_TYPE,
        _ARGS,
        s_attr("gcp.vertex.agent.event_id", sp.event_id),
        s_attr("gen_ai.tool_call.id", sp.call_id),
        _RESULT,
        _REQUEST,
        _RESPONSE,
    ]
    return otlp_span(sp, f"execute_tool {sp.tool}", sp.parent_id, attrs, sp.error)


def resource_spans(service: str, spans: list[dict[str, Any]]) -> dict[str, Any]:
    """One collector file-exporter line (``ExportTraceServiceRequest``)."""
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [s_attr("service.name", service)]},
                "scopeSpans": [{"scope": {"name": "gcp.vertex.agent"}, "spans": spans}],
            }
        ]
    }
