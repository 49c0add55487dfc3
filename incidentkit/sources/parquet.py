"""Snapshot sections (``format = "parquet"``): the frames a source gave, frozen in Parquet.

``incidentkit snapshot`` (:mod:`incidentkit.snapshot`) writes one folder per section holding a
``<frame>.parquet`` for each frame the section gives, plus its ``rejects`` and ``warnings``.
Each frame holds everything its source held; :func:`load` cuts it to the filters the way that
source's own reader does (the window, app, sessions and invocations), so a flow reads the
same rows from a snapshot as from the evidence it was taken of.

Payload columns (JSON objects, lists, stacks) are stored as JSON text and decoded on load;
every other column keeps its Arrow type (text, UTC nanosecond times, nullable integers).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from incidentkit.errors import SourceError
from incidentkit.frames import OBJ, TUPLE_COLUMNS, conform, empty, rejects_frame, spec_of
from incidentkit.manifest import Filters, SourceSpec
from incidentkit.sources import diagnostics, jfr, journal, ledger, session_state, spans
from incidentkit.sources.adk_events import SESSION_KEYS, matches
from incidentkit.sources.base import (
    Loaded,
    bulk_decoding,
    concat_rejects,
    fast_loads,
    taken_within,
)
from incidentkit.sources.tables import Layout, filter_mask

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
    with bulk_decoding():  # payload columns decode to many dicts (crash_recovery: 0.36 -> 0.26 s)
        frames = {name: read_frame(folder, name) for name in SECTION_FRAMES[spec.section]}
        rejects, warnings = (read_frame(folder, name) for name in EXTRA)
    narrowed = _NARROW[spec.section](frames, filters)
    if spec.section == "jfr" and _emptied(frames, narrowed) and filters.window is not None:
        span = [f["ts"].agg(how) for f in frames.values() if len(f) for how in ("min", "max")]
        names = pd.concat([f["recording"] for f in frames.values()]).dropna().unique()
        note = {"source": "jfr", "location": ", ".join(names), "raw": None}
        note["reason"] = jfr.outside_window(span, filters.window)
        warnings = concat_rejects([warnings, rejects_frame([note], "warnings")])
    return Loaded(frames=narrowed, rejects=rejects, warnings=warnings)


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


def column_values(spec: SourceSpec, name: str, column: str) -> list[str]:
    """The distinct values of one text column of a snapshot frame, read without the rest."""
    path = _folder(spec) / f"{name}{SUFFIX}"
    try:
        values = _read(path, [column]).column(column).unique()
    except (OSError, KeyError, pa.ArrowException) as err:
        raise SourceError(
            f"the snapshot's {name} frame is not a readable Parquet file ({err})",
            value=str(path),
            fix="take the snapshot again: incidentkit snapshot EVIDENCE --out DIR",
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


def read_frame(folder: Path, name: str) -> pd.DataFrame:
    """The ``name`` frame of a snapshot folder, conformed (an absent file: an empty frame)."""
    path = folder / f"{name}{SUFFIX}"
    if not path.is_file():
        if name in EXTRA:
            return empty(name)
        raise SourceError(
            f"the snapshot lacks its {name} frame",
            value=str(path),
            fix="take the snapshot again: incidentkit snapshot EVIDENCE --out DIR",
        )
    try:
        table = _read(path)
    except (OSError, pa.ArrowException) as err:
        raise SourceError(
            f"the snapshot's {name} frame is not a readable Parquet file ({err})",
            value=str(path),
            fix="take the snapshot again: incidentkit snapshot EVIDENCE --out DIR",
        ) from err
    wanted = spec_of(name).names
    missing = [col for col in wanted if col not in table.column_names]
    if missing:
        raise SourceError(
            f"the snapshot's {name} frame lacks columns {missing}",
            value=str(path),
            fix="take the snapshot again with this version of incidentkit",
        )
    frame = table.select(wanted).to_pandas()
    for col, dtype in spec_of(name).columns:
        if dtype == OBJ:
            decode = _decoded_tuples if (name, col) in TUPLE_COLUMNS else _decoded
            frame[col] = decode(frame[col], where=path)
    return conform(name, frame)


_THREADED = 4 << 20
"""A Parquet file this large (bytes) is decoded on Arrow's threads."""


def _read(path: Path, columns: list[str] | None = None) -> pa.Table:
    """One Parquet file as a table. ``ParquetFile`` reads it directly: ``pq.read_table`` goes
    through pyarrow.dataset, whose first use in a process costs some 0.2 s (a snapshot of
    19 files: 0.07 s, against 0.25 s). A small file is read on one thread: starting the
    thread pool costs more than it saves (the first file: 18 ms, against 20-77 ms); a large
    one on Arrow's threads (a 494k-row snapshot's 19 files, warm: 0.14 s, against 0.20 s)."""
    with pq.ParquetFile(path) as file:
        return file.read(columns=columns, use_threads=path.stat().st_size >= _THREADED)


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
            fix="take the snapshot again: incidentkit snapshot EVIDENCE --out DIR",
        ) from err


# -- the filters, as each source applies them ---------------------------------------------------


def _table(layout: Layout) -> Callable[[Frames, Filters], Frames]:
    def narrow(frames: Frames, filters: Filters) -> Frames:
        frame = frames[layout.frame]
        return {layout.frame: _rows(frame, filter_mask(layout, frame, filters))}

    return narrow


def _events(frames: Frames, filters: Filters) -> Frames:
    """Events in the filters, numbered again within their sessions (``seq`` counts the events
    a read keeps); their calls, responses and writes follow them; stored state as a store's
    reader keeps it."""
    events = frames["events"]
    kept = _rows(events, matches(events, filters))
    out = {"session_state": _state(frames["session_state"], filters)}
    if len(kept) == len(events):
        return {**{name: frames[name] for name in SECTION_FRAMES["events"][:4]}, **out}
    kept["seq"] = kept.groupby(list(SESSION_KEYS), sort=False).cumcount()
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
