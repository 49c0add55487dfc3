"""Session stores behind an API, as their users save them: the pack's ADK Java events
rewritten as Vertex AI Agent Engine API JSON or as a Firestore export.

- ``vertex-ai``: what ADK Java's ``VertexAiSessionService`` stores (``SessionJsonConverter``)
  and the sessions API returns: ``vertex/sessions.jsonl`` holds one ``sessions.get`` response
  per session (``userId``, ``sessionState``, ``updateTime``), ``vertex/events.jsonl`` the pages
  of ``sessions.events.list`` of every session, one page (at most :data:`PAGE` events, with a
  ``nextPageToken`` but on the last) per line. Each app is one reasoning engine; the app
  profiles name it (``reasoning_engine``).
- ``firestore``: what ADK Java's ``FirestoreSessionService`` stores, as Firestore's REST API
  lists it: ``firestore.jsonl``, one ``documents.list`` page per session (the session
  document, then its ``user-event`` documents), typed values and all, and the app-state and
  user-state documents of the keys the agents write as ``_app_``/``_user_``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from incidentkit.simulate.javafmt import SENTINEL
from incidentkit.simulate.writers import compact

FORMATS = ("vertex-ai", "firestore")
PAGE = 100
PROJECT = "projects/incident-sim/locations/us-central1"
FIRESTORE_ROOT = "projects/incident-sim/databases/(default)/documents"
SESSION_ROOT = "adk-session"


def engine_of(app: str) -> str:
    """A stable numeric reasoning engine id for a simulated app."""
    return str(int(hashlib.sha256(app.encode()).hexdigest()[:15], 16))


def instant(ms: int) -> str:
    """Java's ``Instant.toString()`` of epoch milliseconds: fractions only when present."""
    stamp = datetime.fromtimestamp(ms / 1000, tz=UTC)
    text = stamp.strftime("%Y-%m-%dT%H:%M:%S")
    return text + (f".{ms % 1000:03d}Z" if ms % 1000 else "Z")


def _sessions(events_path: Path) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """The pack's event lines by session, in file order."""
    out: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    with events_path.open(encoding="utf-8") as lines:
        for line in lines:
            e = json.loads(line)
            key = (e.pop("appName"), e.pop("userId"), e.pop("sessionId"))
            out.setdefault(key, []).append(e)
    for events in out.values():
        events.sort(key=lambda e: e["timestamp"])  # the store lists a session's events by time
    return out


def _state(events: list[dict[str, Any]], *, drop: tuple[str, ...]) -> dict[str, Any]:
    """A session's state after its events (removed keys gone; ``drop`` prefixes left out)."""
    state: dict[str, Any] = {}
    for e in events:
        if e.get("partial"):
            continue
        for key, value in e.get("actions", {}).get("stateDelta", {}).items():
            if key.startswith(drop):
                continue
            if value == SENTINEL:
                state.pop(key, None)
            else:
                state[key] = value
    return state


def write(folder: Path, fmt: str) -> tuple[list[str], list[str]]:
    """Rewrite ``folder/events.jsonl`` in ``fmt``; the files written and the ``[events]``
    manifest lines."""
    source = folder / "events.jsonl"
    sessions = _sessions(source)
    source.unlink()
    if fmt == "vertex-ai":
        return _write_vertex(folder, sessions)
    return _write_firestore(folder, sessions)


# -- Vertex AI Agent Engine ----------------------------------------------------------------------


def vertex_event(e: dict[str, Any], session_name: str) -> dict[str, Any]:
    """``SessionJsonConverter.convertEventToJson`` of one ADK Java event, as the API returns it."""
    wire: dict[str, Any] = {
        "name": f"{session_name}/events/{e['id']}",
        "author": e["author"],
        "invocationId": e["invocationId"],
        "timestamp": instant(e["timestamp"]),
    }
    if "content" in e:
        wire["content"] = e["content"]
    for key in ("errorCode", "errorMessage"):
        if key in e:
            wire[key] = e[key]
    metadata: dict[str, Any] = {
        key: e[key]
        for key in ("partial", "turnComplete", "interrupted", "branch", "usageMetadata")
        if key in e
    }
    if e.get("longRunningToolIds"):
        metadata["longRunningToolIds"] = e["longRunningToolIds"]
    wire["eventMetadata"] = metadata
    given = e.get("actions", {})
    actions: dict[str, Any] = {
        "stateDelta": {
            k: None if v == SENTINEL else v for k, v in given.get("stateDelta", {}).items()
        },
        "artifactDelta": given.get("artifactDelta", {}),
    }
    if "transferToAgent" in given:
        actions["transferAgent"] = given["transferToAgent"]
    if "escalate" in given:
        actions["escalate"] = given["escalate"]
    wire["actions"] = actions
    return wire


def _pages(events: list[dict[str, Any]], session_name: str) -> Iterator[dict[str, Any]]:
    for start in range(0, len(events), PAGE):
        page: dict[str, Any] = {
            "sessionEvents": [vertex_event(e, session_name) for e in events[start : start + PAGE]]
        }
        if start + PAGE < len(events):
            token = hashlib.sha256(f"{session_name}:{start + PAGE}".encode()).hexdigest()[:24]
            page["nextPageToken"] = token
        yield page


def _write_vertex(
    folder: Path, sessions: dict[tuple[str, str, str], list[dict[str, Any]]]
) -> tuple[list[str], list[str]]:
    target = folder / "vertex"
    target.mkdir(exist_ok=True)
    with (
        (target / "sessions.jsonl").open("w", encoding="utf-8", newline="\n") as docs,
        (target / "events.jsonl").open("w", encoding="utf-8", newline="\n") as pages,
    ):
        for (app, user, session), events in sorted(sessions.items()):
            name = f"{PROJECT}/reasoningEngines/{engine_of(app)}/sessions/{session}"
            first, last = instant(events[0]["timestamp"]), instant(events[-1]["timestamp"])
            doc = {
                "name": name,
                "createTime": first,
                "updateTime": last,
                "userId": user,
                "sessionState": _state(events, drop=("temp:",)),
            }
            docs.write(compact(doc) + "\n")
            for page in _pages(events, name):
                pages.write(compact(page) + "\n")
    files = ["vertex/events.jsonl", "vertex/sessions.jsonl"]
    lines = [
        'paths = ["vertex/sessions.jsonl", "vertex/events.jsonl"]',
        'format = "vertex-ai-json"',
    ]
    return files, lines


# -- Firestore -----------------------------------------------------------------------------------


def typed(value: Any) -> dict[str, Any]:
    """A Firestore REST ``Value`` of plain JSON."""
    if value is None:
        return {"nullValue": None}
    if isinstance(value, bool):
        return {"booleanValue": value}
    if isinstance(value, int):
        return {"integerValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, list):
        return (
            {"arrayValue": {"values": [typed(v) for v in value]}} if value else {"arrayValue": {}}
        )
    return {"mapValue": {"fields": {str(k): typed(v) for k, v in value.items()}}}


def _document(path: str, fields: dict[str, Any], time: str) -> dict[str, Any]:
    return {
        "name": f"{FIRESTORE_ROOT}/{path}",
        "fields": {k: typed(v) for k, v in fields.items()},
        "createTime": time,
        "updateTime": time,
    }


def firestore_event(e: dict[str, Any], *, app: str, user: str) -> dict[str, Any]:
    """``FirestoreSessionService.eventToMap`` of one ADK Java event: what it keeps."""
    parts: list[dict[str, Any]] = []
    for part in e.get("content", {}).get("parts", []):
        if "text" in part:
            parts.append({"text": part["text"]})
        elif "functionCall" in part:
            call = part["functionCall"]
            parts.append({"functionCall": {"name": call["name"], "args": call.get("args", {})}})
        elif "functionResponse" in part:
            response = part["functionResponse"]
            kept = {"name": response["name"], "response": response.get("response", {})}
            parts.append({"functionResponse": kept})
    return {
        "author": user if e["author"] == "user" else e["author"],
        "timestamp": instant(e["timestamp"]),
        "appName": app,
        "content": {"parts": parts},
    }


def _event_id(e: dict[str, Any]) -> str:
    """A Firestore auto id (20 characters) for an event: stable for the same event."""
    return hashlib.sha256(e["id"].encode()).hexdigest()[:20]


def _write_firestore(
    folder: Path, sessions: dict[tuple[str, str, str], list[dict[str, Any]]]
) -> tuple[list[str], list[str]]:
    app_state: dict[str, dict[str, Any]] = {}
    user_state: dict[tuple[str, str], dict[str, Any]] = {}
    with (folder / "firestore.jsonl").open("w", encoding="utf-8", newline="\n") as out:
        for (app, user, session), events in sorted(sessions.items()):
            path = f"{SESSION_ROOT}/{user}/sessions/{session}"
            last = instant(events[-1]["timestamp"])
            session_fields = {
                "id": session,
                "appName": app,
                "userId": user,
                "updateTime": last,
                "state": _state(events, drop=("_app_", "_user_")),
            }
            docs = [_document(path, session_fields, last)]
            for e in events:
                if e.get("partial"):
                    continue  # the service stores only complete events
                fields = firestore_event(e, app=app, user=user)
                docs.append(
                    _document(f"{path}/user-event/{_event_id(e)}", fields, fields["timestamp"])
                )
                for key, value in e.get("actions", {}).get("stateDelta", {}).items():
                    if key.startswith("_app_"):
                        app_state.setdefault(app, {})[key[5:]] = value
                    elif key.startswith("_user_"):
                        user_state.setdefault((app, user), {})[key[6:]] = value
            out.write(compact({"documents": docs}) + "\n")
        shared = [
            _document(f"app-state/{app}", state, "") for app, state in sorted(app_state.items())
        ]
        shared += [
            _document(f"user-state/{app}/users/{user}", state, "")
            for (app, user), state in sorted(user_state.items())
        ]
        if shared:
            out.write(compact({"documents": shared}) + "\n")
    return ["firestore.jsonl"], ['path = "firestore.jsonl"', 'format = "firestore-json"']
