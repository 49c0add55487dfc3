"""Evidence files opened and read as text: patterns expanded, a missing, folder or empty file
refused with a SourceError, lines read with a bounded length (a bad line is a reject)."""

from __future__ import annotations

import io
from collections.abc import Generator
from pathlib import Path
from typing import Any, TextIO

from incidentkit import progress
from incidentkit.errors import SourceError
from incidentkit.sources.loaded import RejectSink

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
