"""The simulated world, format-neutral: events, spans, log records, ledger and journal rows.

Times are integer epoch milliseconds (UTC). Encoders in :mod:`javafmt` and :mod:`pyfmt` turn
these records into ADK Java or ADK Python shapes; :mod:`writers` puts them on disk or in SQL.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal
from zoneinfo import ZoneInfo

BASE_DAY = datetime(2026, 11, 29, tzinfo=UTC)
"""Every scenario happens on this day; no wall clock is ever read."""
BASE_MS = int(BASE_DAY.timestamp() * 1000)

REMOVED = object()
"""Marker for a deleted state key (Java writes ``__ADK_SENTINEL_REMOVED__``, Python null)."""

SpanKind = Literal["invocation", "invoke_agent", "call_llm", "execute_tool"]


def at(clock: str) -> int:
    """Epoch ms of ``HH:MM[:SS[.mmm]]`` on the base day."""
    hms, _, frac = clock.partition(".")
    parts = [int(p) for p in hms.split(":")]
    while len(parts) < 3:
        parts.append(0)
    hours, minutes, seconds = parts
    return (
        BASE_MS + ((hours * 60 + minutes) * 60 + seconds) * 1000 + int((frac or "0").ljust(3, "0"))
    )


_SECONDS: dict[int, str] = {}


def iso(ms: int) -> str:
    """``2026-11-29T03:10:00.123Z`` for epoch ms."""
    second, milli = divmod(ms, 1000)
    text = _SECONDS.get(second)
    if text is None:
        text = datetime.fromtimestamp(second, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.")
        if len(_SECONDS) < 100_000:
            _SECONDS[second] = text
    return f"{text}{milli:03d}Z"


class WallClock:
    """A host's wall clock in ``zone`` (IANA name): the times its logs and thread dumps print."""

    def __init__(self, zone: str = "UTC") -> None:
        self.zone = zone
        self._tz = None if zone == "UTC" else ZoneInfo(zone)
        self._seconds: dict[int, tuple[str, str]] = {}

    def log_time(self, ms: int) -> str:
        """Logback's ``yyyy-MM-dd'T'HH:mm:ss.SSSXXX``: ``...03:10:00.123Z`` in UTC, else
        local with the offset (``...04:10:00.123+01:00`` in Berlin in November)."""
        if self._tz is None:
            return iso(ms)
        second, milli = divmod(ms, 1000)
        parts = self._seconds.get(second)
        if parts is None:
            text = datetime.fromtimestamp(second, tz=self._tz).isoformat()
            parts = (text[:19], text[19:])
            if len(self._seconds) < 100_000:
                self._seconds[second] = parts
        return f"{parts[0]}.{milli:03d}{parts[1]}"

    def dump_time(self, ms: int) -> str:
        """``2026-11-29 04:11:58``: the local time, no offset (the header of ``jcmd`` dumps)."""
        return datetime.fromtimestamp(ms // 1000, tz=self._tz or UTC).strftime("%Y-%m-%d %H:%M:%S")


def naive_utc(ms: int) -> datetime:
    """A naive UTC datetime (ADK Python's ``timestamp`` columns)."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).replace(tzinfo=None)


def aware(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


_CLEAR = ~((0xC000 << 48) | (0xF000 << 64))
_VERSION_4 = (0x8000 << 48) | (4 << 76)


class Ids:
    """Deterministic identifiers drawn from the scenario's one random generator."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def uuid(self) -> str:
        """``str(uuid.UUID(int=rng.getrandbits(128), version=4))``, formatted without uuid."""
        n = (self.rng.getrandbits(128) & _CLEAR) | _VERSION_4
        h = f"{n:032x}"
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    def invocation(self) -> str:
        return "e-" + self.uuid()

    def call(self) -> str:
        return "adk-" + self.uuid()

    def trace(self) -> str:
        return f"{self.rng.getrandbits(128):032x}"

    def span(self) -> str:
        return f"{self.rng.getrandbits(64) or 1:016x}"


@dataclass(slots=True)
class Part:
    """One content part: text, a function call or a function response."""

    kind: Literal["text", "call", "response"]
    text: str = ""
    call_id: str = ""
    name: str = ""
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Event:
    """One ADK event as the session service stores it."""

    app: str
    user: str
    session: str
    invocation_id: str
    event_id: str
    author: str
    ts: int
    role: str | None = None
    parts: list[Part] = field(default_factory=list)
    state_delta: dict[str, Any] = field(default_factory=dict)
    transfer_to_agent: str | None = None
    escalate: bool | None = None
    long_running: list[str] | None = None
    partial: bool | None = None
    error_code: str | None = None
    error_message: str | None = None
    branch: str | None = None
    model: bool = False  # a model response (finishReason, usage)
    tokens: tuple[int, int] = (0, 0)
    only: Literal["adk-java", "adk-python"] | None = None  # stored by one ADK only


@dataclass(slots=True)
class Span:
    """One span; ``end`` None means it never ended (and is never exported)."""

    trace_id: str
    span_id: str
    parent_id: str | None
    kind: SpanKind
    start: int
    end: int | None = None
    invocation_id: str = ""
    session_id: str = ""
    agent: str = ""
    root_agent: str = ""
    agent_span_id: str | None = None  # for execute_tool: the invoke_agent span (Python parent)
    tool: str = ""
    call_id: str = ""
    event_id: str = ""
    java_event_id: str = ""  # ADK Java re-ids model events after setting the span attribute
    description: str = ""
    model: str = ""
    tokens: tuple[int, int] = (0, 0)
    error: tuple[str, str, str] | None = None  # (exception type, message, status message)
    limit: int | None = None  # the error is maxLlmCalls = limit being exceeded


@dataclass(slots=True)
class LogRecord:
    """One diagnostics-plugin log record; ``throwable`` lines follow the message line."""

    ts: int
    level: Literal["INFO", "WARN", "ERROR"]
    message: str
    logger: str = "c.e.agent.DiagnosticsPlugin"
    throwable: tuple[str, ...] = ()


@dataclass(slots=True)
class LedgerRow:
    """One ``agent_run`` row."""

    run_id: str
    app: str
    user: str
    session: str
    invocation_id: str | None
    request: dict[str, Any]
    status: str
    owner: str | None
    lease_until: int | None
    attempts: int
    started_at: int
    updated_at: int


@dataclass(slots=True)
class JournalRow:
    """One side-effect journal entry."""

    key: str
    invocation_id: str
    function_call_id: str
    status: Literal["INTENT", "DONE"]
    result: dict[str, Any] | None
    created_at: int
    updated_at: int


@dataclass(slots=True)
class Bundle:
    """Everything one invocation (or one out-of-band log line) left behind."""

    start: int
    events: list[Event] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    logs: list[LogRecord] = field(default_factory=list)
    ledger: list[LedgerRow] = field(default_factory=list)
    journal: list[JournalRow] = field(default_factory=list)
    service: str = "agent"
