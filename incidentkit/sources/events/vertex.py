"""Vertex AI Agent Engine sessions, as the sessions API returns them, into ADK event records.

What is read (saved to files: one response per file, or one per line of a JSON-lines file):

- ``sessions.events.list`` pages: ``{"sessionEvents": [...], "nextPageToken": "..."}`` (an
  empty page is ``{}``), or ``SessionEvent`` objects on their own;
- ``sessions.get`` (a ``Session``: ``name``, ``userId``, ``sessionState``, ``updateTime``) and
  ``sessions.list`` pages (``{"sessions": [...]}``): the session's user and its state.

A ``SessionEvent`` (REST JSON of ``reasoningEngines.sessions.events``; ADK Java's
``SessionJsonConverter``, ADK Python's ``VertexAiSessionService``) keeps ``author``,
``invocationId``, ``timestamp`` (RFC 3339 text, or ``{"seconds", "nanos"}``), ``content``,
``errorCode``/``errorMessage``, ``actions`` (``stateDelta`` with a removed key as ``null``,
``transferAgent``, ``escalate``, ``skipSummarization``, ADK Java's ``endOfAgent``, ...) and
``eventMetadata`` (``partial``, ``turnComplete``, ``interrupted``, ``branch``,
``longRunningToolIds``, ``usageMetadata``; ADK Python keeps usage in
``customMetadata._usage_metadata`` and a compaction in ``customMetadata._compaction``). ADK
Python also writes the whole event as ``rawEvent`` (its ``actions`` whole: ``compaction``,
``rewindBeforeInvocationId``, ``endOfAgent``, ``agentState``); as ADK's reader does, the kit
then reads the raw event, with author, invocation id and time from the resource. The event
id is the last segment of ``name``
(``.../reasoningEngines/{engine}/sessions/{session}/events/{event}``), unless a raw event
keeps the id it was created with (the one spans carry). Snake_case keys (an SDK object
dumped without aliases) read the same.

The session id comes from ``name``; the app is the reasoning engine, named by the app
profile whose ``reasoning_engine`` is that id (else the engine id itself, which is what ADK
takes as the app name of a Vertex session); the user comes from the session's
``sessions.get``/``sessions.list`` JSON when it was read before the events.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pandas as pd

from incidentkit.sources.events import session_state
from incidentkit.sources.events.adk_events import Batch, Origin
from incidentkit.sources.loaded import RejectSink

FORMAT = "vertex-ai-json"
RAW = Origin(FORMAT, "s", python=True)
"""Events kept whole as ``rawEvent`` (ADK Python's VertexAiSessionService)."""
FIELDS = Origin(FORMAT, "s", python=False)
"""Events kept field by field (ADK Java's converter, older ADK Python)."""

_NAME = re.compile(
    r"(?:^|/)reasoningEngines/(?P<engine>[^/]+)/sessions/(?P<session>[^/]+)"
    r"(?:/events/(?P<event>[^/]+))?$"
)
_METADATA = (
    ("partial", ("partial",)),
    ("turnComplete", ("turnComplete", "turn_complete")),
    ("interrupted", ("interrupted",)),
    ("branch", ("branch",)),
    ("longRunningToolIds", ("longRunningToolIds", "long_running_tool_ids")),
    ("groundingMetadata", ("groundingMetadata", "grounding_metadata")),
    ("usageMetadata", ("usageMetadata", "usage_metadata")),
)
_ACTIONS = {
    "state_delta": "stateDelta",
    "artifact_delta": "artifactDelta",
    "transfer_agent": "transferToAgent",
    "transferAgent": "transferToAgent",
    "skip_summarization": "skipSummarization",
    "requested_auth_configs": "requestedAuthConfigs",
    "requested_tool_confirmations": "requestedToolConfirmations",
    "end_of_agent": "endOfAgent",
}
_USAGE = "_usage_metadata"
_COMPACTION = "_compaction"
"""Where ADK Python keeps ``actions.compaction`` of an event stored field by field (the API's
``actions`` has no field for it): ``eventMetadata.customMetadata._compaction``."""


def _get(record: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if key in record:
            return record[key]
    return None


def kind(record: Any) -> str | None:
    """``"page"``, ``"event"``, ``"session"`` or ``"sessions"`` for a record of the API's
    JSON, None for anything else."""
    if not isinstance(record, dict):
        return None
    if isinstance(_get(record, "sessionEvents", "session_events"), list):
        return "page"
    if isinstance(record.get("sessions"), list):
        return "sessions"
    name = record.get("name")
    if isinstance(name, str):
        match = _NAME.search(name)
        if match:
            return "event" if match["event"] else "session"
    return None


def is_vertex(records: list[Any]) -> bool:
    """Whether the first records that say anything are Agent Engine API JSON."""
    for record in records[:20]:
        if record == {}:  # an empty page says nothing
            continue
        return kind(record) is not None
    return False


def parse_time(value: Any) -> Any:
    """Epoch seconds of an RFC 3339 text or ``{"seconds", "nanos"}``; anything else as is
    (the normaliser rejects it, naming the value)."""
    if isinstance(value, str):
        try:
            stamp = datetime.fromisoformat(value)
        except ValueError:
            return value
        if stamp.tzinfo is None:
            return value
        return stamp.timestamp()
    if isinstance(value, dict) and set(value) <= {"seconds", "nanos"} and "seconds" in value:
        seconds, nanos = value.get("seconds"), value.get("nanos", 0)
        try:  # proto3 JSON writes int64 as text
            whole = int(seconds) if isinstance(seconds, str | int) else None
            part = int(nanos) if isinstance(nanos, str | int) else None
        except ValueError:
            return value
        if whole is None or part is None or isinstance(seconds, bool):
            return value
        try:
            return whole + part / 1e9
        except OverflowError:  # past any float: no time
            return value
    return value


def time_and_reason(value: Any) -> tuple[float | None, str | None]:
    """An event's time for the normaliser: epoch seconds (a number as it is) or None, and why
    a time that is there cannot be read (the reject's reason) or None."""
    if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
        return value, None
    seconds = parse_time(value)
    if isinstance(seconds, float):
        return seconds, None
    shown = repr(value)
    return None, (
        "timestamp is neither RFC 3339 text with an offset (2026-11-29T02:30:00Z) nor "
        f'{{"seconds", "nanos"}}: {shown[:200]}'
    )


def parse_stamp(value: Any) -> pd.Timestamp | None:
    """A time of the API (RFC 3339 text or ``{"seconds", "nanos"}``) to the nanosecond, None
    when it is neither (a number, too: the API writes no epoch seconds here)."""
    if not isinstance(value, str | dict) or not isinstance(parse_time(value), float):
        return None
    try:  # out of the frames' range (years 1677-2262): unknown, as an unreadable time
        if isinstance(value, str):
            return pd.Timestamp(value).tz_convert("UTC")
        return pd.Timestamp(int(value["seconds"]) * 10**9 + int(value.get("nanos", 0)), tz="UTC")
    except (ValueError, OverflowError):  # OutOfBoundsDatetime is a ValueError
        return None


def update_time(given: Any, location: str, sink: RejectSink, *, text: str) -> pd.Timestamp | None:
    """A stored state's ``updateTime`` (:func:`parse_stamp`); one that is no such time is a
    warning (of ``text`` times, as the store's documentation calls them), and unknown."""
    stamp = parse_stamp(given)
    if stamp is None and given is not None:
        sink.warn(
            f"{location}:updateTime",
            f"updateTime is neither {text} text with an offset nor {{seconds, nanos}} in the "
            "frames' range: the stored state's time is unknown",
            repr(given)[:200],
        )
    return stamp


def to_event(wire: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The ADK event JSON (camelCase) of one ``SessionEvent``, its time as written (see
    :func:`time_and_reason`), and whether it was kept raw."""
    name = wire.get("name")
    match = _NAME.search(name) if isinstance(name, str) else None
    raw = _get(wire, "rawEvent", "raw_event")
    if isinstance(raw, dict) and raw:
        event = dict(raw)
    else:
        event = {}
        raw = None
    # The resource's own author and invocation id win over the raw event's, as ADK reads them.
    if raw is None or "author" in wire:
        event["author"] = wire.get("author")
    if raw is None or "invocationId" in wire or "invocation_id" in wire:
        event.pop("invocation_id", None)
        event["invocationId"] = _get(wire, "invocationId", "invocation_id")
    if "timestamp" in wire or "timestamp" not in event:
        event["timestamp"] = wire.get("timestamp")  # as written: _batches reads it
    if not event.get("id") and match:
        event["id"] = match["event"]
    if raw is not None:
        return event, True
    for key, keys in (
        ("content", ("content",)),
        ("errorCode", ("errorCode", "error_code")),
        ("errorMessage", ("errorMessage", "error_message")),
    ):
        value = _get(wire, *keys)
        if value is not None:
            event[key] = value
    actions = wire.get("actions")
    if isinstance(actions, dict):
        event["actions"] = {_ACTIONS.get(k, k): v for k, v in actions.items()}
    elif actions is not None:
        event["actions"] = actions  # not an object: the normaliser rejects it
    metadata = _get(wire, "eventMetadata", "event_metadata")
    if isinstance(metadata, dict):
        for key, keys in _METADATA:
            value = _get(metadata, *keys)
            if value is not None:
                event[key] = value
        custom = _get(metadata, "customMetadata", "custom_metadata")
        if "usageMetadata" not in event and isinstance(custom, dict) and _USAGE in custom:
            event["usageMetadata"] = custom[_USAGE]
        if isinstance(custom, dict) and custom.get(_COMPACTION) is not None:
            actions = event.get("actions", {})
            if isinstance(actions, dict) and actions.get("compaction") is None:
                event["actions"] = {**actions, "compaction": custom[_COMPACTION]}
    return event, False


@dataclass
class Sessions:
    """What the session resources read so far say: each session's user, and their state."""

    engines: Mapping[str, str]
    users: dict[tuple[str, str], str] = field(default_factory=dict)
    states: list[pd.DataFrame] = field(default_factory=list)

    def app(self, engine: str) -> str:
        return self.engines.get(engine, engine)

    def add(self, session: dict[str, Any], location: str, sink: RejectSink) -> None:
        """Remember a ``Session`` resource: its user, and its ``sessionState`` as rows."""
        name = session.get("name")
        match = _NAME.search(name) if isinstance(name, str) else None
        user = _get(session, "userId", "user_id")
        if match is None or match["event"] or not isinstance(user, str) or not user:
            sink.add(
                location,
                "not an Agent Engine session: needs name "
                "(.../reasoningEngines/<id>/sessions/<id>) and userId",
                str(session)[:500],
            )
            return
        app = self.app(match["engine"])
        self.users[(app, match["session"])] = user
        given = _get(session, "updateTime", "update_time")
        updated = update_time(given, location, sink, text="RFC 3339")
        self.states.append(
            session_state.from_document(
                _get(session, "sessionState", "session_state"),
                app_name=app,
                user_id=user,
                session_id=match["session"],
                updated_at=updated,
                source="Vertex AI session state",
                location=location,
                sink=sink,
            )
        )


def batches(
    records: list[Any], locations: list[str], sessions: Sessions, sink: RejectSink
) -> Iterator[Batch]:
    """The events of decoded API records (pages, events, sessions), a batch per origin run.

    Session resources among them are remembered first, so a file that holds a session's
    ``sessions.get`` and its pages names the user of its events wherever the session stands.
    """
    events: list[tuple[dict[str, Any], str]] = []
    for record, location in zip(records, locations, strict=True):
        what = kind(record)
        if what == "session":
            sessions.add(record, location, sink)
        elif what == "sessions":
            for i, session in enumerate(record["sessions"]):
                where = f"{location}:sessions[{i}]"
                if isinstance(session, dict):
                    sessions.add(session, where, sink)
                else:
                    sink.add(where, "a session is not a JSON object", str(session)[:500])
        elif what == "page":
            page = _get(record, "sessionEvents", "session_events")
            events.extend((e, f"{location}:sessionEvents[{i}]") for i, e in enumerate(page))
        elif what == "event":
            events.append((record, location))
        elif record != {}:  # {} is an empty page: a session with no events
            sink.add(
                location,
                "not Agent Engine sessions API JSON (a sessionEvents page, a SessionEvent, "
                "or a Session)",
                str(record)[:500],
            )
    yield from _batches(events, sessions)


def _batches(events: list[tuple[Any, str]], sessions: Sessions) -> Iterator[Batch]:
    values: list[Any] = []
    meta: dict[str, list[Any]] = {
        key: [] for key in ("location", "app_name", "user_id", "session_id", "ts_reason")
    }
    origin: Origin | None = None
    for wire, location in events:
        why = None
        if isinstance(wire, dict):
            event, raw = to_event(wire)
            event["timestamp"], why = time_and_reason(event.get("timestamp"))
            name = wire.get("name")
            match = _NAME.search(name) if isinstance(name, str) else None
        else:
            event, raw, match = wire, False, None
        this = RAW if raw else FIELDS
        if origin is not None and this is not origin and values:
            yield _batch(values, meta, origin)
            values, meta = [], {key: [] for key in meta}
        origin = this
        app = sessions.app(match["engine"]) if match else None
        session = match["session"] if match else None
        values.append(event)
        meta["location"].append(location)
        meta["ts_reason"].append(why)
        meta["app_name"].append(app)
        meta["session_id"].append(session)
        meta["user_id"].append(sessions.users.get((app, session)) if app and session else None)
    if values and origin is not None:
        yield _batch(values, meta, origin)


def _batch(values: list[Any], meta: dict[str, list[Any]], origin: Origin) -> Batch:
    return Batch(pd.Series(values, dtype=object), pd.DataFrame(meta, dtype=object), origin)
