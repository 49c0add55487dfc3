"""The BigQuery Agent Analytics table (``agent_events``) as evidence, read from its exports.

ADK's ``BigQueryAgentAnalyticsPlugin`` (Python and Java write the same table) logs a row per
callback: ``timestamp, event_id, event_type, agent, session_id, invocation_id, user_id,
trace_id, span_id, parent_span_id, content (JSON), content_parts (REPEATED RECORD), attributes
(JSON), latency_ms (JSON: total_ms, time_to_first_token_ms), status, error_message,
is_truncated``. Read as ``bq extract`` writes it: newline-delimited JSON (JSON columns as JSON
text, TIMESTAMP as ``2026-12-06 19:38:32.036391 UTC``, NULLs left out; or JSON columns as
nested objects and RFC 3339 times) and Parquet. Detected by its columns: ``event_type`` beside
``content_parts``, ``attributes`` or ``latency_ms``.

The rows become the canonical frames the flows read, not a frame of their own: the events
frames (:mod:`.bigquery_events`, through the one normaliser) and the diagnostics frame
(:func:`diagnostics`: the run times the plugin measured). What the table cannot tell is
:data:`LIMITS`; what one export shows of them is in its warnings (:func:`limit_rows`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from incidentkit.errors import SchemaError, SourceError
from incidentkit.frames import TS, conform, empty, to_numbers
from incidentkit.manifest import Filters, SourceSpec
from incidentkit.sources.events.adk_columns import IS_TRUE, NONE, Bools, mask, not_of
from incidentkit.sources.evidence_files import expand_paths, require_content
from incidentkit.sources.json_files import iter_json_line_chunks
from incidentkit.sources.json_text import parse_json_values
from incidentkit.sources.loaded import Loaded, RejectSink
from incidentkit.sources.process_memory import bulk_decoding
from incidentkit.times import Naive, parse_utc

FORMAT = "bigquery-agent-analytics"
COLUMNS = (
    *("timestamp", "event_id", "event_type", "agent", "session_id", "invocation_id"),
    *("user_id", "trace_id", "span_id", "parent_span_id", "content", "content_parts"),
    *("attributes", "latency_ms", "status", "error_message", "is_truncated"),
)
"""The plugin's columns (``_get_events_schema``; ``event_id`` since 2025, so it may be absent)."""
TEXT = (
    *("event_id", "event_type", "agent", "session_id", "invocation_id", "user_id"),
    *("trace_id", "span_id", "parent_span_id", "status", "error_message"),
)
JSON_COLUMNS = ("content", "attributes", "latency_ms")
REQUIRED = ("timestamp", "event_type", "session_id", "invocation_id")
_MARKS = ("content_parts", "attributes", "latency_ms")
"""With ``event_type``, any of these says a row is the plugin's."""
REDACTED = "[REDACTED]"
"""What the plugin logs in place of a ``temp:`` or secret-like key's value."""
LIMITS: Mapping[str, str] = {
    "redacted": "temp: and secret-like state keys are logged as [REDACTED]: their values are "
    "unknown, so those writes are left out and no verdict (TEMP_PREFIX or any other) rests "
    "on them",
    "dropped": "the plugin drops rows when its queue is full or a batch write fails: an "
    "invocation without INVOCATION_COMPLETED is open, or its rows were dropped",
    "truncated": "text past the plugin's max_content_length (500 KB by default) is truncated "
    "(is_truncated) or offloaded to GCS",
    "call_ids": "function calls and responses carry no call ids (but paused long-running "
    "ones): they pair by name and order",
    "user_delta": "a user message's state delta is not logged: it is read from the session "
    "state the plugin logs before and after it (attributes.session_metadata.state)",
    "markers": "compaction and rewind events ADK appends after an invocation, and the "
    "summariser's model call, are not logged",
}
"""What the table cannot tell, in words a flow repeats."""
OPEN = (
    "no INVOCATION_COMPLETED or INVOCATION_ERROR: the invocation is open, or the plugin "
    "dropped its rows (its queue was full or a batch write failed)"
)
TRUNCATED = "is_truncated: the plugin cut this row's text (max_content_length)"
OFFLOADED = "content offloaded to GCS: the row keeps its first 200 characters and the URI"
HIDDEN = "state keys logged as [REDACTED] (temp: or secret-like): their values are unknown"
DUPLICATE = "a row with the event_id of an earlier row (a retried write): read once"
_PARQUET_MAGIC = b"PAR1"
_PEEK = 20


# -- detection ----------------------------------------------------------------------------------


def looks_like(record: Any) -> bool:
    """Whether a record is a row of the plugin's table: ``event_type`` and ``timestamp`` with
    one of the plugin's own columns."""
    return (
        isinstance(record, dict)
        and isinstance(record.get("event_type"), str)
        and "timestamp" in record
        and any(mark in record for mark in _MARKS)
    )


def is_parquet(path: Path) -> bool:
    """Whether ``path`` is a Parquet file (its magic bytes); False when it cannot be read."""
    try:
        with path.open("rb") as handle:
            return handle.read(4) == _PARQUET_MAGIC
    except OSError:
        return False


def parquet_columns(path: Path) -> list[str]:
    """The column names of a Parquet file (none when it cannot be read)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return list(pq.read_schema(path).names)
    except (pa.ArrowException, OSError):
        return []


def detect(path: Path) -> bool:
    """Whether ``path`` holds the plugin's rows: a Parquet file with its columns, or JSON
    lines whose first records are its rows."""
    if is_parquet(path):
        names = set(parquet_columns(path))
        return {"event_type", "timestamp"} <= names and bool(names & set(_MARKS))
    from incidentkit.sources.evidence_files import iter_lines

    try:
        for _, text, _ in _first(iter_lines(path, what=FORMAT)):
            try:
                record = json.loads(text)
            except (ValueError, RecursionError):
                continue
            return looks_like(record)
    except SourceError:
        return False
    return False


def _first(lines: Iterable[tuple[int, str, bool]]) -> Iterable[tuple[int, str, bool]]:
    for n, line in enumerate(lines):
        if n >= _PEEK:
            return
        yield line


# -- reading ------------------------------------------------------------------------------------


def read(paths: Iterable[Path], sink: RejectSink, *, naive: Naive) -> pd.DataFrame:
    """The rows of every file, in file order: one row per table row the kit can read, its
    JSON columns decoded and the ``attributes`` fields the frames need taken out. An
    unreadable row is a reject (its ``file:line`` or ``file:row N``, and why); a repeated
    ``event_id`` (a retried write) is read once, with a warning."""
    with bulk_decoding():  # millions of fresh dicts: no cycles to collect
        parts = [
            _parquet(path, naive) if is_parquet(path) else _json_lines(path, sink, naive)
            for path in paths
        ]
        return rows_of(parts, sink, naive=naive)


def rows_of(parts: Iterable[pd.DataFrame], sink: RejectSink, *, naive: Naive) -> pd.DataFrame:
    """The rows of one source from its parts (each :func:`frame_of` a file or a batch of a
    live read), in order: checked (rejects to ``sink``), read once per ``event_id``, and the
    ``attributes`` fields the frames need taken out. Every reader of the table ends here."""
    kept = [part for part in parts if len(part)]
    rows = pd.concat(kept, ignore_index=True) if kept else frame_of({}, [], naive)
    rows["pos"] = np.arange(len(rows), dtype=np.int64)
    return _derived(_deduplicated(_checked(rows, sink), sink))


def _json_lines(path: Path, sink: RejectSink, naive: Naive) -> pd.DataFrame:
    require_content(path, what=FORMAT)
    records: list[dict[str, Any]] = []
    locations: list[str] = []
    for chunk, where in iter_json_line_chunks(path, sink, what=FORMAT, size=None):
        records.extend(chunk)
        locations.extend(where)
    columns = {col: [r.get(col) for r in records] for col in COLUMNS}
    frame = frame_of(columns, locations, naive)
    frame["raw"] = _objects(records)
    return frame


def _parquet(path: Path, naive: Naive) -> pd.DataFrame:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as err:
        raise SourceError(
            f"{FORMAT}: not a Parquet file the kit can read ({str(err)[:200]})",
            value=str(path),
            fix="export the table again: bq extract --destination_format PARQUET",
        ) from err
    missing = [col for col in REQUIRED if col not in table.column_names]
    if missing:
        raise SchemaError(
            f"{FORMAT}: the Parquet file lacks columns of the plugin's table",
            value=f"{missing} in {path}",
            fix="export the agent_events table itself (every column), or name the format "
            "the file is in",
        )
    columns: dict[str, Any] = {}
    for col in COLUMNS:
        if col not in table.column_names:
            continue
        column = table.column(col)
        if col == "timestamp" and pa.types.is_timestamp(column.type):
            columns[col] = pd.Series(column.to_pandas()).reset_index(drop=True)
        else:
            columns[col] = column.to_pylist()
    locations = [f"{path.name}:row {n}" for n in range(1, table.num_rows + 1)]
    return frame_of(columns, locations, naive)


def frame_of(columns: Mapping[str, Any], locations: list[str], naive: Naive) -> pd.DataFrame:
    """One file's (or batch's) rows: every column of :data:`COLUMNS` as objects (absent:
    None), ``ts`` parsed from ``timestamp`` (text, or a column of aware times)."""
    n = len(locations)
    data: dict[str, Any] = {"location": pd.Series(locations, dtype=object)}
    for col in COLUMNS[1:]:
        values = np.empty(n, dtype=object)
        values[:] = columns.get(col, [None] * n)
        data[col] = values
    ts, why = _times(columns.get("timestamp"), n, naive)
    data["ts"], data["ts_reason"] = ts.to_numpy(), why.to_numpy(dtype=object)
    # JSON columns as objects (a nested export): a text value is then a JSON string itself
    data["nested"] = any(not set(map(type, data[col])) <= {str, NONE} for col in JSON_COLUMNS)
    data["raw"] = None  # the row as read: JSON lines keep their record
    return pd.DataFrame(data, index=pd.RangeIndex(n))


def _times(stamps: Any, n: int, naive: Naive) -> tuple[pd.Series, pd.Series]:
    """``timestamp`` as UTC times, with the reason of each one that is unreadable."""
    if isinstance(stamps, pd.Series):  # a Parquet TIMESTAMP column
        times, reasons = parse_utc(stamps, naive=naive)
        reasons[times.isna() & reasons.isna()] = "timestamp is missing"
        return times, reasons
    values = pd.Series([None] * n if stamps is None else stamps, dtype=object)
    text = values.map(lambda v: v if isinstance(v, str) else None)
    why = pd.Series(None, index=values.index, dtype=object)
    why[values.isna()] = "timestamp is missing"
    wrong = values.notna() & text.isna()
    why[wrong] = "timestamp is not text: " + values[wrong].map(repr).str.slice(0, 80)
    # bq extract writes TIMESTAMP as "2026-12-06 19:38:32.036391 UTC"
    iso = text.astype("str").str.replace(r"\s+UTC$", "+00:00", regex=True)
    times, reasons = parse_utc(iso, naive=naive)
    return times, why.where(why.notna(), reasons)


def _checked(rows: pd.DataFrame, sink: RejectSink) -> pd.DataFrame:
    """The rows the kit can read, their JSON columns decoded; the others go to ``sink``."""
    reasons = rows["ts_reason"].copy()

    def flag(bad: Any, why: str | pd.Series) -> None:
        if bad is None:
            return
        hit = pd.Series(bad, index=rows.index).fillna(False).astype(bool) & reasons.isna()
        if hit.any():
            reasons[hit] = why if isinstance(why, str) else why[hit]

    for col in REQUIRED[1:]:
        flag(rows[col].isna(), f"{col} is missing")
    for col in TEXT:
        wrong = _wrong_type(rows[col], (str,))
        if wrong is not None:
            flag(wrong, f"{col} is not text: " + rows[col].map(repr).str.slice(0, 80))
    text = ~rows["nested"].astype(bool)
    for col in JSON_COLUMNS:
        decoded, why = parse_json_values(rows[col].where(text & rows[col].notna(), None))
        flag(why.notna(), f"{col} is not JSON text: " + why.astype("str"))
        rows[col] = rows[col].where(~text, decoded.where(why.isna(), None))
    for col in ("attributes", "latency_ms"):
        flag(_wrong_type(rows[col], (dict,)), f"{col} is not an object")
    parts = rows["content_parts"]
    flag(_wrong_type(parts, (list,)), "content_parts is not a list of parts")
    if any(not_of(p, (dict,)) is not None for p in parts.tolist() if type(p) is list and p):
        flag(~mask(parts.tolist(), _parts_ok), "content_parts is not a list of parts")
    flag(_wrong_type(rows["is_truncated"], (bool,)), "is_truncated is not true or false")
    bad = reasons.notna()
    for i in np.flatnonzero(bad.to_numpy()):  # the rejected rows only
        row = rows.iloc[i]
        sink.add(str(row["location"]), str(reasons.iloc[i]), _raw_text(row))
    return rows.loc[~bad].drop(columns=["ts_reason", "raw", "nested"]).reset_index(drop=True)


def _parts_ok(value: Any) -> bool:
    return type(value) is not list or all(type(p) is dict for p in value)


def _wrong_type(values: pd.Series, allowed: tuple[type, ...]) -> Bools | None:
    """Where a value is present but of none of the ``allowed`` types (None: nowhere)."""
    listed = values.tolist()
    if set(map(type, listed)) <= {*allowed, NONE}:
        return None
    present: Bools = values.notna().to_numpy()
    return present & ~mask(listed, lambda v: type(v) in allowed)


def _raw_text(row: pd.Series) -> str:
    """A rejected row as JSON text: the line as read, or a Parquet row's columns."""
    raw = row["raw"]
    shown = raw if raw is not None else {c: row[c] for c in COLUMNS[1:] if row[c] is not None}
    return json_text(shown)


def json_text(value: Any) -> str:
    """A logged value as JSON text (at most 500 characters), for a reject's ``raw``."""
    try:
        return json.dumps(value, default=str, ensure_ascii=False)[:500]
    except (RecursionError, ValueError):  # nested past the recursion limit
        return f"<{type(value).__name__} nested too deeply to show>"


def _deduplicated(rows: pd.DataFrame, sink: RejectSink) -> pd.DataFrame:
    """The first row of each ``event_id``; the later copies (a retried write) warned."""
    named = rows["event_id"].notna()
    again = named & rows["event_id"].duplicated(keep="first")
    for location, row_id in zip(
        rows.loc[again, "location"], rows.loc[again, "event_id"], strict=True
    ):
        sink.warn(str(location), DUPLICATE, row_id)
    return rows.loc[~again].reset_index(drop=True)


def _get(objs: pd.Series, *path: str) -> pd.Series:
    """The value at ``path`` in each object (None where a step is not an object)."""
    out = objs.tolist()
    for key in path:
        out = [v.get(key) if type(v) is dict else None for v in out]
    return pd.Series(out, index=objs.index, dtype=object)


def _text(value: Any) -> str | None:
    return value if type(value) is str and value else None


ATTRIBUTE_PATHS: Mapping[str, str] = {
    "source_event_id": "$.adk.source_event_id",
    "branch": "$.adk.branch",
    "pause_kind": "$.adk.pause_kind",
    "function_call_id": "$.adk.function_call_id",
    "rewind_before": "$.adk.rewind_before_invocation_id",
    "source_author": "$.source_event_author",
}
"""The text fields of ``attributes`` the frames read (column → JSON path, as the plugin's
views and ``JSON_VALUE`` write it)."""
APP_PATHS = ("$.adk.app_name", "$.session_metadata.app_name")
"""Where a row names its app, the first that holds text winning."""
STATE_PATH = "$.session_metadata.state"
"""The session's state as the plugin logged it with a row."""


def _keys(path: str) -> tuple[str, ...]:
    return tuple(path.removeprefix("$.").split("."))


def _at(value: Any, keys: tuple[str, ...]) -> Any:
    """The value at ``keys`` in ``value`` (None where a step is not an object)."""
    for key in keys:
        value = value.get(key) if type(value) is dict else None
    return value


def _derived(rows: pd.DataFrame) -> pd.DataFrame:
    """The fields of ``attributes`` the frames read, as columns (one pass over the rows)."""
    fields = {name: _keys(path) for name, path in ATTRIBUTE_PATHS.items()}
    apps = [_keys(path) for path in APP_PATHS]
    *meta_keys, state_key = _keys(STATE_PATH)
    columns: dict[str, list[Any]] = {name: [] for name in ("app_name", *fields, "snapshot")}
    for attrs in rows["attributes"].tolist():
        columns["app_name"].append(
            next((app for keys in apps if (app := _text(_at(attrs, keys))) is not None), None)
        )
        for name, keys in fields.items():
            columns[name].append(_text(_at(attrs, keys)))
        meta = _at(attrs, tuple(meta_keys))
        state = meta.get(state_key) if type(meta) is dict else None
        # the session's state as logged: None when not logged, {} for a session without one
        columns["snapshot"].append(
            (state if type(state) is dict else {} if state is None else None)
            if type(meta) is dict
            else None
        )
    out = rows.assign(**{name: _objects(values) for name, values in columns.items()})
    out["is_truncated"] = mask(rows["is_truncated"].tolist(), IS_TRUE)
    return out


def _objects(values: list[Any]) -> np.ndarray[Any, np.dtype[np.object_]]:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def terminal_responses(rows: pd.DataFrame) -> pd.Series:
    """Which ``LLM_RESPONSE`` rows a finished model call wrote: a streamed partial chunk has
    neither ``finish_reason`` nor ``cache_type``. Rows of an invocation whose responses all
    lack both (a plugin older than ``cache_type``) all count."""
    response = rows["event_type"].eq("LLM_RESPONSE")
    marked = pd.Series(mask(rows["attributes"].tolist(), _finished), index=rows.index, dtype=bool)
    any_marked = marked.where(response, False).groupby(rows["invocation_id"]).transform("any")
    final: pd.Series = response & (marked | ~any_marked.astype(bool))
    return final


def _finished(attrs: Any) -> bool:
    return type(attrs) is dict and (
        attrs.get("finish_reason") is not None or attrs.get("cache_type") is not None
    )


def hidden(value: Any, depth: int = 0) -> bool:
    """Whether a logged value is, or holds, the plugin's ``[REDACTED]``."""
    if value == REDACTED:
        return True
    if depth > 32:
        return False
    if isinstance(value, dict):
        return any(hidden(v, depth + 1) for v in value.values())
    if isinstance(value, list):
        return any(hidden(v, depth + 1) for v in value)
    return False


# -- what the rows show of the table's limits -----------------------------------------------------


def warn_limits(rows: pd.DataFrame, sink: RejectSink) -> None:
    """Warn of invocations that started and never ended in the rows (open, or dropped)."""
    starts = rows.loc[rows["event_type"].eq("INVOCATION_STARTING")]
    ended = rows.loc[rows["event_type"].isin(["INVOCATION_COMPLETED", "INVOCATION_ERROR"])]
    unended = starts.loc[~starts["invocation_id"].isin(ended["invocation_id"])]
    unended = unended.drop_duplicates("invocation_id")
    for location, invocation in zip(unended["location"], unended["invocation_id"], strict=True):
        sink.warn(str(location), OPEN, invocation)


def warn_truncation(rows: pd.DataFrame, sink: RejectSink) -> None:
    """Warn of rows whose text the plugin truncated or offloaded to GCS."""
    for location in rows.loc[rows["is_truncated"], "location"]:
        sink.warn(str(location), TRUNCATED)
    for location, parts in zip(rows["location"], rows["content_parts"], strict=True):
        if type(parts) is not list or not parts:
            continue
        uris = [p.get("uri") for p in parts if p.get("storage_mode") == "GCS_REFERENCE"]
        if uris:
            sink.warn(str(location), OFFLOADED, ", ".join(map(str, uris)))


def limit_rows(warnings: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per limit of :data:`LIMITS` (by name), its row: the limit, the source, and what a
    source's ``warnings`` show of it here (empty when nothing)."""
    seen = {str(reason): group for reason, group in warnings.groupby("reason")}

    def shown(reason: str) -> tuple[int, str]:
        group = seen.get(reason)
        if group is None:
            return 0, ""
        raws = group["raw"].dropna().astype(str)
        found = sorted({item for raw in raws for item in raw.split(", ")})
        return len(group), ", ".join(found[:8]) + (" ..." if len(found) > 8 else "")

    hid, keys = shown(HIDDEN)
    unended, ids = shown(OPEN)
    cut, _ = shown(TRUNCATED)
    away, _ = shown(OFFLOADED)
    here = {
        "redacted": f"keys logged as [REDACTED]: {keys}" if hid else "",
        "dropped": f"{unended} invocation(s) without INVOCATION_COMPLETED (open, or dropped by "
        f"the plugin): {ids}"
        if unended
        else "",
        "truncated": f"{cut} row(s) with truncated text, {away} offloaded to GCS"
        if cut or away
        else "",
    }
    return {
        name: {"limit": limit, "source": FORMAT, "here": here.get(name, "")}
        for name, limit in LIMITS.items()
    }


def hidden_keys(warnings: pd.DataFrame) -> frozenset[str]:
    """The state keys a source's warnings say the plugin logged as ``[REDACTED]``."""
    raws = warnings.loc[warnings["reason"].eq(HIDDEN), "raw"].dropna().astype(str)
    return frozenset(key for raw in raws for key in raw.split(", ") if key)


# -- diagnostics ----------------------------------------------------------------------------------

KINDS = {
    "INVOCATION_STARTING": "run.start",
    "INVOCATION_COMPLETED": "run.end",
    "INVOCATION_ERROR": "run.end",
    "LLM_ERROR": "model.error",
    "TOOL_ERROR": "tool.error",
}
"""The rows the diagnostics frame holds, and the plugin line each stands for (an
``INVOCATION_ERROR`` also gives a ``run.error`` line)."""


def load_diagnostics(
    spec: SourceSpec, filters: Filters, *, environ: Mapping[str, str] | None = None
) -> Loaded:
    """``[diagnostics] format = "bigquery-agent-analytics"``: the run times and errors the
    plugin logged, as the diagnostics plugin's lines; from the exports (``path``), or from the
    table itself (``url`` naming ``bigquery://PROJECT/DATASET``, :mod:`.bigquery_live`)."""
    sink = RejectSink("diagnostics")
    with bulk_decoding():  # the rows' decoded JSON makes no reference cycles
        if spec.is_database:
            from incidentkit.sources.events import bigquery_live

            rows = bigquery_live.read(spec, filters, environ, sink, what="diagnostics")
        else:
            paths = expand_paths(spec.paths, what="diagnostics")
            rows = read(paths, sink, naive=spec.naive_timestamps)
        return diagnostics_loaded(rows, filters, sink)


def diagnostics_loaded(rows: pd.DataFrame, filters: Filters, sink: RejectSink) -> Loaded:
    """The diagnostics frame of the table's ``rows`` (exported or live) for ``filters``, with
    the rejects and warnings of ``sink``."""
    from incidentkit.sources.diagnostics import narrow

    warn_limits(rows, sink)
    frame = narrow(diagnostics(rows), filters).reset_index(drop=True)
    return Loaded(
        frames={"diagnostics": conform("diagnostics", frame)},
        rejects=sink.frame(),
        warnings=sink.warnings(),
    )


def diagnostics(rows: pd.DataFrame) -> pd.DataFrame:
    """The diagnostics frame of ``rows``: ``run.start``/``run.end`` (``ms`` the plugin's
    ``latency_ms.total_ms``, ``llm_calls`` the finished model calls since the run started),
    ``run.error``, ``model.error``, ``tool.error``, in time order."""
    if rows.empty:
        return empty("diagnostics")
    rows = rows.sort_values(["ts", "pos"], kind="stable")
    calls = _calls_per_run(rows)
    kept = rows.loc[rows["event_type"].isin(list(KINDS))]
    failed = kept.loc[kept["event_type"].eq("INVOCATION_ERROR")]
    lines = pd.concat(
        [kept.assign(kind=kept["event_type"].map(KINDS)), failed.assign(kind="run.error")]
    ).sort_values(["ts", "pos"], kind="stable")
    is_end = lines["kind"].eq("run.end")
    outcome = lines["event_type"].map({"INVOCATION_COMPLETED": "ok", "INVOCATION_ERROR": "error"})
    total = to_numbers(_get(lines["latency_ms"], "total_ms"))
    whole = total.notna() & total.ge(0) & total.eq(total.round())
    tool = _get(lines["content"], "tool").map(_text).where(lines["kind"].eq("tool.error"), None)
    frame = pd.DataFrame(
        {
            "ts": lines["ts"].astype(TS),
            "level": np.where(lines["status"].eq("ERROR"), "ERROR", "INFO"),
            "kind": lines["kind"],
            "invocation_id": lines["invocation_id"],
            "app_name": lines["app_name"],
            "user_id": lines["user_id"],
            "session_id": lines["session_id"],
            "agent": lines["agent"],
            "tool": tool,
            "call_id": lines["function_call_id"],
            "outcome": outcome.where(is_end, None),
            "ms": total.where(whole).astype("Int64"),
            "llm_calls": calls.reindex(lines.index).where(is_end).astype("Int64"),
            "message": _messages(lines),
            "line": _lines(lines),
            "location": lines["location"],
        }
    )
    return frame


def _calls_per_run(rows: pd.DataFrame) -> pd.Series:
    """For each row (in time order), the finished model calls of its invocation since its
    latest ``INVOCATION_STARTING`` (a resumed invocation starts again)."""
    started = rows["event_type"].eq("INVOCATION_STARTING").astype(np.int64)
    run = started.groupby(rows["invocation_id"]).cumsum()
    made = terminal_responses(rows).astype(np.int64)
    counted: pd.Series = made.groupby([rows["invocation_id"], run]).cumsum()
    return counted


def _messages(lines: pd.DataFrame) -> pd.Series:
    """``<event_type>: <error_message>``, then the exception line a traceback ends with."""
    error = lines["error_message"].astype("str")
    head = lines["event_type"].astype("str") + (": " + error).fillna("")
    trace = _get(lines["content"], "error_traceback").map(_last_line)
    return (head + ("\n" + trace.astype("str")).fillna("")).astype(object)


def _last_line(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    found = [line for line in value.strip().splitlines() if line.strip()]
    return found[-1].strip() if found else None


_LINE_COLUMNS = ("event_type", "agent", "session_id", "invocation_id", "status", "error_message")


def _lines(lines: pd.DataFrame) -> list[str]:
    """Each line's ``line``: its row's time and identity columns as JSON (the content and
    attributes stay in the events frames)."""
    stamps = lines["ts"].map(lambda t: t.isoformat())
    columns = [stamps, *(lines[col] for col in _LINE_COLUMNS)]
    names = ("timestamp", *_LINE_COLUMNS)
    return [
        json.dumps({k: v for k, v in zip(names, values, strict=True) if isinstance(v, str)})
        for values in zip(*columns, strict=True)
    ]
