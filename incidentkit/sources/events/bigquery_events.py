"""The BigQuery Agent Analytics rows as the ADK events they stand for, for the one normaliser.

The plugin logs a row per callback, so one stored ADK event may be several rows and most rows
are no event at all. Within an invocation, in time order:

- ``USER_MESSAGE_RECEIVED`` is the user's event: its text (``content_parts``, else
  ``content.text_summary``), the function responses the plugin logs right after it for the
  message (``TOOL_COMPLETED`` with ``attributes.adk.pause_kind``, ``HITL_*_COMPLETED``), and its
  state delta: what changed between the session state logged with it and with the
  invocation's ``INVOCATION_STARTING`` (``attributes.session_metadata.state``), for the
  plugin logs no ``STATE_DELTA`` for a user message.
- A finished ``LLM_RESPONSE`` (not a streamed chunk) is a model event: its text parts
  (``content.response``), usage and finish error; the ``TOOL_STARTING`` rows after it are its
  function calls (name and args; no call id).
- ``TOOL_COMPLETED`` is the tool's response event (the result wrapped as ``{"result": ...}``
  when it is no object, as ADK wraps it); a ``TOOL_ERROR`` is an answer only when the plugin
  says the model still got one (an MCP ``isError`` result, a reflected or classified error),
  else the tool raised and the call stays unanswered.
- Rows carrying ``attributes.adk.source_event_id`` describe the stored event of that id as it
  passed the runner (``STATE_DELTA``, ``AGENT_TRANSFER``, ``AGENT_RESPONSE``, ``TOOL_PAUSED``,
  ``HITL_*``, ``NODE_ERROR``, ``AGENT_STATE_CHECKPOINT``, ``EVENT_COMPACTION``, ...). Logged
  right after the ``LLM_RESPONSE`` or ``TOOL_COMPLETED`` of that event, they join it (which
  then takes the stored id); otherwise they are an event of their own: an error event, a
  checkpoint, a compaction, a callback's state delta.
- ``INVOCATION_*``, ``AGENT_*``, ``LLM_REQUEST``, ``LLM_ERROR`` and a raised ``TOOL_ERROR`` are
  no event: they are the run times and errors of the diagnostics frame.

A value the plugin logged as ``[REDACTED]`` is no value: that key is left out of the delta,
with a warning naming it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from incidentkit.sources.events.adk_columns import mask
from incidentkit.sources.events.adk_events import Batch, Origin
from incidentkit.sources.events.bigquery_analytics import (
    FORMAT,
    HIDDEN,
    hidden,
    json_text,
    terminal_responses,
)
from incidentkit.sources.loaded import RejectSink
from incidentkit.sources.process_memory import bulk_decoding

ORIGIN = Origin(FORMAT, "s", python=True)
Row = dict[str, Any]
"""One row of the table, as :mod:`.bigquery_analytics` reads it."""
USER, MODEL, TOOL, CALL = "USER_MESSAGE_RECEIVED", "LLM_RESPONSE", "TOOL_COMPLETED", "TOOL_STARTING"
_REQUESTS = ("HITL_CREDENTIAL_REQUEST", "HITL_CONFIRMATION_REQUEST", "HITL_INPUT_REQUEST")
_ANSWERS = tuple(f"{name}_COMPLETED" for name in _REQUESTS)
_AFTER_MODEL = frozenset(
    {"STATE_DELTA", "AGENT_RESPONSE", "TOOL_PAUSED", "A2A_INTERACTION", "NODE_OUTPUT", *_REQUESTS}
)
_AFTER_TOOL = frozenset(
    {"STATE_DELTA", "AGENT_TRANSFER", "A2A_INTERACTION", "NODE_OUTPUT", *_ANSWERS}
)
"""The describing rows the plugin logs right after a model's (a tool's) event, for it."""
ANSWERED = frozenset(
    {
        "Tool returned an MCP result with isError=true.",
        "Tool raised an error that ReflectAndRetryToolPlugin handled.",
        "tool_result_classifier classified the tool result as an error.",
    }
)
"""``TOOL_ERROR`` messages of a call whose answer still reached the model."""
_FORMATTED_PART = re.compile(
    r" \| (?=text: '|call: |resp: |Executable code \(|Code execution result \(|other(?: \| |$))"
)
"""Where the plugin's ``_format_content`` joins parts (``text: 'Hi' | call: lookup``)."""


def batch(rows: pd.DataFrame, sink: RejectSink) -> Batch:
    """The ADK event records ``rows`` stand for (:mod:`.bigquery_analytics` ``read``), each
    with its session keys, time and the location of its first row."""
    rows = _shaped(rows, sink)
    rows = rows.sort_values(["session_id", "invocation_id", "ts", "pos"], kind="stable")
    rows = rows.reset_index(drop=True)
    keys = _event_keys(rows)
    picked = np.flatnonzero(keys.notna().to_numpy())
    events: dict[str, _Event] = {}
    with bulk_decoding():  # the records below make no reference cycles
        chosen = _records(rows.iloc[picked])
        for at, key, row in zip(picked, keys.iloc[picked], chosen, strict=True):
            found = events.get(key)
            if found is None:
                found = events[key] = _Event(at=int(at), row=row)
            _READERS.get(row["event_type"], _describe)(found, row)
        _user_deltas(rows, events, keys)
        records = [event.record() for event in events.values()]
    for event in events.values():
        for location, names in event.hidden.items():
            sink.warn(location, HIDDEN, ", ".join(names))
    head = rows.iloc[[event.at for event in events.values()]]
    meta = pd.DataFrame(
        {col: head[col].to_numpy(dtype=object) for col in ("location", "app_name", "user_id")}
    )
    meta["session_id"] = head["session_id"].to_numpy(dtype=object)
    meta["ts"] = head["ts"].reset_index(drop=True)
    return Batch(pd.Series(records, dtype=object), meta, ORIGIN)


_READ = (
    *("location", "ts", "event_id", "event_type", "agent", "invocation_id", "content"),
    *("content_parts", "attributes", "error_message", "source_event_id", "source_author"),
    *("branch", "pause_kind", "function_call_id", "rewind_before"),
)
"""The columns the events are built from."""


def _records(rows: pd.DataFrame) -> list[Row]:
    """``rows`` as dicts of the columns in :data:`_READ`, missing text as None."""
    columns = [rows[name].tolist() for name in _READ]
    return [dict(zip(_READ, values, strict=True)) for values in zip(*columns, strict=True)]


# -- which rows make which event ----------------------------------------------------------------


def _event_keys(rows: pd.DataFrame) -> pd.Series:
    """The event each row belongs to (a key), None for rows that stand for no event."""
    kind = rows["event_type"]
    invocation = rows["invocation_id"]
    source = rows["source_event_id"]
    same = invocation.eq(invocation.shift())
    model = kind.eq(MODEL) & terminal_responses(rows)
    tool = (kind.eq(TOOL) & rows["pause_kind"].isna()) | (
        kind.eq("TOOL_ERROR") & rows["error_message"].isin(ANSWERED)
    )
    user = kind.eq(USER)
    own = "r" + rows["pos"].astype(str)
    carrier = pd.Series(np.select([model, tool, user], ["model", "tool", "user"], ""), dtype=object)
    keys = own.where(model | tool | user).astype(object)
    before = carrier.shift().where(same)
    first = source.notna() & ~source.duplicated()
    joins = first & (
        (before.eq("model") & kind.isin(_AFTER_MODEL))
        | (before.eq("tool") & kind.isin(_AFTER_TOOL))
    )
    joined = pd.Series(keys.shift()[joins].to_numpy(), index=source[joins].to_numpy(), dtype=object)
    by_source = source.map(joined)
    by_source = by_source.where(by_source.notna(), "s" + source.astype("str"))
    keys = keys.where(source.isna(), by_source)
    latest_user = own.where(user).groupby(invocation).ffill()
    answers = source.isna() & ((kind.eq(TOOL) & rows["pause_kind"].notna()) | kind.isin(_ANSWERS))
    keys = keys.where(~answers, latest_user.where(latest_user.notna(), own))
    latest_model = own.where(model).groupby(invocation).ffill()
    calls = source.isna() & kind.eq(CALL)
    keys = keys.where(~calls, latest_model.where(latest_model.notna(), own))
    return keys


# -- the rows each kind of event reads, checked ---------------------------------------------------


def _is_object(value: Any) -> bool:
    return type(value) is dict


def _object_or_none(value: Any) -> bool:
    return value is None or type(value) is dict


def _text_or_none(value: Any) -> bool:
    return value is None or type(value) is str


def _named(value: Any) -> bool:
    return type(value) is str and bool(value)


def _seconds(value: Any) -> bool:
    return value is None or (type(value) in (int, float) and 0 <= value < 1e11)


def _flag(value: Any) -> bool:
    return value is None or type(value) is bool


_TOOLS = frozenset({CALL, TOOL, "TOOL_ERROR", *_REQUESTS, *_ANSWERS})
_SAID = frozenset({MODEL, "AGENT_RESPONSE"})
_MARKERS = frozenset({"AGENT_STATE_CHECKPOINT", "EVENT_COMPACTION"})
_SHAPES: tuple[tuple[frozenset[str], str, Callable[[Any], bool], str], ...] = (
    (_TOOLS, "", _is_object, "content is not an object (tool, args or result)"),
    (_TOOLS, "tool", _named, "content.tool is missing or not text"),
    (frozenset({CALL, "TOOL_PAUSED", *_REQUESTS}), "args", _object_or_none, "content.args is "
     "not an object"),
    (_SAID, "", _object_or_none, "content is not an object"),
    (_SAID, "response", _text_or_none, "content.response is not text"),
    (frozenset({"STATE_DELTA"}), "@state_delta", _is_object, "attributes.state_delta is not "
     "an object"),
    (frozenset({"AGENT_TRANSFER"}), "to_agent", _named, "content.to_agent is not text"),
    (frozenset({"NODE_ERROR"}), "error_code", _text_or_none, "content.error_code is not text"),
    (_MARKERS, "", _is_object, "content is not an object"),
    (frozenset({"AGENT_STATE_CHECKPOINT"}), "end_of_agent", _flag, "content.end_of_agent is "
     "not true or false"),
    (frozenset({"EVENT_COMPACTION"}), "start_timestamp", _seconds, "compaction start is no "
     "epoch seconds"),
    (frozenset({"EVENT_COMPACTION"}), "end_timestamp", _seconds, "compaction end is no epoch "
     "seconds"),
)  # fmt: skip
"""Per row type: a field of ``content`` (``""``: itself; ``@name``: of ``attributes``), the
test it must pass, and the reason a row that fails it is rejected."""


def _shaped(rows: pd.DataFrame, sink: RejectSink) -> pd.DataFrame:
    """``rows`` less those whose content is not of their type's shape (rejects)."""
    kind, content = rows["event_type"], rows["content"]
    found = np.full(len(rows), None, dtype=object)
    for types, name, ok, why in _SHAPES:
        at = np.flatnonzero(kind.isin(types).to_numpy())
        if not len(at):
            continue
        source = rows["attributes"] if name.startswith("@") else content
        values = source.iloc[at].tolist()
        if name:
            key = name.removeprefix("@")
            values = [v.get(key) if type(v) is dict else None for v in values]
        failed = at[~mask(values, ok)]
        found[failed[found[failed] == None]] = why  # noqa: E711 (elementwise)
    reasons = pd.Series(found, index=rows.index, dtype=object)
    bad = reasons.notna()
    said = kind[bad].astype(str) + " " + reasons[bad].astype(str)
    for location, reason, raw in zip(rows.loc[bad, "location"], said, content[bad], strict=True):
        sink.add(str(location), reason, json_text(raw))
    kept: pd.DataFrame = rows.loc[~bad]
    return kept


# -- one event, built from its rows --------------------------------------------------------------


@dataclass
class _Event:
    """What the rows of one event say, gathered in time order."""

    at: int
    """Where its first row is in the sorted rows."""
    row: Row
    """Its first row: it names the event's invocation and time."""
    author: str | None = None
    role: str = "model"
    texts: list[str] = field(default_factory=list)
    answer: str | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)
    responses: list[dict[str, Any]] = field(default_factory=list)
    paused: list[tuple[str | None, str, Any]] = field(default_factory=list)
    long_running: list[str] = field(default_factory=list)
    actions: dict[str, Any] = field(default_factory=dict)
    delta: dict[str, Any] = field(default_factory=dict)
    hidden: dict[str, list[str]] = field(default_factory=dict)
    """Keys logged as ``[REDACTED]``, by the location of the row that logged them."""
    stored_id: str | None = None
    branch: str | None = None
    error_code: str | None = None
    error_message: str | None = None
    usage: Any = None

    def write(self, delta: dict[str, Any], location: str) -> None:
        """Apply a delta the row at ``location`` logged: a ``[REDACTED]`` value is no value,
        its key only noted."""
        for key, value in delta.items():
            if hidden(value):
                self.hidden.setdefault(location, []).append(str(key))
            else:
                self.delta[str(key)] = value

    def record(self) -> dict[str, Any]:
        """The ADK event (ADK Python's JSON keys) these rows stand for."""
        row = self.row
        parts: list[dict[str, Any]] = []
        texts = [self.answer] if self.answer is not None else self.texts
        parts += [{"text": text} for text in texts if text]
        for call in self.calls:
            parts.append({"function_call": call})
        for name, call_id, args in self.paused:  # paused calls no TOOL_STARTING named
            if not any(c.get("id") == call_id for c in self.calls) and name:
                parts.append({"function_call": {"id": call_id, "name": name, "args": args}})
        parts += [{"function_response": response} for response in self.responses]
        actions = dict(self.actions)
        if self.delta:
            actions["state_delta"] = self.delta
        return {
            "id": self.stored_id or _row_id(row),
            "invocation_id": row["invocation_id"],
            "author": self.author or _text(row, "agent"),
            "branch": self.branch,
            "content": {"role": self.role, "parts": parts} if parts else None,
            "actions": actions,
            "long_running_tool_ids": self.long_running or None,
            "error_code": self.error_code,
            "error_message": self.error_message,
            "usage_metadata": self.usage,
        }


def _row_id(row: Row) -> str:
    """An event's id when no row names the stored one: the plugin's ``event_id`` of its first
    row, else one made of its invocation, type and time."""
    if _text(row, "event_id") is not None:
        return str(row["event_id"])
    return f"{row['invocation_id']}:{row['event_type']}:{row['ts'].value}"


def _text(row: Row, column: str) -> str | None:
    """A text column of a row; None when missing (read as NaN or None)."""
    value = row[column]
    return value if isinstance(value, str) and value else None


def _content(row: Row, name: str) -> Any:
    content = row["content"]
    return content.get(name) if isinstance(content, dict) else None


def _texts(formatted: Any) -> list[str]:
    """The text parts of a ``_format_content`` rendering (``text: 'Hi' | call: lookup``)."""
    if not isinstance(formatted, str):
        return []
    pieces = _FORMATTED_PART.split(formatted)
    return [p[7:-1] for p in pieces if p.startswith("text: '") and p.endswith("'")]


def _result(value: Any) -> dict[str, Any]:
    """A tool's result as ADK stores it: an object as it is, anything else wrapped."""
    return value if isinstance(value, dict) else {"result": value}


def _user(event: _Event, row: Row) -> None:
    event.author, event.role = "user", "user"
    parts = row["content_parts"] if isinstance(row["content_parts"], list) else []
    plain = [
        p.get("text")
        for p in parts
        if p.get("mime_type", "text/plain") == "text/plain"
        and p.get("part_attributes") in (None, "{}")
        and isinstance(p.get("text"), str)
    ]
    summary = _content(row, "text_summary")
    event.texts = plain or ([summary] if isinstance(summary, str) and summary else [])


def _model(event: _Event, row: Row) -> None:
    event.author, event.role = _text(row, "agent"), "model"
    event.texts = _texts(_content(row, "response"))
    attributes = row["attributes"] if isinstance(row["attributes"], dict) else {}
    usage = attributes.get("usage_metadata")
    logged = _content(row, "usage")
    if not isinstance(usage, dict) and isinstance(logged, dict):
        usage = {
            "prompt_token_count": logged.get("prompt"),
            "candidates_token_count": logged.get("completion"),
            "total_token_count": logged.get("total"),
        }
    event.usage = usage if isinstance(usage, dict) else None
    if _text(row, "error_message") is not None:  # a finish or block reason: an error event
        reason = attributes.get("finish_reason")
        event.error_code = reason if isinstance(reason, str) and reason != "STOP" else None
        event.error_message = _text(row, "error_message")


def _tool(event: _Event, row: Row) -> None:
    if _text(row, "pause_kind") is None and event.author is None:  # the tool's response event
        event.author, event.role = _text(row, "agent"), "user"
    result = (
        {"error": _text(row, "error_message")}
        if row["event_type"] == "TOOL_ERROR"
        else _result(_content(row, "result"))
    )
    event.responses.append(
        {"id": _text(row, "function_call_id"), "name": _content(row, "tool"), "response": result}
    )


def _call(event: _Event, row: Row) -> None:
    if event.author is None:  # a call whose LLM_RESPONSE row is not in the table
        event.author, event.role = _text(row, "agent"), "model"
    name = _content(row, "tool")
    call_id = next((i for n, i, _ in event.paused if n == name and i), None)
    event.calls.append({"id": call_id, "name": name, "args": _content(row, "args")})


def _describe(event: _Event, row: Row) -> None:
    """A row describing the stored event of its ``source_event_id``."""
    kind = row["event_type"]
    if event.author is None:
        event.author = _text(row, "source_author") or _text(row, "agent")
    event.stored_id = _text(row, "source_event_id") or event.stored_id
    event.branch = _text(row, "branch") or event.branch
    if _text(row, "rewind_before") is not None:
        event.actions["rewind_before_invocation_id"] = row["rewind_before"]
    if kind == "STATE_DELTA":
        event.write(row["attributes"]["state_delta"], str(row["location"]))
    elif kind == "AGENT_TRANSFER":
        event.actions["transfer_to_agent"] = _content(row, "to_agent")
    elif kind == "AGENT_RESPONSE":
        event.answer = "".join(_texts(_content(row, "response"))) or None
    elif kind == "NODE_ERROR":
        event.error_code = _content(row, "error_code")
        event.error_message = _text(row, "error_message")
    elif kind == "AGENT_STATE_CHECKPOINT":
        event.actions["end_of_agent"] = _content(row, "end_of_agent") is True
        if _content(row, "agent_state") is not None:
            event.actions["agent_state"] = _content(row, "agent_state")
    elif kind == "EVENT_COMPACTION":
        event.actions["compaction"] = {
            "start_timestamp": _content(row, "start_timestamp"),
            "end_timestamp": _content(row, "end_timestamp"),
            "compacted_content": _content(row, "compacted_content"),
        }
    elif kind == "TOOL_PAUSED" and _text(row, "function_call_id") is not None:
        event.long_running.append(row["function_call_id"])
        call = (_content(row, "tool"), row["function_call_id"], _content(row, "args"))
        event.paused.append(call)
    elif kind in _REQUESTS:
        event.calls.append(
            {"id": None, "name": _content(row, "tool"), "args": _content(row, "args")}
        )
    elif kind in _ANSWERS:
        _tool(event, row)


_READERS: dict[str, Callable[[_Event, Row], None]] = {
    USER: _user,
    MODEL: _model,
    TOOL: _tool,
    "TOOL_ERROR": _tool,
    CALL: _call,
}


def _user_deltas(rows: pd.DataFrame, events: dict[str, _Event], keys: pd.Series) -> None:
    """Each user event's state delta: what changed between the session state logged with its
    ``USER_MESSAGE_RECEIVED`` and with the ``INVOCATION_STARTING`` after it."""
    kind = rows["event_type"]
    starts = pd.Series(np.where(kind.eq("INVOCATION_STARTING"), rows.index, np.nan))
    after = starts.groupby(rows["invocation_id"]).bfill().to_numpy()
    snapshots, named = rows["snapshot"].to_numpy(), keys.to_numpy()
    locations = rows["location"].to_numpy()
    for i in np.flatnonzero(kind.eq(USER).to_numpy()):
        event = events.get(named[i])
        if event is None or np.isnan(after[i]):
            continue
        before, now = snapshots[i], snapshots[int(after[i])]
        if not isinstance(before, dict) or not isinstance(now, dict):
            continue
        changed = {k: v for k, v in now.items() if k not in before or before[k] != v}
        changed |= {k: None for k in before if k not in now}
        event.write(changed, str(locations[int(after[i])]))
