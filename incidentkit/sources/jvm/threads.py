"""JVM thread dumps: ``jcmd <pid> Thread.print`` (also jstack / kill -3 output) and the text
form of ``jcmd <pid> Thread.dump_to_file``, which also lists virtual threads (an unnamed one is
called by its id, ``#30``). One row per thread; ``frames`` excludes lock and monitor lines.

A HotSpot header carries the thread's CPU time and age (``cpu=12.34ms elapsed=5.67s``, JDK 11+):
``cpu_ms`` and ``elapsed_ms``, missing when the header has none (``Thread.dump_to_file``, older
JDKs). Lock lines become ``locks_held`` (``- locked <0x..>`` monitors, less those the thread
released in ``Object.wait``, and the ``Locked ownable synchronizers`` that only ``Thread.print
-l`` lists) and the one lock the thread waits for (``lock_awaited``, its ``lock_class``, and
``lock_wait``: ``monitor`` for ``- waiting to lock`` / ``- waiting to re-lock in wait()``,
``park`` for ``- parking to wait for``). ``Thread.dump_to_file`` (JDK 25) names a lock
``<Class@hash>``; HotSpot by address, ``<0x000000069e9dd1a8>``.

HotSpot prints the dump time as the JVM's local wall clock without a zone. It is read in the
manifest's ``timezone`` (``"UTC"``, ``"Europe/Berlin"``, ...) when one is given; otherwise a UTC
time in the file name (``dump-2026-11-29T03:12:01Z.txt``) fixes the JVM's UTC offset (rounded
to 15 minutes), which then applies to every dump of the file. Without either the threads still
load, with ``taken_at`` unknown and a warning: comparing stacks needs no clock.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from incidentkit.errors import SourceError
from incidentkit.frames import conform
from incidentkit.manifest import Filters, SourceSpec
from incidentkit.sources.evidence_files import iter_lines, require_content
from incidentkit.sources.jvm.clock import file_time, host_offset, utc_of, wall_time
from incidentkit.sources.loaded import Loaded, RejectSink, taken_within
from incidentkit.times import zone_of

UNKNOWN = "UNKNOWN"
_LOCAL_TIME = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$")
_ISO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)$")
_PLAIN_ID = re.compile(r'^#\d+ "')
_PLAIN_STATE = re.compile(r"^[A-Z][A-Z_]*$")
_HEADER_IDS = (" tid=", " nid=")
_TRAILER = re.compile(r"^(?:JNI global ref|Found one Java-level deadlock|Found \d+ deadlock)")
_CPU = re.compile(r" cpu=(\d{1,15}(?:\.\d{1,9})?)ms(?= |$)")
_ELAPSED = re.compile(r" elapsed=(\d{1,15}(?:\.\d{1,9})?)s(?= |$)")
_LOCK_LINE = re.compile(
    r"^- (?P<verb>locked|waiting to lock|waiting to re-lock in wait\(\)|waiting on|"
    r"parking to wait for|eliminated) +<(?P<ref>[^<>]{1,512})>(?: \(a (?P<cls>[^()]{1,512})\))?$"
)
_OWNED_LINE = re.compile(r"^- <(?P<ref>[^<>]{1,512})>(?: \(a (?P<cls>[^()]{1,512})\))?$")
_REF = re.compile(r"^(?:0x[0-9a-fA-F]+|[^\s@]+@[0-9a-fA-F]+)$")
_AWAITS = {
    "waiting to lock": "monitor",
    "waiting to re-lock in wait()": "monitor",
    "parking to wait for": "park",
}
SYNCHRONIZERS = "Locked ownable synchronizers:"


def _hotspot_header(line: str) -> tuple[str, float | None, float | None] | None:
    """The thread name of a HotSpot header (``"name" #12 [4711] daemon prio=5 os_prio=0
    cpu=12.34ms elapsed=5.67s tid=0x.. nid=0x..``) with its ``cpu=`` and ``elapsed=`` in ms
    (None when the header has none), or None when the line is no header.

    Plain string search for the name, not a regex: a name may hold quotes and spaces, and the
    scan must stay linear on a hostile line. The name ends at the last quote before the first
    ``tid=``/``nid=``; the numbers are read after it.
    """
    found = [at for at in (line.find(key) for key in _HEADER_IDS) if at > 0]
    if not found:
        return None
    end = line.rfind('"', 1, min(found))
    if end <= 0 or not line[end + 1 : end + 2].isspace():
        return None
    cpu, elapsed = (_number(pattern, line, end) for pattern in (_CPU, _ELAPSED))
    return line[1:end], cpu, None if elapsed is None else round(elapsed * 1000, 6)


def _number(pattern: re.Pattern[str], line: str, start: int) -> float | None:
    found = pattern.search(line, start)
    value = float(found[1]) if found else math.nan
    return value if math.isfinite(value) else None


def _plain_header(line: str) -> tuple[str, str | None] | None:
    """The name and state of a ``Thread.dump_to_file`` header, or None: ``#30 "name" virtual``
    (JDK 21), ``#22 "name" RUNNABLE 2026-12-06T17:55:14.750409018Z`` (JDK 25, which adds the
    state and the time the thread was dumped).

    Unnamed virtual threads are known by their id, e.g. ``#30``.
    """
    if not _PLAIN_ID.match(line):
        return None
    ident, rest = line.split(" ", 1)
    end = rest.rfind('"')
    if end <= 0:
        return None
    tail = rest[end + 1 :].split()
    if tail[:1] == ["virtual"]:
        tail = tail[1:]
    state = tail.pop(0) if tail and _PLAIN_STATE.match(tail[0]) else None
    if len(tail) > 1 or (tail and not _ISO_TIME.match(tail[0])):
        return None
    return rest[1:end] or ident, state


def _header(line: str, lineno: int, *, plain: bool) -> _Thread | None:
    """The thread a header line opens, or None when the line is no header."""
    if plain:
        named = _plain_header(line)
        if named is None:
            return None
        return _Thread(named[0], lineno, _nid(line, plain=True), named[1] or UNKNOWN)
    hotspot = _hotspot_header(line)
    if hotspot is None:
        return None
    name, cpu, elapsed = hotspot
    return _Thread(name, lineno, _nid(line, plain=False), cpu_ms=cpu, elapsed_ms=elapsed)


def _nid(line: str, *, plain: bool) -> str | None:
    """The OS thread id of a header: HotSpot's ``nid=`` (hex or decimal, as printed), or the
    ``#id`` of a ``Thread.dump_to_file`` header; None when the header has neither."""
    if plain:
        return line.split(" ", 1)[0]
    at = line.rfind(" nid=")
    if at < 0:
        return None
    value = line[at + 5 :].split(" ", 1)[0]
    return value or None


@dataclass
class _Thread:
    name: str
    lineno: int
    nid: str | None = None
    state: str = UNKNOWN
    frames: list[str] = field(default_factory=list)
    cpu_ms: float | None = None
    elapsed_ms: float | None = None
    locked: list[str] = field(default_factory=list)
    released: set[str] = field(default_factory=set)  # monitors given up in Object.wait
    awaited: tuple[str, str | None, str] | None = None  # (lock, its class, monitor | park)

    def lock_line(self, line: str) -> bool:
        """Read a ``- locked <..>`` / ``- waiting to lock <..>`` / ... line; False when the
        line is none of them."""
        match = _LOCK_LINE.match(line)
        if match is None:
            return line.startswith("- ")  # another "- " note (eliminated ...): not a frame
        ref, verb = match["ref"], match["verb"]
        if not _REF.match(ref):
            return True  # <no object reference available>, <owner is scalar replaced>
        cls = match["cls"] or (ref.rsplit("@", 1)[0] if "@" in ref else None)
        if verb == "locked":
            self.locked.append(ref)
        elif verb == "waiting on":
            self.released.add(ref)
        elif verb in _AWAITS and self.awaited is None:
            self.awaited = (ref, cls, _AWAITS[verb])
        return True

    @property
    def held(self) -> tuple[str, ...]:
        """The locks the thread holds: monitors it entered and did not give up waiting, then
        the ownable synchronizers (in order, each once)."""
        waiting = self.released | ({self.awaited[0]} if self.awaited else set())
        return tuple(dict.fromkeys(ref for ref in self.locked if ref not in waiting))


@dataclass
class _Dump:
    plain: bool  # Thread.dump_to_file text form
    time: str | None
    lineno: int
    threads: list[_Thread] = field(default_factory=list)
    ended: bool = False
    synchronizers: bool = False  # lists "Locked ownable synchronizers" (Thread.print -l)


def load(spec: SourceSpec, filters: Filters, *, environ: Mapping[str, str] | None = None) -> Loaded:
    """Read every dump file of ``spec`` (in order) into the ``threads`` frame."""
    sink = RejectSink("threads")
    rows: list[dict[str, object]] = []
    for path in spec.paths:
        require_content(path, what="threads")
        dumps = _parse(path, sink)
        times = _times(dumps, path, sink, zone=zone_of(spec.naive_timestamps))
        for i, (dump, taken_at) in enumerate(zip(dumps, times, strict=True)):
            name = path.name if len(dumps) == 1 else f"{path.name}#{i + 1}"
            rows += [
                {
                    "dump": name,
                    "taken_at": taken_at,
                    "thread": thread.name,
                    "nid": thread.nid,
                    "state": thread.state,
                    "top_frame": thread.frames[0] if thread.frames else None,
                    "frames": tuple(thread.frames),
                    "cpu_ms": thread.cpu_ms,
                    "elapsed_ms": thread.elapsed_ms,
                    "locks_held": thread.held,
                    "lock_awaited": thread.awaited[0] if thread.awaited else None,
                    "lock_class": thread.awaited[1] if thread.awaited else None,
                    "lock_wait": thread.awaited[2] if thread.awaited else None,
                    "synchronizers_listed": dump.synchronizers,
                }
                for thread in dump.threads
            ]
    columns = [*_TEXT_COLUMNS, "cpu_ms", "elapsed_ms", "synchronizers_listed"]
    frame = pd.DataFrame(rows, columns=columns)
    for tuples in ("frames", "locks_held"):
        frame[tuples] = pd.Series([row[tuples] for row in rows], dtype=object)
    frame["taken_at"] = pd.to_datetime(frame["taken_at"], utc=True).dt.as_unit("ns")
    frame = taken_within(frame, filters).reset_index(drop=True)
    return Loaded(
        frames={"threads": conform("threads", frame)},
        rejects=sink.frame(),
        warnings=sink.warnings(),
    )


_TEXT_COLUMNS = (
    *("dump", "taken_at", "thread", "nid", "state", "top_frame"),
    *("lock_awaited", "lock_class", "lock_wait"),
)


def _parse(path: Path, sink: RejectSink) -> list[_Dump]:
    """The dumps of one file, thread by thread; unreadable headers go to ``sink``."""
    dumps: list[_Dump] = []
    dump: _Dump | None = None
    thread: _Thread | None = None  # the open thread block
    owner: _Thread | None = None  # the thread whose "Locked ownable synchronizers" are listed
    latest: _Thread | None = None  # the last thread read: its synchronizers follow a blank
    skipping = in_smr = False
    pending_time: str | None = None
    previous, last_complete = 0, True
    for lineno, text, complete in iter_lines(path, what="threads", sink=sink):
        if lineno != previous + 1:  # a blank line closes a thread block
            thread, owner, skipping = None, None, False
        previous, last_complete = lineno, complete
        line = text.strip()
        if owner is not None and dump is not None and line.startswith("- "):
            owned = _OWNED_LINE.match(line)
            if owned is not None and _REF.match(owned["ref"]):
                owner.locked.append(owned["ref"])
            continue
        owner = None
        if _LOCAL_TIME.match(line):
            pending_time = line
        elif line.startswith("Full thread dump") or _ISO_TIME.match(line):
            plain = not line.startswith("Full thread dump")
            dump = _Dump(plain, line if plain else pending_time, lineno)
            dumps.append(dump)
            thread, latest, skipping, in_smr, pending_time = None, None, False, False, None
        elif dump is None or dump.ended:
            continue  # text around the dumps: pid line, command echo, heap summary
        elif in_smr and not line.startswith('"'):
            in_smr = line != "}"
        elif line.startswith("Threads class SMR info"):
            in_smr = True
        elif _TRAILER.match(line):
            dump.ended, thread = True, None
        elif line == SYNCHRONIZERS:
            dump.synchronizers, owner = True, (None if skipping else thread or latest)
        elif line.startswith('"') or (dump.plain and line.startswith("#")):
            if in_smr:  # a header inside the SMR block: the block was cut before its "}"
                in_smr = False
                sink.warn(f"{path.name}:{lineno}", "Threads class SMR info block never closed")
            thread = latest = _header(line, lineno, plain=dump.plain)
            skipping = thread is None
            if thread is None:
                sink.warn(
                    f"{path.name}:{lineno}",
                    "thread header not recognised (its stack lines are skipped)",
                    text,
                )
            else:
                dump.threads.append(thread)
        elif thread is not None and not skipping:
            if line.startswith("java.lang.Thread.State:"):
                words = line.split(":", 1)[1].split()
                thread.state = words[0] if words else UNKNOWN
            elif line.startswith("at "):
                thread.frames.append(line[3:])
            elif not thread.lock_line(line) and dump.plain:
                thread.frames.append(line)
    if not dumps:
        raise SourceError(
            f"threads: {path.name} holds no thread dump",
            value=str(path),
            fix="give the output of jcmd <pid> Thread.print (or Thread.dump_to_file -format=text)",
        )
    last = dumps[-1]
    if in_smr:
        sink.add(
            f"{path.name}:{last.lineno}",
            "dump cut inside its Threads class SMR info block: no thread of it was read",
            None,
        )
    if thread is not None and (not last_complete or not last.plain):
        sink.add(
            f"{path.name}:{thread.lineno}",
            f"dump truncated: the file ends inside the block of thread {thread.name!r}; "
            "its stack may be incomplete",
            None,
        )
    return dumps


def _times(
    dumps: list[_Dump], path: Path, sink: RejectSink, *, zone: str | None
) -> list[pd.Timestamp | None]:
    """The UTC time each dump was taken (see the module docstring); None when unknown.

    A dump whose time cannot be placed still loads: its stacks need no clock to be compared
    with the next dump's, so it gets a warning, not a reject.
    """
    local = [None if d.plain or d.time is None else wall_time(d.time) for d in dumps]
    named = file_time(path.name)
    known = [t for t in local if t is not None]
    offset = host_offset(known, named, zone=zone)
    if offset is None:
        sink.warn(
            f"{path.name}:{dumps[0].lineno}",
            "dump time is the JVM's local time without a zone, so taken_at is unknown: set "
            'timezone = "UTC" (or the JVM\'s zone, e.g. "Europe/Berlin") in [threads], or '
            "put the dump's UTC time in the file name, e.g. dump-2026-11-29T03:12:01Z.txt",
        )
    times: list[pd.Timestamp | None] = []
    for dump, wall in zip(dumps, local, strict=True):
        if dump.plain:
            stamp = wall_time(dump.time or "")
            times.append(None if stamp is None else stamp.tz_convert("UTC"))
            if stamp is None:
                sink.warn(
                    f"{path.name}:{dump.lineno}",
                    f"dump time {dump.time!r} is no date the kit can hold; its threads have no "
                    "taken_at",
                )
        elif wall is not None:
            times.append(utc_of(wall, zone=zone, offset=offset))
        elif named is not None and len(dumps) == 1:
            times.append(named.tz_convert("UTC"))
        else:
            times.append(None)
            sink.warn(
                f"{path.name}:{dump.lineno}",
                "dump has no readable timestamp line before 'Full thread dump'; its threads "
                "have no taken_at (put the dump's UTC time in the file name)",
            )
    return times
