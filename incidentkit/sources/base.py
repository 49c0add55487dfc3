"""Pieces every loader shares: the Loaded result, the reject sink, JSON lines, time parsing."""

from __future__ import annotations

import ctypes
import gc
import io
import json
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, cast

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from incidentkit import progress
from incidentkit.errors import SourceError
from incidentkit.frames import rejects_frame
from incidentkit.manifest import Filters


@dataclass(frozen=True)
class Loaded:
    """What one source produced: canonical frames by name, the rows it rejected, and what it
    read but found odd or incomplete (``warnings``: rows that were read, not rejects)."""

    frames: Mapping[str, pd.DataFrame]
    rejects: pd.DataFrame
    warnings: pd.DataFrame = field(default_factory=lambda: rejects_frame([], "warnings"))


@dataclass
class RejectSink:
    """Collects rejected rows of one source; ``frame()`` turns them into the rejects frame."""

    source: str
    rows: list[dict[str, object]] = field(default_factory=list)
    warned: list[dict[str, object]] = field(default_factory=list)

    def warn(self, location: str, reason: str, raw: object = None) -> None:
        """Note evidence that was read but is odd or incomplete (not a reject)."""
        self.warned.append(
            {"source": self.source, "location": location, "reason": reason, "raw": raw}
        )

    def warnings(self) -> pd.DataFrame:
        return rejects_frame(self.warned, "warnings")

    def add(self, location: str, reason: str, raw: object = None) -> None:
        self.rows.append(
            {"source": self.source, "location": location, "reason": reason, "raw": raw}
        )

    def add_many(self, locations: pd.Series, reasons: pd.Series, raws: pd.Series) -> None:
        """Reject the rows where ``reasons`` is not null (all three series share an index)."""
        mask = reasons.notna()
        if not mask.any():
            return
        for loc, reason, raw in zip(locations[mask], reasons[mask], raws[mask], strict=True):
            self.add(str(loc), str(reason), raw)

    def frame(self) -> pd.DataFrame:
        return rejects_frame(self.rows)


def taken_within(frame: pd.DataFrame, filters: Filters) -> pd.DataFrame:
    """The rows of a dump or histogram frame ``taken_at`` in the window; one of unknown time is
    kept (its header was reported unreadable, the dump itself still tells)."""
    if filters.window is None:
        return frame
    taken = frame["taken_at"]
    inside = taken.ge(filters.window.start) & taken.lt(filters.window.end)
    return frame.loc[inside | taken.isna()]


def require_content(path: Path, *, what: str) -> None:
    """Refuse a file that is empty or holds only whitespace (or a BOM): a source must say
    something.

    Reads a chunk at a time and stops at the first byte that is not whitespace.
    """
    with _open_binary(path, what=what) as handle:
        chunk = handle.read(1 << 20).removeprefix(b"\xef\xbb\xbf")  # a BOM says nothing
        while chunk:
            if chunk.strip():
                return
            chunk = handle.read(1 << 20)
    raise SourceError(
        f"{what}: the file is empty",
        value=str(path),
        fix="export the evidence again, or remove the file from the manifest",
    )


_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
)  # built once: json.dumps with options builds an encoder per call, half its cost on small args


def canonical_json(value: Any) -> str:
    """Canonical JSON text of ``value``: sorted keys, no spaces (equal args give equal text)."""
    return _CANONICAL.encode(value)


@contextmanager
def bulk_decoding() -> Iterator[None]:
    """Pause the cyclic garbage collector while JSON is decoded in bulk.

    Decoded JSON makes no reference cycles, yet the collector's passes over millions of fresh
    dicts and lists cost more than the decoding (read_json_lines on 200k ADK events: 2.4x).
    Nests: only the outermost exit turns the collector back on, and only if it was on.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def release_memory() -> None:
    """Hand memory the process has freed back to the system: Arrow's pool keeps what it
    frees for reuse, and glibc's malloc keeps freed blocks inside its heap (after one large
    free it serves blocks of up to 32 MB from the heap instead of mapping them). Only the
    free pages go; nothing that is in use moves. A no-op where malloc is not glibc's."""
    pa.default_memory_pool().release_unused()
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return cast(Callable[[int], int], ctypes.CDLL(None).malloc_trim)
    except (OSError, AttributeError, TypeError):  # not glibc: macOS, musl; Windows (TypeError)
        return None


_MALLOC_TRIM = _malloc_trim()


def open_text(
    path: Path,
    *,
    what: str,
    encoding: str = "utf-8",
    errors: str = "strict",
    newline: str | None = None,
) -> TextIO:
    """Open an evidence file for reading text; a missing file is a SourceError saying so."""
    handle: TextIO = _opened(path, what, "r", encoding=encoding, errors=errors, newline=newline)
    return handle


def _open_binary(path: Path, *, what: str) -> io.BufferedReader:
    handle: io.BufferedReader = _opened(path, what, "rb")
    return handle


def _opened(path: Path, what: str, mode: str, **options: Any) -> Any:
    """``path.open(mode)``; a missing file or a folder is a SourceError saying so."""
    try:
        return path.open(mode, **options)
    except FileNotFoundError as err:
        raise SourceError(
            f"{what}: file not found", value=str(path), fix="check the path in the manifest"
        ) from err
    except IsADirectoryError as err:
        raise SourceError(
            f"{what}: the path is a folder, not a file",
            value=str(path),
            fix="name the file itself in the manifest (paths = [...] lists several)",
        ) from err


MAX_LINE_BYTES = 32 << 20
"""The longest line a text source may hold (32 MiB); a longer one is a reject, never read whole."""
_BINARY_PROBE = 1024


def iter_lines(
    path: Path, *, what: str, sink: RejectSink | None = None
) -> Generator[tuple[int, str, bool]]:
    """Yield ``(line number, text, ends_with_newline)`` of a UTF-8 text file, skipping blanks.

    A line that is not UTF-8, or longer than :data:`MAX_LINE_BYTES`, is rejected into ``sink``
    (skipped when there is none) and the rest of the file is read; memory stays bounded by the
    limit. A file with a NUL byte in its first KiB is not text: a SourceError.
    """
    with _open_binary(path, what=what) as handle:
        if b"\0" in handle.peek(_BINARY_PROBE)[:_BINARY_PROBE]:
            raise SourceError(
                f"{what}: the file is binary, not text",
                value=str(path),
                fix="point the section at the text export; a SQLite store is given as "
                'path = "store.db" in [events]',
            )
        lineno = 0
        while raw := handle.readline(MAX_LINE_BYTES + 1):
            lineno += 1
            if not lineno % progress.BATCH:
                progress.advance(progress.BATCH)
            if len(raw) > MAX_LINE_BYTES:
                # Skip the rest of the line a bounded piece at a time; a line of exactly the
                # limit was read with its end, and the next line is left alone.
                rest = raw
                while not rest.endswith(b"\n") and (rest := handle.readline(MAX_LINE_BYTES)):
                    pass
                _reject_line(
                    sink, path, lineno, f"line longer than {MAX_LINE_BYTES >> 20} MiB", raw
                )
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                _reject_line(sink, path, lineno, f"not UTF-8 text (byte {err.start + 1})", raw)
                continue
            if lineno == 1:
                text = text.removeprefix("\ufeff")
            stripped = text.rstrip("\r\n")
            if stripped.strip():
                yield lineno, stripped, text.endswith("\n")
        progress.advance(lineno % progress.BATCH)  # read to the end (a peek stops before)


def _reject_line(sink: RejectSink | None, path: Path, lineno: int, reason: str, raw: bytes) -> None:
    if sink is not None:
        sink.add(f"{path.name}:{lineno}", reason, raw[:200].decode("utf-8", "replace"))


def read_json_lines(
    path: Path, sink: RejectSink, *, what: str
) -> tuple[list[dict[str, Any]], list[str]]:
    """Parse a JSON-lines file into objects and their ``file:line`` locations.

    A line that is not a JSON object becomes a reject; a last line cut off mid-record is
    rejected as a truncated file. :func:`iter_json_line_chunks` reads a chunk at a time.
    """
    records: list[dict[str, Any]] = []
    locations: list[str] = []
    for chunk, where in iter_json_line_chunks(path, sink, what=what, size=None):
        records.extend(chunk)
        locations.extend(where)
    return records, locations


def iter_json_line_chunks(
    path: Path, sink: RejectSink, *, what: str, size: int | None, decode: bool = True
) -> Iterator[tuple[list[Any], list[str]]]:
    """:func:`read_json_lines` in chunks of at most ``size`` objects (None: one chunk).

    Lines are decoded as the chunk fills, so only one chunk of objects is ever in memory;
    the rejects of a chunk's lines reach ``sink`` before the chunk is yielded.

    ``decode=False`` yields each line's JSON text instead, for a reader that decodes and
    checks a whole chunk itself (the events normaliser decodes by types); only a last line
    cut off mid-record is decoded here, to be rejected as a truncated file.
    """
    lines = iter_lines(path, what=what, sink=sink)
    name = path.name  # a property that builds its text each time it is read
    try:
        done = False
        while not done:
            records: list[Any] = []
            locations: list[str] = []
            with bulk_decoding():  # not across the yield: the consumer runs with gc as it was
                for lineno, text, complete in lines:
                    location = f"{name}:{lineno}"
                    value: Any = None
                    if decode:
                        value = _json_object(text, complete, location, sink)
                    elif complete or _json_object(text, complete, location, sink) is not None:
                        value = text  # only a cut-off last line is decoded, to name it
                    if value is not None:
                        records.append(value)
                        locations.append(location)
                        if size is not None and len(records) >= size:
                            break
                else:
                    done = True
            if records:
                yield records, locations
    finally:
        lines.close()  # an abandoned chunk iterator closes the file


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # Python's json reads NaN and Infinity; JSON has none


_DECODER = msgspec.json.Decoder()


def fast_loads(text: str) -> Any:
    """Decode JSON text as ``json.loads`` does (integers of any size kept exact): msgspec
    first (50k ADK events, GC paused: 0.15 s, json.loads 0.37 s); what it refuses (malformed
    text, NaN, a number past float's range, a lone surrogate, nesting past its limit) goes to
    ``json.loads``, whose result or error stands, but for a lone surrogate: see
    :func:`_python_loads`."""
    try:
        return _DECODER.decode(text)
    except msgspec.DecodeError:
        return _python_loads(text)


def loads(text: str) -> Any:
    """:func:`fast_loads` refusing NaN and Infinity (a ValueError, like any malformed text)."""
    try:
        return _DECODER.decode(text)
    except msgspec.DecodeError:
        return _python_loads(text, parse_constant=_no_constant)


def _python_loads(text: str, **options: Any) -> Any:
    """``json.loads``, refusing (a ValueError) half a UTF-16 pair (``"\\ud800"``, escaped or
    not): Python keeps it in a str no UTF-8, so no Arrow column and no report, can hold."""
    value = json.loads(text, **options)
    if not text.isascii() or "\\ud" in text.lower():
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as err:
            half = f"\\u{ord(err.object[err.start]):04x}"
            raise ValueError(
                f"{half} is half of a UTF-16 surrogate pair, not a character: the writer must "
                "escape both halves of the pair, or write the character itself"
            ) from None
    return value


JSON_ERRORS = (ValueError, RecursionError)
"""What ``json.loads`` raises: malformed text (JSONDecodeError, a ValueError), an integer past
Python's digit limit (ValueError), nesting past the recursion limit (RecursionError)."""


def json_failure(err: Exception) -> str:
    """A reject reason for one of :data:`JSON_ERRORS`."""
    if isinstance(err, json.JSONDecodeError):
        return f"malformed JSON ({err.msg} at column {err.colno})"
    if isinstance(err, RecursionError):
        return "JSON nested too deeply to read"
    return f"unreadable JSON value ({str(err).split(';')[0]})"


def _json_object(
    text: str, complete: bool, location: str, sink: RejectSink
) -> dict[str, Any] | None:
    """The JSON object on one line, or None after rejecting the line with a reason."""
    try:
        value = loads(text)
    except JSON_ERRORS as err:
        reason = (
            "truncated line: the file ends in the middle of a record"
            if not complete and isinstance(err, json.JSONDecodeError)
            else json_failure(err)
        )
        sink.add(location, reason, text)
        return None
    if not isinstance(value, dict):
        sink.add(location, f"expected a JSON object, got {type(value).__name__}", text)
        return None
    return value


def read_json_document(path: Path, *, what: str) -> Any:
    """Parse one JSON document; a truncated or malformed file is a SourceError."""
    with open_text(path, what=what) as handle:
        try:
            text = handle.read()
        except UnicodeDecodeError as err:
            raise SourceError(
                f"{what}: the JSON document is not UTF-8 text (byte {err.start + 1})",
                value=str(path),
                fix="export the file again as UTF-8 JSON",
            ) from err
    try:
        with bulk_decoding():
            return loads(text)
    except json.JSONDecodeError as err:
        truncated = err.pos >= len(text.rstrip()) - 1
        raise SourceError(
            f"{what}: {'truncated' if truncated else 'malformed'} JSON document "
            f"at line {err.lineno} column {err.colno}",
            value=str(path),
            fix="export the file again; a JSON document cannot be read in part",
        ) from err
    except JSON_ERRORS as err:
        raise SourceError(
            f"{what}: unreadable JSON document: {json_failure(err)}",
            value=str(path),
            fix="export the file again; a JSON document cannot be read in part",
        ) from err


def parse_json_values(values: pd.Series) -> tuple[pd.Series, pd.Series]:
    """Decode JSON text values (dicts and lists pass through); reasons say which failed."""
    raw = values.to_numpy(dtype=object)
    out = np.empty(len(raw), dtype=object)
    reasons = np.empty(len(raw), dtype=object)
    with bulk_decoding():
        present = pd.notna(raw)
        if values.dtype == "str" or pd.api.types.infer_dtype(raw, skipna=True) == "string":
            out[~present] = None
            try:  # all text: one pass in C, value by value only if one fails
                out[present] = np.fromiter(map(_DECODER.decode, raw[present]), dtype=object)
            except (msgspec.DecodeError, RecursionError):  # msgspec too refuses deep nesting
                _decode_each(raw, out, reasons)
        else:
            _decode_each(raw, out, reasons)
    return pd.Series(out, index=values.index, dtype=object), pd.Series(
        reasons, index=values.index, dtype=object
    )


def _decode_each(raw: Any, out: Any, reasons: Any) -> None:
    for i, value in enumerate(raw):
        if isinstance(value, str):
            try:
                out[i] = loads(value)
            except JSON_ERRORS as err:
                reasons[i] = json_failure(err)
        elif value is None or (isinstance(value, float) and np.isnan(value)):
            out[i] = None
        else:
            out[i] = value


def all_distinct(keys: pd.Series) -> bool:
    """Whether no key repeats: no two neighbours equal once sorted. 300k run ids in a fresh
    process: Arrow's sort 0.02 s; its hash kernels (``unique``, ``count_distinct``) and
    pandas' ``duplicated`` 0.2-0.4 s on their first call, 0.03-0.07 s after."""
    if keys.dtype == "str" and not keys.isna().any():
        if len(keys) < 2:
            return True
        values = pa.array(keys)
        ordered = values.take(pc.sort_indices(values))
        return not pc.any(pc.equal(ordered[1:], ordered[:-1])).as_py()
    return not keys.duplicated().any()


def concat_rejects(parts: Iterable[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate rejects frames, keeping the contract when all are empty."""
    frames = [part for part in parts if not part.empty]
    if not frames:
        return rejects_frame([])
    return pd.concat(frames, ignore_index=True)


_GLOB = frozenset("*?[")


def expand_paths(paths: tuple[Path, ...], *, what: str) -> list[Path]:
    """``paths`` with each pattern (``histograms/histo-*.txt``, ``pages/*.json``) replaced by
    its files in name order; a pattern that matches no file is a SourceError."""
    out: list[Path] = []
    for path in paths:
        if not _GLOB & set(path.name):
            out.append(path)
            continue
        found = sorted(p for p in path.parent.glob(path.name) if p.is_file())
        if not found:
            raise SourceError(
                f"{what}: the pattern matches no file",
                value=str(path),
                fix=f"check the pattern in [{what}] paths (relative to the manifest's folder)",
            )
        out += found
    return out
