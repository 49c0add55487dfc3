"""ADK Java's ``FirestoreSessionService`` (contrib), exported, into ADK event records.

The service's layout (``contrib/firestore-session-service``: ``FirestoreSessionService``,
``utils/Constants``): ``<root>/{userId}/sessions/{sessionId}`` documents (``id``,
``appName``, ``userId``, ``updateTime`` as ISO text, ``state``), each with a ``user-event``
subcollection of events, and ``app-state/{app}`` and ``user-state/{app}/users/{user}`` for
the keys an agent writes as ``_app_x`` and ``_user_x`` (stored without the prefix). The root
collection is configurable (``adk-session`` by default), so documents are recognised by
the shape of their path, not by its first name.

Read as exported:

- Firestore REST JSON: documents (``name`` ``projects/.../documents/<path>``, ``fields`` of
  typed values), ``documents.list`` pages (``{"documents": [...]}``), ``runQuery`` results
  (``[{"document": {...}}, ...]``) and ``batchGet`` results (``{"found": {...}}``);
- the ``__collections__`` tree that export tools such as ``firestore-export`` write
  (``{"__collections__": {"adk-session": {"<user>": {"__collections__": ...}}}}``).

The service keeps little of an event: ``author`` (``"user"`` replaced by the user id),
``timestamp`` (ISO text), ``appName`` and ``content.parts`` with only text, ``functionCall``
``{name, args}`` and ``functionResponse`` ``{name, response}`` (both without ids) and
``fileData``. No invocation id, no actions (so no state deltas, transfers or escalations, and
none of ADK 2.x's markers: every event's ``kind`` is ``turn``), no error fields, no partial or
turn flags. The kit reads what there is: an event's id is its Firestore document id, an
author equal to the session's user reads as ``user`` (as the service's own reader gives the
turn the user role), and every flow says what such events cannot tell (:data:`LIMITS`).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from incidentkit.frames import StateScope, empty
from incidentkit.sources.events import session_state
from incidentkit.sources.events.adk_events import Batch, Origin
from incidentkit.sources.events.vertex import time_and_reason, update_time
from incidentkit.sources.loaded import RejectSink

FORMAT = "firestore-json"
ORIGIN = Origin(FORMAT, "s", python=False, invocations=False)
EVENTS = "user-event"
SESSIONS = "sessions"
APP_STATE = "app-state"
USER_STATE = "user-state"
LIMITS = (
    "its events carry no invocation ids, so runs cannot be told apart",
    "it keeps no event actions, so no state deltas, transfers or escalations, and no ADK 2.x "
    "markers (compactions, rewinds, checkpoints): every event reads as a turn",
    "its function calls and responses carry no ids, so they pair by name and order only",
    "it keeps no error codes, so model errors show only as function responses",
)
"""What a Firestore export cannot tell, in words a flow repeats."""
_TREE = "__collections__"


def value_of(value: Any) -> Any:
    """The plain JSON of a Firestore REST ``Value`` (``{"stringValue": "x"}`` → ``"x"``)."""
    if not isinstance(value, dict) or len(value) != 1:
        return value
    ((kind, inner),) = value.items()
    if kind == "mapValue":
        fields = inner.get("fields", {}) if isinstance(inner, dict) else {}
        return {k: value_of(v) for k, v in fields.items()} if isinstance(fields, dict) else fields
    if kind == "arrayValue":
        items = inner.get("values", []) if isinstance(inner, dict) else []
        return [value_of(v) for v in items] if isinstance(items, list) else items
    if kind == "integerValue":
        try:
            return int(inner)
        except (TypeError, ValueError):
            return inner
    if kind == "nullValue":
        return None
    if kind == "bytesValue" and isinstance(inner, str):
        try:
            return base64.b64decode(inner, validate=True).decode("utf-8")
        except ValueError:  # binascii.Error and UnicodeDecodeError are ValueErrors
            return inner
    if kind in _SCALARS:
        return inner
    return value


_SCALARS = frozenset(
    {
        "stringValue",
        "booleanValue",
        "doubleValue",
        "timestampValue",
        "referenceValue",
        "geoPointValue",
    }
)


def kind(record: Any) -> str | None:
    """``"document"``, ``"page"``, ``"query"``, ``"found"`` or ``"tree"`` for Firestore
    export JSON, None for anything else."""
    if not isinstance(record, dict):
        return None
    if isinstance(record.get(_TREE), dict):
        return "tree"
    if isinstance(record.get("documents"), list):
        return "page"
    if isinstance(record.get("document"), dict) or set(record) == {"readTime"}:
        return "query"
    if isinstance(record.get("found"), dict) or "missing" in record:
        return "found"
    name = record.get("name")
    if (
        isinstance(name, str)
        and "/documents/" in name
        and isinstance(record.get("fields", {}), dict)
    ):
        return "document"
    return None


def is_firestore(records: list[Any]) -> bool:
    """Whether the first record is Firestore export JSON."""
    return bool(records) and kind(records[0]) is not None


def documents(record: dict[str, Any], location: str) -> Iterator[tuple[list[str], Any, str]]:
    """(path segments, fields as plain JSON, location) of each document in one record."""
    what = kind(record)
    if what == "document":
        path = str(record["name"]).split("/documents/", 1)[1].split("/")
        fields = record.get("fields", {})
        yield path, {k: value_of(v) for k, v in fields.items()}, location
    elif what == "page":
        for i, doc in enumerate(record["documents"]):
            if isinstance(doc, dict) and kind(doc) == "document":
                yield from documents(doc, f"{location}:documents[{i}]")
            else:
                yield [], doc, f"{location}:documents[{i}]"
    elif what in ("query", "found"):
        doc = record.get("document", record.get("found"))
        if isinstance(doc, dict):
            yield from documents(doc, location)
    elif what == "tree":
        yield from _tree(record[_TREE], [], location)


def _tree(
    collections: Any, parent: list[str], location: str
) -> Iterator[tuple[list[str], Any, str]]:
    if not isinstance(collections, dict):
        return
    for collection, docs in collections.items():
        if not isinstance(docs, dict):
            continue
        for doc_id, doc in docs.items():
            path = [*parent, str(collection), str(doc_id)]
            where = f"{location}:{'/'.join(path)}"
            if not isinstance(doc, dict):
                yield path, doc, where
                continue
            fields = {k: v for k, v in doc.items() if k != _TREE}
            if fields:
                yield path, fields, where
            yield from _tree(doc.get(_TREE), path, location)


@dataclass
class Store:
    """The documents of an export, sorted by what they are in the service's layout."""

    sessions: dict[tuple[str, str], tuple[dict[str, Any], str]] = field(default_factory=dict)
    events: list[tuple[str, str, str, Any, str]] = field(default_factory=list)
    app_states: list[tuple[str, Any, str]] = field(default_factory=list)
    user_states: list[tuple[str, str, Any, str]] = field(default_factory=list)
    skipped: int = 0

    def add(self, path: list[str], fields: Any, location: str, sink: RejectSink) -> None:
        """File one document by its path; a document that is not an object is a reject."""
        if not isinstance(fields, dict):
            sink.add(location, "a Firestore document is not a JSON object", str(fields)[:500])
            return
        n = len(path)
        if n >= 5 and path[-2] == EVENTS and path[-4] == SESSIONS:
            self.events.append((path[-5], path[-3], path[-1], fields, location))
        elif n >= 3 and path[-2] == SESSIONS:
            self.sessions[(path[-3], path[-1])] = (fields, location)
        elif n == 2 and path[0] == APP_STATE:
            self.app_states.append((path[1], fields, location))
        elif n == 4 and path[0] == USER_STATE and path[2] == "users":
            self.user_states.append((path[1], path[3], fields, location))
        else:
            self.skipped += 1

    def batch(self) -> Batch:
        """The events of the export, each with its session's keys."""
        values: list[Any] = []
        meta: dict[str, list[Any]] = {
            key: [] for key in ("location", "app_name", "user_id", "session_id", "ts_reason")
        }
        for user, session, event_id, fields, location in self.events:
            doc = self.sessions.get((user, session), ({}, ""))[0]
            app = fields.get("appName", doc.get("appName"))
            author = fields.get("author")
            if isinstance(author, str) and author.casefold() == user.casefold():
                author = "user"
            stamp, why = time_and_reason(fields.get("timestamp"))
            event = {
                "id": event_id,
                "author": author,
                "timestamp": stamp,
                "content": fields.get("content"),
            }
            values.append(event)
            meta["location"].append(location)
            meta["ts_reason"].append(why)
            meta["app_name"].append(app if isinstance(app, str) and app else None)
            meta["user_id"].append(user)
            meta["session_id"].append(session)
        return Batch(pd.Series(values, dtype=object), pd.DataFrame(meta, dtype=object), ORIGIN)

    def state(self, sink: RejectSink) -> pd.DataFrame:
        """The ``session_state`` rows: each session's ``state``, then app and user state."""
        parts: list[pd.DataFrame] = []
        for (user, session), (doc, location) in self.sessions.items():
            app = doc.get("appName")
            if not isinstance(app, str) or not app:
                sink.add(location, "a session document without appName", str(doc)[:500])
                continue
            parts.append(
                _rows(
                    doc.get("state"),
                    app,
                    user,
                    session,
                    None,
                    doc.get("updateTime"),
                    location,
                    sink,
                )
            )
        for app, doc, location in self.app_states:
            parts.append(_rows(doc, app, "", "", StateScope.APP, None, location, sink))
        for app, user, doc, location in self.user_states:
            parts.append(_rows(doc, app, user, "", StateScope.USER, None, location, sink))
        kept = [part for part in parts if not part.empty]
        return pd.concat(kept, ignore_index=True) if kept else empty("session_state")


_PREFIX = {StateScope.APP: "_app_", StateScope.USER: "_user_"}
"""How an agent writes the keys the service keeps in app and user documents."""


def _rows(
    state: Any,
    app: str,
    user: str,
    session: str,
    scope: StateScope | None,
    updated: Any,
    location: str,
    sink: RejectSink,
) -> pd.DataFrame:
    """``session_state`` rows of one state map; app and user keys as the agent writes them
    (the service strips the prefix), a session's own keys scoped by their prefix."""
    if scope is not None and isinstance(state, dict):
        state = {_PREFIX[scope] + str(key): value for key, value in state.items()}
    return session_state.from_document(
        state,
        app_name=app,
        user_id=user,
        session_id=session,
        updated_at=update_time(updated, location, sink, text="ISO 8601"),
        source="Firestore session state",
        location=location,
        sink=sink,
        scope=scope,
    )


def read(records: list[Any], locations: list[str], store: Store, sink: RejectSink) -> None:
    """File every document of decoded export records into ``store``."""
    for record, location in zip(records, locations, strict=True):
        if kind(record) is None:
            sink.add(
                location,
                "not a Firestore export record (a document, a documents page, a runQuery "
                "result or a __collections__ tree)",
                str(record)[:500],
            )
            continue
        for path, fields, where in documents(record, location):
            if not path:
                sink.add(where, "not a Firestore document (name and fields)", str(fields)[:500])
            else:
                store.add(path, fields, where, sink)


def limits_warning(store: Store) -> str:
    """The warning a Firestore export always carries."""
    return (
        f"{len(store.events)} events from a Firestore export (ADK Java FirestoreSessionService): "
        + "; ".join(LIMITS)
    )
