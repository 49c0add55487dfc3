"""A local stand-in for the Vertex AI Agent Engine sessions API, for the conformance test.

ADK Python's real ``VertexAiSessionService`` and the real ``agentplatform`` SDK talk to it over
HTTP, so the requests are exactly what they send to Google. The server keeps what the API
keeps and answers as its REST JSON does (proto3 JSON: lowerCamelCase field names, RFC 3339
times in UTC with a ``Z``, ``Struct`` contents such as ``stateDelta`` and ``rawEvent`` as they
were sent), with ``sessions.events.list`` in pages of :data:`PAGE` and a ``nextPageToken``.
Every response body it sends is kept in :attr:`AgentEngine.responses`, and the pages of each
session's latest listing in :attr:`AgentEngine.listings`: a user's saved files.

Served: ``sessions.create`` (a done operation), ``sessions.get``, ``events:appendEvent``
(applies the delta to ``sessionState``, as the service does) and ``events.list``.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

PAGE = 3
_PATH = re.compile(
    r"^/v1beta1/(?P<engine>reasoningEngines/[^/]+)/sessions(?:/(?P<session>[^/:]+))?"
    r"(?P<verb>:appendEvent|/events)?$"
)
_CAMEL = {  # proto field names the SDK may send in snake_case; Struct contents stay as sent
    "skip_summarization": "skipSummarization",
    "state_delta": "stateDelta",
    "artifact_delta": "artifactDelta",
    "transfer_agent": "transferAgent",
    "requested_auth_configs": "requestedAuthConfigs",
    "long_running_tool_ids": "longRunningToolIds",
    "turn_complete": "turnComplete",
    "custom_metadata": "customMetadata",
    "grounding_metadata": "groundingMetadata",
}


def rfc3339(text: str) -> str:
    """A time as the API prints it: UTC with ``Z``, fractions to the µs when present."""
    stamp = datetime.fromisoformat(text).astimezone(UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S") + (
        f".{stamp.microsecond:06d}Z" if stamp.microsecond else "Z"
    )


def _camel(obj: dict[str, Any]) -> dict[str, Any]:
    return {_CAMEL.get(k, k): v for k, v in obj.items() if v is not None}


@dataclass
class AgentEngine:
    """The stored sessions and events, and every response body sent (by kind)."""

    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    responses: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    listings: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Per session, the pages of its latest ``events.list`` (what a user saves afterwards)."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    _next: int = 0

    def handle(self, method: str, url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        parsed = urlparse(url)
        match = _PATH.match(parsed.path)
        if match is None:
            return 404, {"error": {"code": 404, "message": f"no route {parsed.path}"}}
        base = f"{match['engine']}/sessions"
        with self.lock:
            if method == "POST" and match["session"] is None:
                return 200, self._create(base, body, parse_qs(parsed.query))
            name = f"{base}/{match['session']}"
            if name not in self.sessions:
                return 404, {"error": {"code": 404, "message": f"{name} not found"}}
            if method == "GET" and match["verb"] is None:
                return 200, self._sent("sessions.get", dict(self.sessions[name]))
            if method == "POST" and match["verb"] == ":appendEvent":
                return 200, self._append(name, body)
            if method == "GET" and match["verb"] == "/events":
                return 200, self._list(name, parse_qs(parsed.query))
        return 405, {"error": {"code": 405, "message": method}}

    def _sent(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        self.responses.append((kind, json.loads(json.dumps(body))))
        return body

    def _now(self) -> str:
        return rfc3339(datetime.now(UTC).isoformat())

    def _create(
        self, base: str, body: dict[str, Any], query: dict[str, list[str]]
    ) -> dict[str, Any]:
        self._next += 1
        session_id = (query.get("sessionId") or [body.get("sessionId") or f"{self._next:019d}"])[0]
        name = f"{base}/{session_id}"
        now = self._now()
        self.sessions[name] = {
            "name": name,
            "createTime": now,
            "updateTime": now,
            "userId": body.get("userId"),
            "sessionState": dict(body.get("sessionState") or {}),
        }
        self.events[name] = []
        return {
            "name": f"{name}/operations/{self._next}",
            "done": True,
            "response": self.sessions[name],
        }

    def _append(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self._next += 1
        event = {"name": f"{name}/events/{self._next:019d}", **_camel(body)}
        event["timestamp"] = rfc3339(body["timestamp"])
        for key in ("actions", "eventMetadata"):
            if isinstance(event.get(key), dict):
                event[key] = _camel(event[key])
        self.events[name].append(event)
        session = self.sessions[name]
        delta = (event.get("actions") or {}).get("stateDelta") or {}
        for key, value in delta.items():
            if value is None:
                session["sessionState"].pop(key, None)
            else:
                session["sessionState"][key] = value
        session["updateTime"] = self._now()
        return {}

    def _list(self, name: str, query: dict[str, list[str]]) -> dict[str, Any]:
        start = int((query.get("pageToken") or ["0"])[0])
        events = self.events[name]
        page: dict[str, Any] = {"sessionEvents": events[start : start + PAGE]}
        if start + PAGE < len(events):
            page["nextPageToken"] = str(start + PAGE)
        if not page["sessionEvents"]:
            page = {}  # the API answers an empty list with an empty object
        if start == 0:
            self.listings[name] = []
        self.listings[name].append(json.loads(json.dumps(page)))
        return self._sent("sessions.events.list", page)


@contextmanager
def serve() -> Iterator[tuple[str, AgentEngine]]:
    """Run an :class:`AgentEngine` on a free local port; its base URL and the engine."""
    engine = AgentEngine()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _reply(self) -> None:
            size = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(size) or b"{}") if size else {}
            status, reply = engine.handle(self.command, self.path, body)
            data = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _reply  # noqa: N815 (http.server's method names)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", engine
    finally:
        server.shutdown()
        server.server_close()
