"""The JFR event types incidentkit reads, and how one event of each becomes a row.

:data:`EVENT_TYPES` is an allowlist: ``jfr print`` is asked for these types only, and an event
of any other type in a JSON export is dropped before anything of it is read. The types that
hold the process's environment, system properties, JVM arguments and the host's process list
(``jdk.InitialEnvironmentVariable``, ``jdk.InitialSystemProperty``, ``jdk.JVMInformation``,
``jdk.SystemProcess``, ...) are not on it, so no value of theirs can reach a frame.

Every text taken from an event (thread, class and frame names) goes through
:func:`incidentkit.redact.scrub_text` once per distinct value (:class:`Texts`), so a
remembered credential or a ``password=...`` in a thread name reaches no frame or artifact.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from incidentkit.redact import scrub_text

SAMPLES: Mapping[str, str] = {
    "jdk.ExecutionSample": "execution",
    "jdk.NativeMethodSample": "native",
}
LOCKS: Mapping[str, str] = {
    "jdk.JavaMonitorEnter": "monitor-enter",
    "jdk.JavaMonitorWait": "monitor-wait",
    "jdk.ThreadPark": "park",
}
ALLOCATION = "jdk.ObjectAllocationSample"
OLD_OBJECT = "jdk.OldObjectSample"
HEAP = "jdk.GCHeapSummary"
EVENT_TYPES: tuple[str, ...] = (*SAMPLES, ALLOCATION, OLD_OBJECT, HEAP, *LOCKS)
"""Every event type the kit reads; the frame each one feeds is :data:`FRAME_OF`."""
FRAME_OF: Mapping[str, str] = {
    **dict.fromkeys(SAMPLES, "jfr_samples"),
    ALLOCATION: "jfr_allocations",
    OLD_OBJECT: "jfr_old_objects",
    HEAP: "jfr_heap",
    **dict.fromkeys(LOCKS, "jfr_locks"),
}
MAX_FRAMES = 64
"""Frames kept per stack, top first (``jfr print --stack-depth``; JFR records 64 by default)."""
_NO_ELEMENTS = -(2**31)
"""``arrayElements`` of an old-object sample that is no array (Integer.MIN_VALUE)."""
_WHEN = {"Before GC": "before", "After GC": "after"}


class EventError(ValueError):
    """One event of an allowed type lacks a field its row needs (the message is the reason).
    Internal: the loader turns it into a reject, it never leaves the loader."""


@dataclass
class Texts:
    """Each distinct text of a recording, scrubbed once and shared by every row that holds it
    (a recording repeats a few hundred thread, class and frame names millions of times)."""

    seen: dict[str, str] = field(default_factory=dict)
    stacks: dict[tuple[str, ...], tuple[str, ...]] = field(default_factory=dict)

    def __call__(self, text: str) -> str:
        kept = self.seen.get(text)
        if kept is None:
            kept = self.seen[text] = scrub_text(text)
        return kept

    def stack(self, frames: tuple[str, ...]) -> tuple[str, ...]:
        return self.stacks.setdefault(frames, frames)


def _dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise EventError(f"no {what}")
    return value


def _int(value: Any, what: str) -> int:
    """An integer JFR field: a Java ``int`` or ``long``, so it fits the frames' int64."""
    if type(value) is not int:
        raise EventError(f"{what} is not an integer")
    if not -(2**63) <= value < 2**63:
        raise EventError(f"{what} is out of range (past a Java long)")
    return value


def class_name(value: Any, texts: Texts) -> str | None:
    """A JFR class (``{"name": "java/util/HashMap$Node", "hidden": false}``) as the JVM prints
    it in dumps: dotted packages; a hidden class keeps the ``/suffix`` after its name."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    name: str = value["name"]
    if value.get("hidden") is True and "/" in name:
        head, _, tail = name.rpartition("/")
        return texts(head.replace("/", ".") + "/" + tail)
    return texts(name.replace("/", "."))


def thread_name(value: Any, texts: Texts) -> str | None:
    """A JFR thread's Java name (else its OS name)."""
    if not isinstance(value, dict):
        return None
    name = value.get("javaName") or value.get("osName")
    return texts(name) if isinstance(name, str) else None


def stack(value: Any, texts: Texts) -> tuple[str, ...]:
    """A JFR stack trace as frame texts, top first, as in the threads frame:
    ``pkg.Class.method(line 83)``, ``(Native Method)``, or ``(Unknown Source)``."""
    if not isinstance(value, dict) or not isinstance(value.get("frames"), list):
        return ()
    out: list[str] = []
    for frame in value["frames"][:MAX_FRAMES]:
        method = frame.get("method") if isinstance(frame, dict) else None
        if not isinstance(method, dict) or not isinstance(method.get("name"), str):
            continue
        owner = class_name(method.get("type"), texts) or "?"
        line = frame.get("lineNumber")
        where = (
            "Native Method"
            if frame.get("type") == "Native"
            else f"line {line}"
            if type(line) is int and line >= 0
            else "Unknown Source"
        )
        out.append(texts(f"{owner}.{method['name']}({where})"))
    return texts.stack(tuple(out))


def _thread(values: Mapping[str, Any], key: str, texts: Texts) -> str:
    name = thread_name(values.get(key), texts)
    if name is None:
        raise EventError(f"no {key}")
    return name


def row(kind: str, values: Mapping[str, Any], texts: Texts) -> tuple[Any, ...]:
    """The row of one event of type ``kind`` (its ``startTime`` first, as text; times and
    durations are parsed per column later); :class:`EventError` when a needed field is missing."""
    start = values.get("startTime")
    if not isinstance(start, str):
        raise EventError("no startTime")
    if kind in SAMPLES:
        frames = stack(values.get("stackTrace"), texts)
        state = values.get("state")
        state = state.removeprefix("STATE_") if isinstance(state, str) else None
        thread = _thread(values, "sampledThread", texts)
        return (start, SAMPLES[kind], thread, state, frames)
    if kind in LOCKS:
        frames = stack(values.get("stackTrace"), texts)
        duration = values.get("duration")
        if not isinstance(duration, str):
            raise EventError("no duration")
        held = class_name(values.get("monitorClass") or values.get("parkedClass"), texts)
        owner = thread_name(values.get("previousOwner") or values.get("notifier"), texts)
        thread = _thread(values, "eventThread", texts)
        return (start, LOCKS[kind], thread, duration, held, owner, frames)
    if kind == ALLOCATION:
        cls = class_name(values.get("objectClass"), texts)
        if cls is None:
            raise EventError("no objectClass")
        weight = _int(values.get("weight"), "weight")
        frames = stack(values.get("stackTrace"), texts)
        return (start, thread_name(values.get("eventThread"), texts), cls, weight, frames)
    if kind == OLD_OBJECT:
        sampled = _dict(values.get("object"), "object")
        cls = class_name(sampled.get("type"), texts)
        if cls is None:
            raise EventError("no object.type")
        allocated = values.get("allocationTime")
        elements = values.get("arrayElements")
        used = values.get("lastKnownHeapUsage")
        return (
            start,
            thread_name(values.get("eventThread"), texts),
            cls,
            allocated if isinstance(allocated, str) else None,
            used if type(used) is int else None,
            elements if type(elements) is int and elements != _NO_ELEMENTS else None,
            stack(values.get("stackTrace"), texts),
        )
    if kind == HEAP:
        said = values.get("when")
        when = _WHEN.get(said) if isinstance(said, str) else None
        if when is None:
            raise EventError("when is neither 'Before GC' nor 'After GC'")
        space = values.get("heapSpace")
        committed = space.get("committedSize") if isinstance(space, dict) else None
        return (
            start,
            _int(values.get("gcId"), "gcId"),
            when,
            _int(values.get("heapUsed"), "heapUsed"),
            committed if type(committed) is int else None,
        )
    raise EventError(f"event type {kind} is not read")  # unreachable: callers pass EVENT_TYPES
