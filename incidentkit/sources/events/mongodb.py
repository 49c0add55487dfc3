"""ADK Python's MongoDB session stores, exported with ``mongoexport``, into ADK event records.

Each collection is exported to a file of its own (``mongoexport --collection=<name>``, JSON
lines or ``--jsonArray``, relaxed or canonical extended JSON). The services let their users
name the collections, so the kit tells which collection a file holds by its documents' shape,
never by the file's or the collection's name; a file whose documents have the shapes of two
collections is refused. Two services write these stores:

- ADK's own ``MongoDbSessionService`` (``google.adk.integrations.mongodb``, ADK 2.x):

  - sessions (``sessions``): ``_id {app_name, user_id, session_id}``, ``id``, ``app_name``,
    ``user_id``, ``state`` (JSON text: the session's own keys), ``create_time`` and
    ``update_time`` (epoch seconds), ``revision``;
  - events (``events``): ``_id {app_name, user_id, session_id, event_id}``, the three keys
    again, ``timestamp``, ``revision`` and ``event_data``, the whole event as JSON text
    (``Event.model_dump_json(exclude_none=True)``: snake_case, epoch seconds);
  - app state (``app_states``): ``_id`` the app name, ``state`` (JSON text, keys stored
    without ``app:``); user state (``user_states``): ``_id {app_name, user_id}``, ``state``
    (JSON text, keys without ``user:``).

- the community ``MongoSessionService`` (``google.adk_community.sessions``):

  - sessions (``sessions``): ``_id "session::<app>::<user>::<id>"``, ``id``, ``app_name``,
    ``user_id``, ``state`` (an object), ``last_update_time`` and the session's ``events``
    embedded as an array (``Event.model_dump(mode="json", exclude_none=True)``);
  - state (``session_state``): ``_id "app:<app>"`` or ``"user:<app>:<user>"``, with ``state``
    (an object, keys without their prefix).

Extended JSON reads as the plain JSON it stands for (:func:`plain`). Every document that fits
none of these shapes, or is not readable, is a reject at its ``file:line``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pandas as pd

from incidentkit.errors import SourceError
from incidentkit.frames import StateScope
from incidentkit.manifest import Filters
from incidentkit.sources.events import stored_state
from incidentkit.sources.events.adk_events import Batch, Origin
from incidentkit.sources.json_text import JSON_ERRORS, json_failure, loads
from incidentkit.sources.loaded import RejectSink
from incidentkit.times import parse_utc

FORMAT = "adk-mongodb-json"
ORIGIN = Origin(FORMAT, "s", python=True)
EVENTS = "events"
SESSIONS = "sessions"
APP_STATES = "app_states"
USER_STATES = "user_states"
EMBEDDED = "sessions with embedded events"
KEY_VALUE = "session_state"
SHAPES = (
    "MongoDbSessionService's sessions (id, app_name, user_id, state), events (event_data), "
    "app_states (_id: the app, state) or user_states (_id: {app_name, user_id}, state); the "
    "community MongoSessionService's sessions (id, app_name, user_id, events) or session_state "
    '(_id: "app:..." or "user:...", state)'
)
"""The documents the kit reads, in words for a reject or an error."""
_COMMUNITY_APP = "app:"
_COMMUNITY_USER = "user:"


# -- extended JSON -----------------------------------------------------------------------------


def plain(value: Any) -> Any:
    """The plain JSON of a value of MongoDB extended JSON (canonical, relaxed or the legacy
    mode of mongoexport before 4.2): ``$numberInt``/``$numberLong`` as integers,
    ``$numberDouble`` as a float (``NaN`` and the infinities too), ``$date`` as epoch seconds,
    ``$oid`` and ``$numberDecimal`` as their text, ``$symbol`` as text, ``$undefined`` as
    null. A wrapper whose value cannot be read, and the types ADK never writes (``$binary``,
    ``$timestamp``, ``$regularExpression``, ...), stay as they are: a field the kit reads then
    names them in its reject."""
    if isinstance(value, list):
        return [plain(item) for item in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        ((key, inner),) = value.items()
        if isinstance(key, str) and key.startswith("$"):
            return _scalar(key, inner, value)
    return {key: plain(item) for key, item in value.items()}


def _scalar(key: str, inner: Any, whole: dict[str, Any]) -> Any:
    """One extended-JSON wrapper's value, or ``whole`` when it is not one the kit reads."""
    if key in ("$numberInt", "$numberLong") and isinstance(inner, str):
        try:
            return int(inner, 10)
        except ValueError:
            return whole
    if key == "$numberDouble" and isinstance(inner, str):
        try:
            return float(inner)
        except ValueError:
            return whole
    if key == "$date":
        seconds = _date(inner)
        return whole if seconds is None else seconds
    if key in ("$oid", "$numberDecimal", "$symbol") and isinstance(inner, str):
        return inner
    if key == "$undefined" and inner is True:
        return None
    return whole


def _date(inner: Any) -> float | None:
    """Epoch seconds of a ``$date``: ISO 8601 text (relaxed), ``{"$numberLong": ms}``
    (canonical) or a number of milliseconds (legacy)."""
    if isinstance(inner, dict) and set(inner) == {"$numberLong"}:
        inner = plain(inner)
    if isinstance(inner, int) and not isinstance(inner, bool):
        return inner / 1000
    if isinstance(inner, str):
        try:
            stamp = datetime.fromisoformat(inner)
        except ValueError:
            return None
        return stamp.timestamp() if stamp.tzinfo is not None else None
    return None


# -- documents ---------------------------------------------------------------------------------


def kind(doc: Any) -> str | None:
    """Which collection a (plain) document belongs to, by its shape; None for none the kit
    reads."""
    if not isinstance(doc, dict):
        return None
    if "event_data" in doc:
        return EVENTS
    if "events" in doc and "id" in doc:
        return EMBEDDED
    ident = doc.get("_id")
    if "state" in doc and "id" not in doc and "app_name" not in doc:
        if isinstance(ident, dict) and "app_name" in ident and "user_id" in ident:
            return USER_STATES
        if isinstance(ident, str):
            community = ident.startswith((_COMMUNITY_APP, _COMMUNITY_USER))
            return KEY_VALUE if community and isinstance(doc["state"], dict) else APP_STATES
        return None
    if "id" in doc and "app_name" in doc and "user_id" in doc:
        return SESSIONS
    return None


def is_mongodb(records: list[Any]) -> bool:
    """Whether the first records are documents of a MongoDB session store: each names its
    ``_id``, as every mongoexport document does, and has a shape :func:`kind` knows."""
    sample = [r for r in records[:20] if isinstance(r, dict)]
    return bool(sample) and all("_id" in r and kind(_plain_or_none(r)) for r in sample)


def _plain_or_none(record: Any) -> Any:
    try:
        return plain(record)
    except RecursionError:
        return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _keys(doc: dict[str, Any], id_key: str) -> tuple[str | None, str | None, str | None]:
    """(app, user, session) of a document: its own fields, else its ``_id`` object's."""
    ident = doc.get("_id") if isinstance(doc.get("_id"), dict) else {}
    assert isinstance(ident, dict)
    return (
        _text(doc.get("app_name", ident.get("app_name"))),
        _text(doc.get("user_id", ident.get("user_id"))),
        _text(doc.get(id_key, ident.get("session_id"))),
    )


@dataclass
class _Events:
    """Events of one chunk, with their documents' keys, for one batch."""

    values: list[Any] = field(default_factory=list)
    meta: dict[str, list[Any]] = field(
        default_factory=lambda: {
            key: []
            for key in ("location", "app_name", "user_id", "session_id", "event_id", "seconds")
        }
    )

    def add(
        self,
        value: Any,
        location: str,
        keys: tuple[str | None, str | None, str | None],
        event_id: Any = None,
        seconds: Any = None,
    ) -> None:
        self.values.append(value)
        for col, item in zip(
            ("location", "app_name", "user_id", "session_id", "event_id", "seconds"),
            (location, *keys, _text(event_id), seconds),
            strict=True,
        ):
            self.meta[col].append(item)

    def batch(self) -> Batch:
        """The batch; a document's ``timestamp`` stands in for an event_data without one."""
        meta = pd.DataFrame({k: v for k, v in self.meta.items() if k != "seconds"}, dtype=object)
        times, why = parse_utc(pd.Series(self.meta["seconds"], dtype=object), unit="s")
        meta["ts"] = times.set_axis(meta.index)
        meta["ts_reason"] = pd.Series(
            [
                None
                if reason is None
                else f"timestamp is missing from event_data and the document's timestamp is "
                f"unreadable ({reason}: {raw!r})"
                for reason, raw in zip(why, self.meta["seconds"], strict=True)
            ],
            dtype=object,
        )
        return Batch(pd.Series(self.values, dtype=object), meta, ORIGIN)


@dataclass
class Store:
    """What an export's files hold but their events: the collection each file is, and the
    stored state documents (read after every file, to name the users of community state)."""

    collections: dict[str, tuple[str, str]] = field(default_factory=dict)
    """File name → (collection, where its first document of that shape is)."""
    states: list[pd.DataFrame] = field(default_factory=list)
    community: list[tuple[str, Any, str]] = field(default_factory=list)
    """``session_state`` documents of the community service: (_id, state, location)."""
    users: set[tuple[str, str]] = field(default_factory=set)
    """(app, user) of every session read, to split ``user:<app>:<user>`` ids."""

    def file_holds(self, file: str, collection: str, location: str) -> None:
        """Note a document's collection; one file holding two is refused."""
        first = self.collections.setdefault(file, (collection, location))
        if first[0] != collection:
            raise SourceError(
                f"events: {file} holds documents of two collections of a MongoDB session store",
                value=f"{first[0]} (first at {first[1]}) and {collection} (at {location})",
                fix="export each collection to a file of its own (mongoexport "
                "--collection=<name> --out=<name>.jsonl) and list every file in paths",
            )

    def state(self, filters: Filters, sink: RejectSink) -> pd.DataFrame:
        """The ``session_state`` rows of every state document read, narrowed by ``filters``."""
        parts = list(self.states)
        for ident, state, location in self.community:
            if ident.startswith(_COMMUNITY_APP):
                app, user, scope = ident.removeprefix(_COMMUNITY_APP), "", StateScope.APP
            else:
                app, user = self._split_user(ident.removeprefix(_COMMUNITY_USER))
                scope = StateScope.USER
            parts.append(
                stored_state.scoped_rows(
                    state,
                    scope,
                    app_name=app,
                    user_id=user,
                    source=f"{KEY_VALUE}.state",
                    location=location,
                    sink=sink,
                )
            )
        return stored_state.combined(parts, filters)

    def _split_user(self, rest: str) -> tuple[str, str]:
        """``<app>:<user>`` of a community user-state id: the session's pair it spells, else
        split at the first ``:``."""
        for app, user in self.users:
            if rest == f"{app}:{user}":
                return app, user
        app, _, user = rest.partition(":")
        return app, user


def batches(
    records: list[Any], locations: list[str], file: str, store: Store, sink: RejectSink
) -> Iterator[Batch]:
    """The events of one chunk of a file's documents, as one batch; the state documents among
    them go to ``store``, and every document that cannot be read to ``sink``."""
    events = _Events()
    for record, location in zip(records, locations, strict=True):
        try:
            doc = plain(record)
        except RecursionError:
            sink.add(location, "document nested too deeply to read")
            continue
        collection = kind(doc)
        if collection is None:
            sink.add(
                location,
                f"not a document of an ADK MongoDB session store: {SHAPES}",
                str(record)[:500],
            )
            continue
        store.file_holds(file, collection, location)
        if collection == EVENTS:
            _event(doc, location, events, sink)
        elif collection == EMBEDDED:
            _embedded(doc, location, events, store, sink)
        elif collection == SESSIONS:
            _session(doc, location, store, sink)
        elif collection == KEY_VALUE:
            store.community.append((str(doc["_id"]), doc["state"], location))
        else:
            _shared_state(collection, doc, location, store, sink)
    if events.values:
        yield events.batch()


def _event(doc: dict[str, Any], location: str, events: _Events, sink: RejectSink) -> None:
    """A MongoDbSessionService event document: its ``event_data``, with its keys."""
    data = doc["event_data"]
    if not isinstance(data, str | dict):
        sink.add(
            location, "event_data is neither the event's JSON text nor an object", str(data)[:500]
        )
        return
    ident = doc.get("_id") if isinstance(doc.get("_id"), dict) else {}
    assert isinstance(ident, dict)
    events.add(
        data, location, _keys(doc, "session_id"), ident.get("event_id"), doc.get("timestamp")
    )


def _embedded(
    doc: dict[str, Any], location: str, events: _Events, store: Store, sink: RejectSink
) -> None:
    """A community session document: its embedded events, and its state."""
    keys = _keys(doc, "id")
    missing = [
        name
        for name, value in zip(("app_name", "user_id", "id"), keys, strict=True)
        if value is None
    ]
    if missing:
        sink.add(
            location, f"a session document without {', '.join(missing)} (text)", str(doc)[:500]
        )
        return
    listed = doc["events"]
    if not isinstance(listed, list):
        sink.add(f"{location}.events", "events is not a list", str(listed)[:500])
        return
    for i, event in enumerate(listed):
        events.add(event, f"{location}.events[{i}]", keys)
    _session_state(doc.get("state"), keys, doc.get("last_update_time"), location, store, sink)


def _session(doc: dict[str, Any], location: str, store: Store, sink: RejectSink) -> None:
    """A MongoDbSessionService session document: its state (JSON text)."""
    keys = _keys(doc, "id")
    if None in keys:
        sink.add(
            location, "a session document without app_name, user_id and id as text", str(doc)[:500]
        )
        return
    state = _decoded(doc.get("state"), f"{location}.state", sink)
    if state is not _UNREADABLE:
        _session_state(state, keys, doc.get("update_time"), location, store, sink)


def _session_state(
    state: Any,
    keys: tuple[str | None, str | None, str | None],
    updated: Any,
    location: str,
    store: Store,
    sink: RejectSink,
) -> None:
    app, user, session = (key or "" for key in keys)
    store.users.add((app, user))
    stamp = updated if isinstance(updated, int | float) and not isinstance(updated, bool) else None
    store.states.append(
        stored_state.rows(
            state,
            app_name=app,
            user_id=user,
            session_id=session,
            scope=None,
            updated_at=stamp,
            source=f"{SESSIONS}.state",
            location=location,
            sink=sink,
        )
    )


def _shared_state(
    collection: str, doc: dict[str, Any], location: str, store: Store, sink: RejectSink
) -> None:
    """A MongoDbSessionService app or user state document."""
    ident = doc["_id"]
    owner = (str(ident), "") if collection == APP_STATES else _keys(doc, "-")[:2]
    app, user = owner
    if app is None or user is None:
        sink.add(location, "a user_states _id without app_name and user_id as text", str(doc)[:500])
        return
    scope = StateScope.APP if collection == APP_STATES else StateScope.USER
    state = _decoded(doc["state"], f"{location}.state", sink)
    if state is _UNREADABLE:
        return
    store.states.append(
        stored_state.scoped_rows(
            state,
            scope,
            app_name=app,
            user_id=user,
            source=f"{collection}.state",
            location=location,
            sink=sink,
        )
    )


_UNREADABLE = object()


def _decoded(state: Any, location: str, sink: RejectSink) -> Any:
    """A stored state: JSON text decoded (an object already, as older versions stored it, as
    it is); unreadable text is a reject, and :data:`_UNREADABLE`."""
    if not isinstance(state, str):
        return state
    try:
        return loads(state)
    except JSON_ERRORS as err:
        sink.add(location, f"unreadable state: {json_failure(err)}", state[:500])
        return _UNREADABLE
