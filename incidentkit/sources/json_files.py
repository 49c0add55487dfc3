"""JSON evidence files: JSON lines read whole or a chunk at a time (a bad line is a reject), and
one JSON document (a bad one is a SourceError)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from incidentkit.errors import SourceError
from incidentkit.sources.evidence_files import iter_lines, open_text
from incidentkit.sources.json_text import JSON_ERRORS, json_failure, loads
from incidentkit.sources.loaded import RejectSink
from incidentkit.sources.process_memory import bulk_decoding


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
    except JSON_ERRORS as err:
        if isinstance(err, json.JSONDecodeError):
            cut = "truncated" if err.pos >= len(text.rstrip()) - 1 else "malformed"
            problem = f"{cut} JSON document at line {err.lineno} column {err.colno}"
        else:
            problem = f"unreadable JSON document: {json_failure(err)}"
        raise SourceError(
            f"{what}: {problem}",
            value=str(path),
            fix="export the file again; a JSON document cannot be read in part",
        ) from err
