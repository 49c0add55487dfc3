"""Typed decoding of ADK event JSON: msgspec checks each field's type while it decodes.

Most evidence is well formed, and for it the normaliser's general path spends its time
looking up some thirty keys per event dict and checking their types in Python. Here a
chunk's JSON text decodes straight into the Structs below, which declare every field the
frames read, in both spellings, with the type the general path requires of it; msgspec checks
those types in C as it decodes, and each field the frames ask for comes out as a column in
one ``map`` of an attribute getter.

A record this cannot decode (malformed JSON, NaN, a number past float's range, a lone
surrogate, a field of the wrong type, an event that is not an object, ...) goes to the general
path, which names the reason; the rest of its chunk is read here. Rules types cannot state (a
missing id, an implausible timestamp) are checked on the columns by the same functions either
way, so the frames and rejects are the same on both paths (tests/property/test_typed_events.py).
Keys the kit does not read are skipped, as the general path ignores them; payloads (``args``,
``response``, ``stateDelta``, usage metadata) decode to the same builtins as there. The
Structs are kept out of the cyclic GC (``gc=False``): decoded JSON makes no cycles, and an
untracked Struct is cheaper to make and to free.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np

from incidentkit.sources.events.adk_columns import NOT_NONE, Ints, explode, fill, mask
from incidentkit.sources.events.adk_parts import Parts


class _Call(msgspec.Struct, gc=False):
    id: str | None = None
    name: str | None = None
    payload: dict[str, Any] | None = msgspec.field(default=None, name="args")


class _Response(msgspec.Struct, gc=False):
    id: str | None = None
    name: str | None = None
    payload: dict[str, Any] | None = msgspec.field(default=None, name="response")


class _Part(msgspec.Struct, gc=False):
    text: str | None = None
    thought: Any = None  # read for its truth, like the general path
    functionCall: _Call | None = None  # noqa: N815 (the JSON key)
    function_call: _Call | None = None
    functionResponse: _Response | None = None  # noqa: N815
    function_response: _Response | None = None
    codeExecutionResult: Any = None  # noqa: N815
    code_execution_result: Any = None


class _Content(msgspec.Struct, gc=False):
    parts: list[_Part] | None = None


class _Compaction(msgspec.Struct, gc=False):
    startTimestamp: int | float | None = None  # noqa: N815
    start_timestamp: int | float | None = None
    endTimestamp: int | float | None = None  # noqa: N815
    end_timestamp: int | float | None = None


class _Actions(msgspec.Struct, gc=False):
    stateDelta: dict[str, Any] | None = None  # noqa: N815
    state_delta: dict[str, Any] | None = None
    transferToAgent: str | None = None  # noqa: N815
    transfer_to_agent: str | None = None
    transferAgent: str | None = None  # noqa: N815
    escalate: bool | None = None
    skipSummarization: bool | None = None  # noqa: N815
    skip_summarization: bool | None = None
    compaction: _Compaction | None = None
    rewindBeforeInvocationId: str | None = None  # noqa: N815
    rewind_before_invocation_id: str | None = None
    endOfAgent: bool | None = None  # noqa: N815
    end_of_agent: bool | None = None
    endInvocation: bool | None = None  # noqa: N815 (ADK Java's legacy name of endOfAgent)
    agentState: Any = None  # noqa: N815 (read for its presence only)
    agent_state: Any = None


class _Event(msgspec.Struct, gc=False):
    id: str | None = None
    invocationId: str | None = None  # noqa: N815
    invocation_id: str | None = None
    author: str | None = None
    branch: str | None = None
    partial: bool | None = None
    turnComplete: bool | None = None  # noqa: N815
    turn_complete: bool | None = None
    interrupted: bool | None = None
    errorCode: str | None = None  # noqa: N815
    error_code: str | None = None
    errorMessage: str | None = None  # noqa: N815
    error_message: str | None = None
    appName: str | None = None  # noqa: N815
    app_name: str | None = None
    userId: str | None = None  # noqa: N815
    user_id: str | None = None
    sessionId: str | None = None  # noqa: N815
    session_id: str | None = None
    timestamp: int | float | None = None
    content: _Content | None = None
    actions: _Actions | None = None
    longRunningToolIds: list[str] | None = None  # noqa: N815
    long_running_tool_ids: list[str] | None = None
    usageMetadata: Any = None  # noqa: N815 (unreadable counts warn, never reject: tokens.py)
    usage_metadata: Any = None


_DECODER = msgspec.json.Decoder(_Event)
_NO_ACTIONS, _NO_CONTENT, _UNDECODED = _Actions(), _Content(), _Event()
_NO_COMPACTION = _Compaction()


class Columns:
    """The fields of decoded Structs as columns, each read when first asked for; ``get``
    reads them as the general path's :meth:`~incidentkit.sources.events.adk_columns.Records.get`
    reads dicts (the first of the keys that is not null)."""

    def __init__(self, structs: Sequence[msgspec.Struct]) -> None:
        self.structs = structs
        self.columns: dict[str, list[Any]] = {}

    def column(self, key: str) -> list[Any]:
        found = self.columns.get(key)
        if found is None:
            found = self.columns[key] = list(map(attrgetter(key), self.structs))
        return found

    def get(self, keys: tuple[str, ...]) -> list[Any]:
        out = self.column(keys[0])
        for key in keys[1:]:
            if None not in out:  # every record has it: the other spellings are not read
                break
            out = fill(out, self.column(key))
        return out


class Typed:
    """A chunk decoded by types: its events' columns, their actions' and their parts'.

    ``undecodable`` lists the records that could not be decoded so (they stand in as events
    with no field); the general path reads those.
    """

    def __init__(self, events: list[_Event], undecodable: Ints) -> None:
        self.undecodable = undecodable
        self.events = Columns(events)
        self.actions = Columns(_present(self.events.column("actions"), _NO_ACTIONS))
        contents = _present(self.events.column("content"), _NO_CONTENT)
        self.owner, self.part_no, parts = explode(list(map(_PARTS, contents)))
        self.parts = Columns(parts)

    def function_parts(self, keys: tuple[str, ...]) -> Parts:
        """The parts' function calls (or responses) under ``keys``, as columns."""
        found = self.parts.get(keys)
        at = np.flatnonzero(mask(found, NOT_NONE))
        calls = Columns([found[i] for i in at])
        return Parts(
            self.owner[at],
            self.part_no[at],
            calls.column("id"),
            calls.column("name"),
            calls.column("payload"),
        )


_PARTS = attrgetter("parts")


def compactions(values: list[Any]) -> Columns:
    """The fields of decoded ``actions.compaction`` Structs (None: an event without one)."""
    return Columns(_present(values, _NO_COMPACTION))


def _present(values: list[Any], empty: msgspec.Struct) -> list[Any]:
    """``values`` with ``empty`` for each None."""
    if None not in values:
        return values
    return [empty if value is None else value for value in values]


def decode(raw: Sequence[Any]) -> Typed | None:
    """``raw`` (JSON text) decoded by types, or None when it is not all text. A record that
    does not decode so is left to the general path (:attr:`Typed.undecodable`)."""
    if not raw or set(map(type, raw)) != {str}:
        return None
    try:
        return Typed(list(map(_DECODER.decode, raw)), np.zeros(0, dtype=np.int64))
    except (msgspec.DecodeError, RecursionError):  # ValidationError is a DecodeError
        pass
    events, undecodable = [], []
    for i, text in enumerate(raw):  # the chunk holds a record for the general path: find it
        try:
            events.append(_DECODER.decode(text))
        except (msgspec.DecodeError, RecursionError):
            events.append(_UNDECODED)
            undecodable.append(i)
    return Typed(events, np.array(undecodable, dtype=np.int64))
