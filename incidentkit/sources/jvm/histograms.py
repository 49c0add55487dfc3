"""JVM class histograms: ``jcmd <pid> GC.class_histogram`` (also ``jmap -histo``). One row per
class line of each histogram; ``class`` without the `` (module@version)`` suffix, which goes to
``module``.

What HotSpot prints (``KlassInfoHisto::print_histo_on`` and ``KlassInfoEntry::print_on`` in
``src/hotspot/share/memory/heapInspection.cpp``; the same in JDK 17, 21 and 25)::

    12345:
     num     #instances         #bytes  class name (module)
    -------------------------------------------------------
       1:        150000       12000000  [B (java.base@17.0.15)
       2:          1000          64000  com.example.agent.RunnerCache$Entry
    Total        151000       12064000

``jcmd`` prints the ``<pid>:`` line, the JVM only the table: a row is ``%4d: `` then the count
and bytes right-aligned in 13 columns, then the name and, for a class of a named module,
`` (module)`` or `` (module@version)``. JDK 8's ``jmap -histo`` header reads ``class name`` with
no module. A file may hold several histograms, each after an optional time line an operator's
script wrote (``2026-11-29 03:00:00`` on the JVM's wall clock, or ISO with an offset).

Times follow the thread dumps' rules: a time without a zone is read in the manifest's
``timezone``; otherwise a UTC time in the file name (``histo-2026-11-29T03:00:00Z.txt``) fixes
the host's offset (rounded to 15 minutes), or is the time itself of a file's only histogram
without a time line. Without either the rows still load, with ``taken_at`` unknown and a warning.
A path whose name holds ``*``, ``?`` or ``[`` is a pattern, expanded in name order.
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
from incidentkit.sources.evidence_files import expand_paths, iter_lines, require_content
from incidentkit.sources.jvm.clock import file_time, host_offset, utc_of, wall_time
from incidentkit.sources.loaded import Loaded, RejectSink, taken_within
from incidentkit.times import zone_of

_A = re.ASCII
_HEADER = re.compile(r"^num\s+#instances\s+#bytes\s+class name(?:\s+\(module\))?$", _A)
_RULE = re.compile(r"^-{10,}$")
_ROW = re.compile(r"^(\d+):\s+(\d+)\s+(\d+)\s+(\S.*)$", _A)
_TOTAL = re.compile(r"^Total\s+(\d+)\s+(\d+)$", _A)
_MODULE = re.compile(r"[\w.$-]+(?:@[^()\s]*)?", _A)
_PID = re.compile(r"^\d+:$", _A)
_ROWISH = re.compile(r"^\d+:\s", _A)
"""A line shaped like a table row, readable or not (``12:  5  80`` lacks its class)."""
_TIME = r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?"
_LOCAL_TIME = re.compile(_TIME + "$", _A)
_ISO_TIME = re.compile(_TIME + r"(?:Z|[+-]\d\d:?\d\d)$", _A)
_FAILED = "ERROR: Ran out of C-heap"
_INT64 = 2**63 - 1
_DIGITS = 19  # int64 has at most 19 digits: longer text is never converted
COLUMNS = ("histogram", "taken_at", "rank", "class", "module", "instances", "bytes")


@dataclass
class _Histogram:
    lineno: int
    time: str | None  # the time line before it, as written
    rows: list[tuple[int, str, str | None, int, int]] = field(default_factory=list)
    total: tuple[int, int] | None = None
    failed: bool = False


def load(spec: SourceSpec, filters: Filters, *, environ: Mapping[str, str] | None = None) -> Loaded:
    """Read every histogram file of ``spec`` (in order) into the ``class_histograms`` frame."""
    sink = RejectSink("histograms")
    parts: list[pd.DataFrame] = []
    for path in expand_paths(spec.paths, what="histograms"):
        require_content(path, what="histograms")
        histograms = _parse(path, sink)
        times = _times(histograms, path, sink, zone=zone_of(spec.naive_timestamps))
        for i, (histo, taken_at) in enumerate(zip(histograms, times, strict=True)):
            if not histo.rows:
                continue
            part = pd.DataFrame(
                histo.rows, columns=["rank", "class", "module", "instances", "bytes"]
            )
            part.insert(0, "taken_at", pd.Series([taken_at] * len(part), dtype="object"))
            part.insert(
                0, "histogram", path.name if len(histograms) == 1 else f"{path.name}#{i + 1}"
            )
            parts.append(part)
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=list(COLUMNS))
    frame["taken_at"] = pd.to_datetime(frame["taken_at"], utc=True).dt.as_unit("ns")
    frame = taken_within(frame, filters)
    return Loaded(
        frames={"class_histograms": conform("class_histograms", frame)},
        rejects=sink.frame(),
        warnings=sink.warnings(),
    )


def _parse(path: Path, sink: RejectSink) -> list[_Histogram]:
    """The histograms of one file; unreadable table lines go to ``sink``."""
    histograms: list[_Histogram] = []
    histo: _Histogram | None = None  # the open table (header seen, no Total yet)
    pending_time: str | None = None
    for lineno, text, _complete in iter_lines(path, what="histograms", sink=sink):
        line = text.strip()
        if _HEADER.match(line):
            if histo is not None:
                _truncated(path, histo, sink)
            histo = _Histogram(lineno, pending_time)
            histograms.append(histo)
            pending_time = None
        elif line.startswith(_FAILED):
            sink.add(f"{path.name}:{lineno}", "the JVM printed no histogram: " + line, text)
            if histo is not None:
                _truncated(path, histo, sink)
            histograms.append(_Histogram(lineno, pending_time, failed=True))
            histo, pending_time = None, None
        elif histo is None:  # text around the tables: pid line, time line, command echo
            if _LOCAL_TIME.match(line) or _ISO_TIME.match(line):
                pending_time = line
            elif _ROWISH.match(line) or _TOTAL.match(line):
                sink.add(
                    f"{path.name}:{lineno}",
                    "class histogram line outside a table (no ' num  #instances  #bytes  class "
                    "name' header before it)",
                    text,
                )
        elif _RULE.match(line):
            continue
        elif (total := _TOTAL.match(line)) is not None:
            if max(len(total[1]), len(total[2])) <= _DIGITS:
                histo.total = (int(total[1]), int(total[2]))
                _check_total(path, lineno, histo, sink)
            else:
                sink.add(f"{path.name}:{lineno}", "a number does not fit in 64 bits", text)
            histo = None
        elif (row := _ROW.match(line)) is not None:
            _add_row(path, lineno, histo, row, text, sink)
        elif _PID.match(line) or _LOCAL_TIME.match(line) or _ISO_TIME.match(line):
            _truncated(path, histo, sink)  # the next histogram begins: this one was cut
            histo = None
            pending_time = None if _PID.match(line) else line
        else:
            sink.add(f"{path.name}:{lineno}", "not a class histogram row", text)
    if histo is not None:
        _truncated(path, histo, sink)
    if not histograms:
        raise SourceError(
            f"histograms: {path.name} holds no class histogram",
            value=str(path),
            fix="give the output of jcmd <pid> GC.class_histogram (a ' num  #instances  "
            "#bytes  class name' header, one row per class, a Total line)",
        )
    return histograms


def _add_row(
    path: Path, lineno: int, histo: _Histogram, row: re.Match[str], text: str, sink: RejectSink
) -> None:
    digits = max(len(row[1]), len(row[2]), len(row[3]))
    rank, instances, size = (int(row[k]) if digits <= _DIGITS else 0 for k in (1, 2, 3))
    if digits > _DIGITS or max(rank, instances, size) > _INT64:
        sink.add(f"{path.name}:{lineno}", "a number does not fit in 64 bits", text)
        return
    name, module = row[4].rstrip(), None
    at = name.rfind(" (") if name.endswith(")") else -1
    if at > 0 and _MODULE.fullmatch(name, at + 2, len(name) - 1):
        name, module = name[:at].rstrip(), name[at + 2 : -1]
    histo.rows.append((rank, name, module, instances, size))


def _check_total(path: Path, lineno: int, histo: _Histogram, sink: RejectSink) -> None:
    """Warn when the Total line disagrees with the rows read (rows edited out or rejected)."""
    assert histo.total is not None
    instances = sum(r[3] for r in histo.rows)
    size = sum(r[4] for r in histo.rows)
    if (instances, size) != histo.total:
        sink.warn(
            f"{path.name}:{lineno}",
            f"the Total line says {histo.total[0]} instances and {histo.total[1]} bytes, the "
            f"rows read add up to {instances} and {size}",
        )


def _truncated(path: Path, histo: _Histogram, sink: RejectSink) -> None:
    sink.add(
        f"{path.name}:{histo.lineno}",
        f"histogram truncated: no Total line after its {len(histo.rows)} rows; the classes "
        "after them are missing",
        None,
    )


def _times(
    histograms: list[_Histogram], path: Path, sink: RejectSink, *, zone: str | None
) -> list[pd.Timestamp | None]:
    """The UTC time each histogram was taken (see the module docstring); None when unknown."""
    written = [None if h.time is None else wall_time(h.time) for h in histograms]
    named = file_time(path.name)
    naive = [t for t in written if t is not None and t.tzinfo is None]
    offset = host_offset(naive, named, zone=zone)
    if offset is None:
        sink.warn(
            f"{path.name}:{histograms[0].lineno}",
            "histogram time is the host's local time without a zone, so taken_at is "
            'unknown: set timezone = "UTC" (or the JVM\'s zone, e.g. "Europe/Berlin") in '
            "[histograms], or put the UTC time in the file name, e.g. "
            "histo-2026-11-29T03:00:00Z.txt",
        )
    times: list[pd.Timestamp | None] = []
    for histo, wall in zip(histograms, written, strict=True):
        if wall is not None and wall.tzinfo is not None:
            times.append(wall.tz_convert("UTC"))
        elif wall is not None:
            times.append(utc_of(wall, zone=zone, offset=offset))
        elif named is not None and len(histograms) == 1:
            times.append(named.tz_convert("UTC"))
        else:
            times.append(None)
            if histo.rows:
                why = (
                    f"its time line {histo.time!r} is no date the kit can hold"
                    if histo.time is not None
                    else "no time line before it"
                )
                sink.warn(
                    f"{path.name}:{histo.lineno}",
                    f"histogram has {why}, so taken_at is unknown (write `date -u "
                    "+%Y-%m-%dT%H:%M:%SZ` before each jcmd call, or put the UTC time in the "
                    "file name)",
                )
    return times
