"""JVM thread dumps: ``jcmd <pid> Thread.print`` (also jstack / kill -3 output) and the text
form of ``jcmd <pid> Thread.dump_to_file``, which also lists virtual threads (an unnamed one is
called by its id, ``#30``). One row per thread; ``frames`` excludes lock and monitor lines.

HotSpot prints the dump time as the JVM's local wall clock without a zone. It is read in the
manifest's ``timezone`` (``"UTC"``, ``"Europe/Berlin"``, ...) when one is given; otherwise a UTC
time in the file name (``dump-2026-11-29T03:12:01Z.txt``) fixes the JVM's UTC offset (rounded
to 15 minutes), which then applies to every dump of the file. Without either the threads still
load, with ``taken_at`` unknown and a warning: comparing stacks needs no clock.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from incidentkit.errors import SourceError
from incidentkit.frames import conform
from incidentkit.manifest import Filters, SourceSpec
from incidentkit.sources.base import Loaded, RejectSink, iter_lines, require_content, taken_within
from incidentkit.sources.jvm_clock import clock_offset, file_time, wall_time
from incidentkit.times import localize, zone_of

UNKNOWN = "UNKNOWN"
_LOCAL_TIME = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$")
_ISO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)$")
_PLAIN_HEADER = re.compile(r'^(?P<id>#\d+) "(?P<name>.*)"(?: virtual)?$')
_HEADER_IDS = (" tid=", " nid=")
_TRAILER = re.compile(r"^(?:JNI global ref|Found one Java-level deadlock|Found \d+ deadlock)")


def _hotspot_name(line: str) -> str | None:
    """The thread name of a HotSpot header (``"name" #12 ... tid=0x.. nid=0x..``), or None.

    Plain string search, not a regex: a name may hold quotes and spaces, and the scan must stay
    linear on a hostile line. The name ends at the last quote before the first ``tid=``/``nid=``.
    """
    found = [at for at in (line.find(key) for key in _HEADER_IDS) if at > 0]
    if not found:
        return None
    end = line.rfind('"', 1, min(found))
    return line[1:end] if end > 0 and line[end + 1 : end + 2].isspace() else None


def _plain_name(line: str) -> str | None:
    """The name of a ``Thread.dump_to_file`` header (``#30 "name" virtual``), or None.

    Unnamed virtual threads are known by their id, e.g. ``#30``.
    """
    match = _PLAIN_HEADER.match(line)
    return None if match is None else match["name"] or match["id"]


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


@dataclass
class _Dump:
    plain: bool  # Thread.dump_to_file text form
    time: str | None
    lineno: int
    threads: list[_Thread] = field(default_factory=list)
    ended: bool = False


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
                }
                for thread in dump.threads
            ]
    frame = pd.DataFrame(rows, columns=["dump", "taken_at", "thread", "nid", "state", "top_frame"])
    frame["frames"] = pd.Series([row["frames"] for row in rows], dtype=object)
    frame["taken_at"] = pd.to_datetime(frame["taken_at"], utc=True).dt.as_unit("ns")
    frame = taken_within(frame, filters).reset_index(drop=True)
    return Loaded(
        frames={"threads": conform("threads", frame)},
        rejects=sink.frame(),
        warnings=sink.warnings(),
    )


def _parse(path: Path, sink: RejectSink) -> list[_Dump]:
    """The dumps of one file, thread by thread; unreadable headers go to ``sink``."""
    dumps: list[_Dump] = []
    dump: _Dump | None = None
    thread: _Thread | None = None  # the open thread block
    skipping = in_smr = False
    pending_time: str | None = None
    previous, last_complete = 0, True
    for lineno, text, complete in iter_lines(path, what="threads", sink=sink):
        if lineno != previous + 1:  # a blank line closes a thread block
            thread, skipping = None, False
        previous, last_complete = lineno, complete
        line = text.strip()
        if _LOCAL_TIME.match(line):
            pending_time = line
        elif line.startswith("Full thread dump") or _ISO_TIME.match(line):
            plain = not line.startswith("Full thread dump")
            dump = _Dump(plain, line if plain else pending_time, lineno)
            dumps.append(dump)
            thread, skipping, in_smr, pending_time = None, False, False, None
        elif dump is None or dump.ended:
            continue  # text around the dumps: pid line, command echo, heap summary
        elif in_smr and not line.startswith('"'):
            in_smr = line != "}"
        elif line.startswith("Threads class SMR info"):
            in_smr = True
        elif _TRAILER.match(line):
            dump.ended, thread = True, None
        elif line.startswith('"') or (dump.plain and line.startswith("#")):
            if in_smr:  # a header inside the SMR block: the block was cut before its "}"
                in_smr = False
                sink.warn(f"{path.name}:{lineno}", "Threads class SMR info block never closed")
            name = _plain_name(line) if dump.plain else _hotspot_name(line)
            thread, skipping = None, name is None
            if name is None:
                sink.warn(
                    f"{path.name}:{lineno}",
                    "thread header not recognised (its stack lines are skipped)",
                    text,
                )
            else:
                thread = _Thread(name, lineno, _nid(line, plain=dump.plain))
                dump.threads.append(thread)
        elif thread is not None and not skipping:
            if line.startswith("java.lang.Thread.State:"):
                words = line.split(":", 1)[1].split()
                thread.state = words[0] if words else UNKNOWN
            elif line.startswith("at "):
                thread.frames.append(line[3:])
            elif dump.plain:
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
    offset: pd.Timedelta | None = pd.Timedelta(0)
    if known and zone is None:
        if named is None:
            offset = None
            sink.warn(
                f"{path.name}:{dumps[0].lineno}",
                "dump time is the JVM's local time without a zone, so taken_at is unknown: set "
                'timezone = "UTC" (or the JVM\'s zone, e.g. "Europe/Berlin") in [threads], or '
                "put the dump's UTC time in the file name, e.g. dump-2026-11-29T03:12:01Z.txt",
            )
        else:
            offset = clock_offset(named, known[0])
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
        elif wall is not None and zone is not None:
            times.append(localize(pd.Series([wall]), zone).iloc[0])
        elif wall is not None and offset is not None:
            times.append((wall + offset).tz_localize("UTC"))
        elif wall is None and named is not None and len(dumps) == 1:
            times.append(named.tz_convert("UTC"))
        else:
            times.append(None)
            if wall is None:
                sink.warn(
                    f"{path.name}:{dump.lineno}",
                    "dump has no readable timestamp line before 'Full thread dump'; its threads "
                    "have no taken_at (put the dump's UTC time in the file name)",
                )
    return times
