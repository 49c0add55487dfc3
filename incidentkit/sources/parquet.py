"""Snapshot sections (``format = "parquet"``): the frames a source gave, frozen in Parquet.

``incidentkit snapshot`` (:mod:`incidentkit.snapshot`) writes one folder per section holding a
``<frame>.parquet`` for each frame the section gives, plus its ``rejects`` and ``warnings``.
Each frame holds everything its source held; :func:`load` cuts it to the filters the way that
source's own reader does (the window, app, sessions and invocations), so a flow reads the
same rows from a snapshot as from the evidence it was taken of.

Payload columns (JSON objects, lists, stacks) are stored as JSON text and decoded on load;
every other column keeps its Arrow type (text, UTC nanosecond times, nullable integers).

The snapshot's record (:data:`RECORD`, beside its ``evidence.toml``) lists every part with its
rows and the sha256 of its bytes; a part that is missing, altered or another's is refused
before it is decoded. A snapshot without a record (taken before there was one) opens with a
warning that its parts cannot be verified.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Final, Literal

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from incidentkit.errors import SchemaError, SourceError
from incidentkit.frames import (
    BOOL,
    FLOAT,
    INT,
    LATER_COLUMNS,
    NINT,
    OBJ,
    STR,
    TS,
    TUPLE_COLUMNS,
    conform,
    empty,
    neutral,
    rejects_frame,
    spec_of,
)
from incidentkit.manifest import Filters, SourceSpec
from incidentkit.sources import diagnostics, spans
from incidentkit.sources.events import event_kinds, session_state
from incidentkit.sources.events.adk_events import SESSION_KEYS, matches
from incidentkit.sources.json_text import fast_loads
from incidentkit.sources.jvm import jfr
from incidentkit.sources.loaded import Loaded, all_distinct, concat_rejects, taken_within
from incidentkit.sources.process_memory import bulk_decoding
from incidentkit.sources.sql import journal, ledger
from incidentkit.sources.sql.tables import Layout, filter_mask

SECTION_FRAMES: Mapping[str, tuple[str, ...]] = {
    "ledger": ("runs",),
    "events": ("events", "calls", "responses", "state_writes", "session_state"),
    "journal": ("journal",),
    "spans": ("spans",),
    "diagnostics": ("diagnostics",),
    "threads": ("threads",),
    "histograms": ("class_histograms",),
    "jfr": ("jfr_samples", "jfr_allocations", "jfr_old_objects", "jfr_heap", "jfr_locks"),
}
"""The frames each section's folder holds (besides its rejects and warnings)."""
EXTRA = ("rejects", "warnings")
SUFFIX = ".parquet"
RECORD = "snapshot.json"
"""The snapshot's record of its parts, beside its ``evidence.toml``."""
RECORD_SCHEMA: Final = "incidentkit.snapshot/v1"
_AGAIN = "take the snapshot again: incidentkit snapshot EVIDENCE --out DIR"

Frames = dict[str, pd.DataFrame]


def load(
    spec: SourceSpec,
    filters: Filters,
    *,
    environ: Mapping[str, str] | None = None,
    lookup: Any = None,
) -> Loaded:
    """Read one snapshot section and keep what ``filters`` keep (``environ`` and ``lookup``
    are the other loaders' arguments: a snapshot needs neither)."""
    folder = _folder(spec)
    record = read_record(folder.parent)
    filled: dict[str, list[str]] = {}
    with bulk_decoding():  # payload columns decode to many dicts (crash_recovery: 0.36 -> 0.26 s)
        frames = {
            name: read_frame(folder, name, record=record, filled=filled)
            for name in SECTION_FRAMES[spec.section]
        }
        rejects, warnings = (read_frame(folder, name, record=record) for name in EXTRA)
    if record is None:
        warnings = concat_rejects([warnings, _unverified(spec.section, folder)])
    if filled:
        warnings = concat_rejects([warnings, _older(spec.section, folder, filled)])
    if spec.section == "events":
        _require_distinct_ids(frames["events"], folder / f"events{SUFFIX}")
    whole = Loaded(frames=frames, rejects=rejects, warnings=warnings)
    return narrowed(spec.section, whole, filters)


def narrowed(section: str, loaded: Loaded, filters: Filters) -> Loaded:
    """What ``section``'s own reader keeps of ``loaded`` (read with wider filters, or none)
    under ``filters``: the same rows, numbered and related as that read would; rejects and
    warnings as they were."""
    frames = dict(loaded.frames)
    kept = _NARROW[section](frames, filters)
    warnings = loaded.warnings
    if section == "jfr" and _emptied(frames, kept) and filters.window is not None:
        span = [f["ts"].agg(how) for f in frames.values() if len(f) for how in ("min", "max")]
        names = pd.concat([f["recording"] for f in frames.values()]).dropna().unique()
        note = {"source": "jfr", "location": ", ".join(names), "raw": None}
        note["reason"] = jfr.outside_window(span, filters.window)
        warnings = concat_rejects([warnings, rejects_frame([note], "warnings")])
    return Loaded(frames=kept, rejects=loaded.rejects, warnings=warnings)


def _folder(spec: SourceSpec) -> Path:
    folder = spec.paths[0] if len(spec.paths) == 1 else None
    if folder is None or not folder.is_dir():
        raise SourceError(
            f"{spec.section}: a parquet section reads one snapshot folder, and this is not one",
            value=spec.location(),
            fix=f"point path at the {spec.section}/ folder incidentkit snapshot wrote beside "
            "its evidence.toml, or take the snapshot again",
        )
    return folder


def _unverified(section: str, folder: Path) -> pd.DataFrame:
    note = {"source": section, "location": str(folder), "raw": None}
    note["reason"] = (
        f"the snapshot has no {RECORD} (taken before snapshots recorded their parts): its "
        "files cannot be verified (a snapshot taken again records them)"
    )
    return rejects_frame([note], "warnings")


def _older(section: str, folder: Path, filled: Mapping[str, list[str]]) -> pd.DataFrame:
    """A warning per frame read from a snapshot taken before it had some of its columns."""
    notes = [
        {
            "source": section,
            "location": str(folder / f"{name}{SUFFIX}"),
            "raw": None,
            "reason": f"the snapshot was taken before the {name} frame had the columns "
            f"{', '.join(columns)}: they read as unknown (a snapshot taken again has them)",
        }
        for name, columns in filled.items()
    ]
    return rejects_frame(notes, "warnings")


def _require_distinct_ids(events: pd.DataFrame, path: Path) -> None:
    """Refuse events that repeat an id: the kit's loaders keep each event once."""
    ids = events["event_id"]
    if all_distinct(ids):
        return
    repeated = ids[ids.duplicated(keep=False)]
    first = repeated.iloc[0]
    rows = repeated.index[repeated.eq(first) | (repeated.isna() & pd.isna(first))][:2].tolist()
    raise SourceError(
        f"the snapshot's events frame repeats event id {first!r} (rows {rows[0]} and "
        f"{rows[1]}): a snapshot holds each event once",
        value=str(path),
        fix=_AGAIN,
    )


def column_values(spec: SourceSpec, name: str, column: str) -> list[str]:
    """The distinct values of one text column of a snapshot frame, read without the rest."""
    path = _folder(spec) / f"{name}{SUFFIX}"
    try:
        values = _read(path, [column]).column(column).unique()
    except (OSError, KeyError, pa.ArrowException) as err:
        raise SourceError(
            f"the snapshot's {name} frame is not a readable Parquet file ({err})",
            value=str(path),
            fix=_AGAIN,
        ) from err
    return sorted(str(v) for v in values.to_pylist() if v is not None)


def _emptied(before: Frames, after: Frames) -> bool:
    return any(len(f) for f in before.values()) and not any(len(f) for f in after.values())


# -- frames in and out of Parquet ----------------------------------------------------------------


def frame_table(name: str, frame: pd.DataFrame) -> pa.Table:
    """``frame`` (a conformed ``name`` frame) as an Arrow table: payloads as JSON text."""
    columns: dict[str, Any] = {}
    for col, dtype in spec_of(name).columns:
        series = frame[col]
        columns[col] = (
            pd.Series([_encode(v) for v in series], dtype=object) if dtype == OBJ else series
        )
    return pa.Table.from_pandas(pd.DataFrame(columns), preserve_index=False)


def read_frame(
    folder: Path,
    name: str,
    *,
    record: Record | None = None,
    filled: dict[str, list[str]] | None = None,
) -> pd.DataFrame:
    """The ``name`` frame of a snapshot folder, conformed. With the snapshot's ``record`` the
    part is checked against it first; without (an older snapshot), an absent rejects or
    warnings part is an empty frame. Columns the frame gained after the snapshot was taken
    (:data:`~incidentkit.frames.LATER_COLUMNS`) read as their neutral value, and are listed in
    ``filled``."""
    path = folder / f"{name}{SUFFIX}"
    if record is None and not path.is_file():
        if name in EXTRA:
            return empty(name)
        raise SourceError(f"the snapshot lacks its {name} frame", value=str(path), fix=_AGAIN)
    source = path if record is None else pa.py_buffer(record.checked(path))
    try:
        table = _read(source)
    except (OSError, pa.ArrowException) as err:
        raise SourceError(
            f"the snapshot's {name} frame is not a readable Parquet file ({err})",
            value=str(path),
            fix=_AGAIN,
        ) from err
    if record is not None and table.num_rows != record.parts[part_key(path)].rows:
        raise SourceError(  # the bytes are the ones recorded: the record itself is wrong
            f"the snapshot's {RECORD} lists {record.parts[part_key(path)].rows:,} rows for "
            f"{part_key(path)}, which holds {table.num_rows:,}",
            value=str(path),
            fix=_RESTORE,
        )
    later = [c for c in LATER_COLUMNS.get(name, ()) if c not in table.column_names]
    _check_columns(table, name, path, absent=later)
    try:  # the pandas metadata is not read: a part's Arrow types are its contract
        present = [col for col in spec_of(name).names if col not in later]
        kept = table.select(present).replace_schema_metadata(None)
        frame = kept.to_pandas(types_mapper=_nullable)
        for col, dtype in spec_of(name).columns:
            if dtype == OBJ and col not in later:
                decode = _decoded_tuples if (name, col) in TUPLE_COLUMNS else _decoded
                frame[col] = decode(frame[col], where=path)
        for col in later:
            frame[col] = neutral(name, col, len(frame))
        if later and filled is not None:
            filled[name] = later
        return conform(name, frame[spec_of(name).names])
    except (pa.ArrowException, SchemaError, ValueError, TypeError, OverflowError) as err:
        raise SchemaError(
            f"the snapshot's {name} frame holds values the kit cannot read ({err})",
            value=str(path),
            fix=_AGAIN,
        ) from err


def _nullable(kind: pa.DataType) -> pd.api.extensions.ExtensionDtype | None:
    """Integers come back nullable (the writer's nullable counts); conform makes plain ones
    int64."""
    return pd.Int64Dtype() if kind == pa.int64() else None


def _text(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def _integer(kind: pa.DataType) -> bool:  # uint64 past int64 would wrap
    return pa.types.is_signed_integer(kind) or (
        pa.types.is_unsigned_integer(kind) and kind.bit_width < 64
    )


_ARROW_TYPES: Mapping[str, tuple[str, Callable[[pa.DataType], bool]]] = {
    STR: ("text", _text),
    OBJ: ("JSON text", _text),
    TS: ("times with a zone", lambda kind: pa.types.is_timestamp(kind) and kind.tz is not None),
    INT: ("integers", _integer),
    NINT: ("integers", _integer),
    BOOL: ("booleans", pa.types.is_boolean),
    FLOAT: ("numbers", lambda kind: pa.types.is_floating(kind) or _integer(kind)),
}
"""What each frame dtype is stored as (an all-null column may be Arrow's null type)."""


def _check_columns(table: pa.Table, name: str, path: Path, *, absent: list[str]) -> None:
    """Refuse a part that lacks a column (but those ``absent`` by its age) or repeats one,
    stores one as another type, or leaves a count that is never missing empty."""
    names, spec = table.column_names, spec_of(name)
    missing = [col for col in spec.names if col not in names and col not in absent]
    repeated = sorted({col for col in spec.names if names.count(col) > 1})
    problem = None
    if missing or repeated:
        problem = f"lacks columns {missing}" if missing else f"repeats columns {repeated}"
    for col, dtype in spec.columns if problem is None else ():
        if col in absent:
            continue
        column = table.column(col)
        what, fits = _ARROW_TYPES[dtype]
        if not (fits(column.type) or pa.types.is_null(column.type)):
            problem = f"stores column {col} as {column.type}, not {what}"
            break
        if dtype == INT and column.null_count:
            first = column.is_null().to_numpy(zero_copy_only=False).argmax()
            problem = f"leaves column {col} empty in {column.null_count} rows (first: row {first})"
            break
    if problem is not None:
        raise SchemaError(f"the snapshot's {name} frame {problem}", value=str(path), fix=_AGAIN)


_THREADED = 4 << 20
"""A Parquet file this large (bytes) is decoded on Arrow's threads."""


def _read(source: Path | pa.Buffer, columns: list[str] | None = None) -> pa.Table:
    """One Parquet file (or its bytes, read and checked already) as a table. ``ParquetFile``
    reads it directly: ``pq.read_table`` goes through pyarrow.dataset, whose first use in a
    process costs some 0.2 s (a snapshot of 19 files: 0.07 s, against 0.25 s). A small file is
    read on one thread: starting the thread pool costs more than it saves (the first file:
    18 ms, against 20-77 ms); a large one on Arrow's threads (a 494k-row snapshot's 19 files,
    warm: 0.14 s, against 0.20 s)."""
    where: Path | pa.BufferReader = source if isinstance(source, Path) else pa.BufferReader(source)
    size = source.stat().st_size if isinstance(source, Path) else source.size
    with pq.ParquetFile(where) as file:
        return file.read(columns=columns, use_threads=size >= _THREADED)


# -- the record of a snapshot's parts ------------------------------------------------------------


class Part(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One part of a snapshot as it was written: its rows and the sha256 of its bytes."""

    rows: Annotated[int, msgspec.Meta(ge=0)]
    sha256: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]


class Record(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A snapshot's :data:`RECORD`: every part, by its path in the snapshot folder."""

    schema: Literal["incidentkit.snapshot/v1"]
    parts: dict[str, Part]

    def checked(self, path: Path) -> bytes:
        """The bytes of the part at ``path``, refused unless they are the ones recorded."""
        key = part_key(path)
        expected = self.parts.get(key)
        if expected is None:
            found = "" if path.exists() else " (and the folder has none)"
            raise SourceError(
                f"the snapshot's {RECORD} lists no part {key}{found}",
                value=str(path),
                fix=f"open the snapshot folder the part was taken into, or {_AGAIN}",
            )
        said = f"its {RECORD} lists {_part(expected.rows, expected.sha256)}"
        try:
            data = path.read_bytes()
        except FileNotFoundError as err:
            raise SourceError(
                f"the snapshot lacks its part {key} ({said})", value=str(path), fix=_RESTORE
            ) from err
        except OSError as err:
            raise SourceError(
                f"cannot read the snapshot's part {key} ({err})",
                value=str(path),
                fix="check that the file can be read by this user",
            ) from err
        digest = hashlib.sha256(data).hexdigest()
        if digest != expected.sha256:
            same = sorted(
                (not name.startswith(f"{path.parent.name}/"), name)
                for name, part in self.parts.items()
                if part.sha256 == digest
            )  # another part's file, most likely one beside it
            whose = f": its bytes are those recorded for {same[0][1]}" if same else ""
            raise SourceError(
                f"the snapshot's part {key} is not the one it was taken with{whose} ({said}; "
                f"found {_part(_rows_in(data), digest)})",
                value=str(path),
                fix=_RESTORE,
            )
        return data


def part_key(path: Path) -> str:
    """The name of a part in the record: ``<section folder>/<frame>.parquet``."""
    return f"{path.parent.name}/{path.name}"


_RESTORE = "restore the snapshot's files as they were written, or " + _AGAIN
_RECORD_DECODER = msgspec.json.Decoder(Record)


def _part(rows: int | None, digest: str) -> str:
    counted = "rows unreadable" if rows is None else f"{rows:,} row{'' if rows == 1 else 's'}"
    return f"{counted}, sha256 {digest[:16]}…"


def _rows_in(data: bytes) -> int | None:
    """The rows a Parquet file says it holds; None when it is no Parquet file."""
    try:
        with pq.ParquetFile(pa.BufferReader(data)) as file:
            return int(file.metadata.num_rows)
    except (OSError, pa.ArrowException):
        return None


def read_record(root: Path) -> Record | None:
    """The record of the snapshot in ``root``; None when it has none (an older snapshot)."""
    path = root / RECORD
    try:
        return _RECORD_DECODER.decode(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, msgspec.DecodeError) as err:  # ValidationError is a DecodeError
        raise SourceError(
            f"the snapshot's {RECORD} is not a record incidentkit wrote ({err})",
            value=str(path),
            fix=_RESTORE,
        ) from err


def write_record(root: Path, rows: Mapping[str, int]) -> None:
    """Write the record of the parts ``rows`` names (``<section>/<frame>`` → rows) in the
    snapshot folder ``root``: the same parts give the same bytes."""
    parts = {
        f"{key}{SUFFIX}": Part(rows=count, sha256=_sha256(root / f"{key}{SUFFIX}"))
        for key, count in sorted(rows.items())
    }
    record = msgspec.to_builtins(Record(schema=RECORD_SCHEMA, parts=parts))
    (root / RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _encode(value: Any) -> str | None:
    """JSON text of a payload (None stays null). Python's encoder: NaN and big integers kept;
    a value JSON cannot hold is stored as its text."""
    if value is None:
        return None
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _decoded(texts: pd.Series, *, where: Path, tuples: bool = False) -> pd.Series:
    """Payloads from their JSON texts: the whole column decoded as one JSON array by msgspec,
    value by value only when a text needs Python's decoder (NaN, Infinity)."""
    values = texts.to_numpy(dtype=object)
    present = pd.notna(values)
    given = values[present]
    try:
        decoded = _COLUMN.decode("[" + ",".join(given) + "]")
    except msgspec.DecodeError:
        decoded = []
    if len(decoded) != len(given):  # NaN, or a text that is not one value ("1,2")
        decoded = [_decode(text, where) for text in given]
    out = np.full(len(values), None, dtype=object)
    out[present] = np.fromiter(decoded, dtype=object, count=len(decoded))  # no broadcasting
    if tuples:
        out = np.fromiter(
            (tuple(v) if isinstance(v, list) else () for v in out), dtype=object, count=len(out)
        )
    return pd.Series(out, index=texts.index, dtype=object)


def _decoded_tuples(texts: pd.Series, *, where: Path) -> pd.Series:
    """A tuple column from its JSON texts, each distinct text decoded once (most events'
    ``long_running_tool_ids`` are ``[]``, stacks repeat). Rows share a tuple only when it
    holds nothing mutable (text, numbers); else each row decodes its own."""
    codes, uniques = pd.factorize(texts.astype(object), use_na_sentinel=True)
    decoded = _decoded(pd.Series(uniques, dtype=object), tuples=True, where=where).to_numpy()
    if not all(type(item) in _SHAREABLE for value in decoded for item in value):
        return _decoded(texts, tuples=True, where=where)
    out = np.empty(len(codes), dtype=object)
    out[:] = [()] * len(codes)
    known = codes >= 0
    out[known] = decoded[codes[known]]
    return pd.Series(out, index=texts.index, dtype=object)


_COLUMN = msgspec.json.Decoder(list[Any])
_SHAREABLE = frozenset({str, int, float, bool, type(None)})


def _decode(text: str, where: Path) -> Any:
    """One payload, as Python's decoder reads it (NaN and Infinity included)."""
    try:
        return fast_loads(text)
    except (ValueError, RecursionError) as err:
        raise SourceError(
            f"the snapshot holds a payload that is not JSON ({err})",
            value=f"{where}: {text[:80]!r}",
            fix=_AGAIN,
        ) from err


# -- the filters, as each source applies them ---------------------------------------------------


def _table(layout: Layout) -> Callable[[Frames, Filters], Frames]:
    def narrow(frames: Frames, filters: Filters) -> Frames:
        frame = frames[layout.frame]
        return {layout.frame: _rows(frame, filter_mask(layout, frame, filters))}

    return narrow


def _events(frames: Frames, filters: Filters) -> Frames:
    """Events in the filters, numbered again within their sessions (``seq`` counts the events
    a read keeps) and related again (a compaction or rewind covers the events a read keeps:
    :func:`~incidentkit.sources.events.event_kinds.relations`); their calls, responses and writes
    follow them; stored state as a store's reader keeps it."""
    events = frames["events"]
    kept = _rows(events, matches(events, filters))
    out = {"session_state": _state(frames["session_state"], filters)}
    if len(kept) == len(events):
        return {**{name: frames[name] for name in SECTION_FRAMES["events"][:4]}, **out}
    kept["seq"] = kept.groupby(list(SESSION_KEYS), sort=False).cumcount()
    kept = kept.assign(**event_kinds.relations(kept))
    seq = kept.set_index("event_id")["seq"]
    for name in ("calls", "responses", "state_writes"):
        child = frames[name]
        child = _rows(child, child["event_id"].isin(seq.index))
        child["seq"] = child["event_id"].map(seq).astype("int64")
        out[name] = child
    return {"events": kept, **out}


_STORE_SOURCES = frozenset(f"{table}.state" for table in session_state.STORE_TABLES)


def _state(state: pd.DataFrame, filters: Filters) -> pd.DataFrame:
    """Stored state as its reader keeps it: rows of an ADK Python store as the store's query
    does (a session filter keeps its users' state and every app row), others as from files."""
    keep = pd.Series(True, index=state.index)
    if filters.app_name is not None:
        keep &= state["app_name"].eq(filters.app_name)
    if filters.session_ids:
        from_store = state["source"].isin(_STORE_SOURCES)
        in_sessions = state["session_id"].isin(filters.session_ids)
        of_sessions = from_store & state["scope"].eq("session") & in_sessions
        pairs = pd.MultiIndex.from_frame(state.loc[of_sessions, ["app_name", "user_id"]])
        users = pd.MultiIndex.from_frame(state[["app_name", "user_id"]]).isin(pairs)
        by_store = of_sessions | (state["scope"].eq("user") & users) | state["scope"].eq("app")
        keep &= (from_store & by_store) | (~from_store & in_sessions)
    return _rows(state, keep)


def _one(
    name: str, narrow: Callable[[pd.DataFrame, Filters], pd.DataFrame]
) -> Callable[[Frames, Filters], Frames]:
    def one(frames: Frames, filters: Filters) -> Frames:
        return {name: narrow(frames[name], filters).reset_index(drop=True)}

    return one


def _rows(frame: pd.DataFrame, keep: pd.Series) -> pd.DataFrame:
    return frame if bool(keep.all()) else frame.loc[keep].reset_index(drop=True)


_NARROW: Mapping[str, Callable[[Frames, Filters], Frames]] = {
    "ledger": _table(ledger.LAYOUT),
    "journal": _table(journal.LAYOUT),
    "events": _events,
    "spans": _one("spans", spans.narrow),
    "diagnostics": _one("diagnostics", diagnostics.narrow),
    "threads": _one("threads", taken_within),
    "histograms": _one("class_histograms", taken_within),
    "jfr": jfr.narrow,
}
