"""JDK Flight Recorder recordings: ``[jfr] path = "agent.jfr"``.

A binary recording (it starts with ``FLR\\0``, ``format = "jfr"``) is read through the JDK's own
``jfr print --json``, found on the ``PATH`` (else in ``$JAVA_HOME/bin``), asked for the event
types of :data:`~incidentkit.sources.jvm.jfr_events.EVENT_TYPES` only: the types that hold the
environment, system properties and process list never leave the JDK tool. Its output is decoded
as a stream (``ijson``), as is a JSON export given directly (``format = "jfr-json"``, the output
of ``jfr print --json``, also gzipped as ``.json.gz``): memory grows with the events kept, never
with the file (the JSON is ~30× the recording). Every other event type in an export is dropped
unread.

Frames: ``jfr_samples`` (execution and native-method samples), ``jfr_allocations``,
``jfr_old_objects``, ``jfr_heap`` (heap used before and after each GC) and ``jfr_locks``
(monitor enters and waits, thread parks). An event that lacks what its row needs is a reject
at ``file:event N``; JFR writes times with an offset, read as UTC.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import ijson
import pandas as pd

from incidentkit import progress
from incidentkit.errors import SourceError
from incidentkit.frames import conform
from incidentkit.manifest import Filters, SourceSpec, Window
from incidentkit.sources.evidence_files import expand_paths
from incidentkit.sources.jvm.jfr_events import (
    EVENT_TYPES,
    FRAME_OF,
    MAX_FRAMES,
    EventError,
    Texts,
    row,
)
from incidentkit.sources.loaded import Loaded, RejectSink
from incidentkit.sources.process_memory import bulk_decoding
from incidentkit.times import parse_utc

MAGIC = b"FLR\0"
_GZIP = b"\x1f\x8b"
TIMEOUT_S = 600.0
"""How long ``jfr print`` may take on one recording (it prints ~50 MB of JSON a second)."""
_EXPORT_START = re.compile(rb'^\s*\{\s*"recording"\s*:')
_ROWS: Mapping[str, tuple[str, ...]] = {
    "jfr_samples": ("ts", "event_type", "thread", "state", "frames"),
    "jfr_locks": ("ts", "event_type", "thread", "duration", "class", "previous_owner", "frames"),
    "jfr_allocations": ("ts", "thread", "class", "weight", "frames"),
    "jfr_old_objects": (
        *("ts", "thread", "class", "allocated_at", "heap_used", "array_elements", "frames"),
    ),
    "jfr_heap": ("ts", "gc_id", "when", "heap_used", "heap_committed"),
}
"""The fields of each frame's rows as :func:`.jfr_events.row` returns them."""
FRAMES = tuple(_ROWS)


def detect(path: Path) -> str:
    """``"jfr"`` for a binary recording, ``"jfr-json"`` for a (gzipped) JSON export."""
    with _opened(path) as handle:
        head = handle.read(4)
    if head == MAGIC:
        return "jfr"
    return "jfr-json"


def load(spec: SourceSpec, filters: Filters, *, environ: Mapping[str, str] | None = None) -> Loaded:
    """Read every recording of ``spec`` into the ``jfr_*`` frames (see the module docstring)."""
    sink = RejectSink("jfr")
    texts = Texts()
    rows: dict[str, list[tuple[Any, ...]]] = {name: [] for name in FRAMES}
    where: dict[str, list[str]] = {name: [] for name in FRAMES}
    recordings: dict[str, list[str]] = {name: [] for name in FRAMES}
    for path in expand_paths(spec.paths, what="jfr"):
        fmt = _format(path, spec.format)
        with _stream(path, fmt, environ) as stream:
            for index, kind, values in events(stream, path.name, sink):
                frame = FRAME_OF[kind]
                try:
                    rows[frame].append(row(kind, values, texts))
                except EventError as err:
                    sink.add(f"{path.name}:event {index + 1}", f"{kind}: {err}", kind)
                    continue
                where[frame].append(f"{path.name}:event {index + 1}")
                recordings[frame].append(path.name)
    span: list[pd.Timestamp] = []  # first and last time read, before the window cut
    frames = {
        name: _frame(name, rows[name], where[name], recordings[name], sink, filters, span)
        for name in FRAMES
    }
    if span and not any(len(frame) for frame in frames.values()) and filters.window is not None:
        sink.warn(", ".join(p.name for p in spec.paths), outside_window(span, filters.window))
    elif not any(len(frame) for frame in frames.values()):
        sink.warn(
            ", ".join(p.name for p in spec.paths),
            "the recording holds none of the events the kit reads ("
            + ", ".join(EVENT_TYPES)
            + "): record with settings=profile, or enable them in the .jfc (docs/jfr.md)",
        )
    return Loaded(frames=frames, rejects=sink.frame(), warnings=sink.warnings())


def outside_window(span: list[pd.Timestamp], window: Window) -> str:
    """The warning for a recording whose events (first to last in ``span``) all fall outside
    the window."""
    return (
        f"every event of the recording ({min(span).isoformat()} to {max(span).isoformat()})"
        f" falls outside the window ({window.start.isoformat()} to "
        f"{window.end.isoformat()}): record during the incident, or widen the window"
    )


def narrow(frames: Mapping[str, pd.DataFrame], filters: Filters) -> dict[str, pd.DataFrame]:
    """The ``jfr_*`` frames cut to the window (the other filters name no JFR column)."""
    if filters.window is None:
        return dict(frames)
    start, end = filters.window.start, filters.window.end
    return {
        name: frame.loc[frame["ts"].ge(start) & frame["ts"].lt(end)].reset_index(drop=True)
        for name, frame in frames.items()
    }


def events(
    stream: IO[bytes], name: str, sink: RejectSink
) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """``(index, type, values)`` of each event of an allowed type in a ``jfr print --json``
    stream, decoded one event at a time; any other event is dropped as soon as it is decoded,
    before its values are looked at. A stream cut or malformed part-way is one reject; the
    events before it are kept."""
    head = stream.read(256)
    if not _EXPORT_START.match(head):
        raise SourceError(
            f"jfr: {name} is not the output of jfr print --json",
            value=name,
            fix='give the recording itself (path = "agent.jfr"), or its export made with '
            "jfr print --json --stack-depth 64 agent.jfr > agent.json",
        )
    index = -1
    try:
        with bulk_decoding():
            replayed = _Replayed(head, stream)
            for index, event in enumerate(ijson.items(replayed, "recording.events.item")):
                if not (index + 1) % progress.BATCH:
                    progress.advance(progress.BATCH)  # every event read counts, kept or not
                kind = event.get("type") if isinstance(event, dict) else None
                if not isinstance(kind, str) or kind not in FRAME_OF:
                    continue  # not on the allowlist: dropped unread
                values = event.get("values")
                if not isinstance(values, dict):
                    sink.add(f"{name}:event {index + 1}", f"{kind}: no values object", kind)
                    continue
                yield index, str(kind), values
    except (ijson.JSONError, RecursionError, ValueError, EOFError, OSError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        sink.add(
            f"{name}:event {index + 2}",
            f"the JSON is cut or malformed after event {index + 1} ({reason[:120]}); "
            "no event after it is read",
            None,
        )


class _Replayed:
    """A byte stream whose first bytes were already read: they come first again."""

    def __init__(self, head: bytes, rest: IO[bytes]) -> None:
        self._head, self._rest = head, rest

    def read(self, size: int = -1) -> bytes:
        if not self._head:
            return self._rest.read(size)
        if size < 0:
            out, self._head = self._head + self._rest.read(), b""
            return out
        out, self._head = self._head[:size], self._head[size:]
        return out


def _format(path: Path, given: str | None) -> str:
    found = detect(path)
    if given is not None and given != found:
        what = "a binary recording" if found == "jfr" else "a JSON export, not a binary recording"
        raise SourceError(
            f"jfr: the file is {what}, but the manifest says format = {given!r}",
            value=str(path),
            fix=f'write format = "{found}", or leave format out to detect it',
        )
    return found


def _opened(path: Path) -> IO[bytes]:
    try:
        handle: IO[bytes] = path.open("rb")
    except FileNotFoundError as err:
        raise SourceError("jfr: file not found", value=str(path), fix="check the path") from err
    except IsADirectoryError as err:
        raise SourceError(
            "jfr: the path is a folder, not a recording",
            value=str(path),
            fix='name the file itself: path = "agent.jfr"',
        ) from err
    return handle


@contextmanager
def _stream(path: Path, fmt: str, environ: Mapping[str, str] | None) -> Iterator[IO[bytes]]:
    """The JSON of one recording as a byte stream: the file (gunzipped when it is gzip), or
    the output of ``jfr print`` on a binary recording."""
    if fmt == "jfr":
        with printed(path, environ=environ) as out:
            yield out
        return
    with _opened(path) as raw:
        if raw.read(2) == _GZIP:
            raw.seek(0)
            with gzip.open(raw, "rb") as unzipped:
                yield unzipped  # type: ignore[misc]
            return
        raw.seek(0)
        yield raw


def jfr_tool(environ: Mapping[str, str] | None = None) -> str:
    """The JDK's ``jfr`` on ``PATH``, else in ``$JAVA_HOME/bin``; a SourceError when neither
    has one."""
    env = os.environ if environ is None else environ
    found = shutil.which("jfr", path=env.get("PATH", os.defpath))
    home = env.get("JAVA_HOME")
    if found is None and home:
        candidate = Path(home) / "bin" / "jfr"
        found = str(candidate) if os.access(candidate, os.X_OK) else None
    if found is None:
        raise SourceError(
            "jfr: a binary recording is read through the JDK's jfr tool, and no JDK was found "
            "(jfr is not on the PATH, nor in $JAVA_HOME/bin)",
            # never the PATH itself: its folders name the host's tools and users, and the
            # message reaches findings and reports
            value=f"{len(env.get('PATH', '').split(os.pathsep))} PATH folders searched",
            fix="install a JDK 17 or later, or give the export instead: run "
            "jfr print --json --stack-depth 64 agent.jfr > agent.json where a JDK is, then "
            'path = "agent.json" (format = "jfr-json")',
        )
    return found


@contextmanager
def printed(
    path: Path, *, environ: Mapping[str, str] | None = None, timeout_s: float = TIMEOUT_S
) -> Iterator[IO[bytes]]:
    """The stdout of ``jfr print --json --events <allowlist>`` on ``path``, as it is written.

    The process is killed after ``timeout_s``; a timeout or a failure (its stderr's first line)
    is a SourceError once the output has been read.
    """
    command = [
        jfr_tool(environ),
        *("print", "--json", "--stack-depth", str(MAX_FRAMES)),
        *("--events", ",".join(EVENT_TYPES)),
        str(path),
    ]
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(  # a fixed command: the JDK's own tool
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=errors,
            env=None if environ is None else dict(environ),
        )
        expired = threading.Event()

        def kill() -> None:
            expired.set()
            process.kill()

        timer = threading.Timer(timeout_s, kill)
        timer.start()
        unread: SourceError | None = None
        try:
            assert process.stdout is not None
            with process.stdout as out:
                yield out
        except SourceError as err:  # e.g. no JSON at all: jfr's own reason says more
            unread = err
        finally:
            timer.cancel()
            if process.poll() is None and not expired.is_set():
                process.kill()  # the reader stopped early (an error): do not wait for the rest
            code = process.wait()
        if expired.is_set():
            raise SourceError(
                f"jfr: jfr print did not finish within {timeout_s:g} s",
                value=str(path),
                fix="export the recording once (jfr print --json --stack-depth 64 agent.jfr > "
                'agent.json) and give path = "agent.json", or cut it (jfr disassemble)',
            )
        if code != 0:
            errors.seek(0)
            lines = errors.read(4096).decode("utf-8", "replace").strip().splitlines()
            raise SourceError(
                f"jfr: jfr print failed (exit code {code}): "
                + (lines[0] if lines else "it printed no reason"),
                value=str(path),
                fix="check that the file is a complete JFR recording (jfr summary FILE); a "
                "recording of a newer JDK needs that JDK's jfr",
            ) from unread
        if unread is not None:
            raise unread


def _frame(
    name: str,
    records: list[tuple[Any, ...]],
    where: list[str],
    recordings: list[str],
    sink: RejectSink,
    filters: Filters,
    span: list[pd.Timestamp],
) -> pd.DataFrame:
    """The conformed ``name`` frame of its rows: times parsed (an unreadable one is a
    reject), durations in ms, the top frame beside each stack, ordered by recording and time."""
    fields = _ROWS[name]
    frame = (
        pd.DataFrame.from_records(records, columns=list(fields))
        if records
        else pd.DataFrame({field: pd.Series([], dtype=object) for field in fields})
    )
    frame.insert(0, "recording", pd.Series(recordings, dtype=object))
    ts, reasons = parse_utc(frame["ts"])
    reasons = reasons.mask(reasons.isna() & ts.isna(), "no startTime")
    sink.add_many(pd.Series(where, dtype=object), "startTime: " + reasons, frame["ts"])
    keep = reasons.isna()
    frame = frame.assign(ts=ts).loc[keep]
    if "frames" in frame:
        frame["top_frame"] = frame["frames"].map(lambda fs: fs[0] if fs else None)
    if "duration" in frame:
        took = pd.to_timedelta(frame.pop("duration"), errors="coerce")
        frame["duration_ms"] = took.dt.total_seconds() * 1000
    if "allocated_at" in frame:
        frame["allocated_at"] = parse_utc(frame["allocated_at"])[0]
    if len(frame):
        span += [frame["ts"].min(), frame["ts"].max()]
    if filters.window is not None:
        frame = frame.loc[frame["ts"].ge(filters.window.start) & frame["ts"].lt(filters.window.end)]
    position = pd.factorize(frame["recording"], sort=False)[0]
    frame = frame.assign(_at=position).sort_values(["_at", "ts"], kind="stable")
    return conform(name, frame)
