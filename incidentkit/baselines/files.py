"""The baseline aggregates over JSONL or Parquet exports, computed by DuckDB in-process.

DuckDB reads the files itself (``read_json_objects``, ``read_parquet``), so a week of events
never becomes Python objects: only the aggregates come back. The shapes read are the kit's
event lines (``docs/manifest.md``): events carrying ``appName``/``userId``/``sessionId``
(or snake_case), bare events (their app from ``[events] app_name``), and rows of an events
table with the event nested in ``event_column`` (an object or JSON text); a Parquet file is
read as such rows (``COPY adk_event TO 'events.parquet'``). Timestamps are epoch
milliseconds (ADK Java) or seconds (ADK Python), told apart as the normaliser does (at 1e11).

The per-event flags are those of :mod:`.queries`, in DuckDB's spelling of the feature set:
``json_extract_string``, ``floor``, ``quantile_cont``.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from incidentkit.baselines.queries import QUANTILES, bucket_frame, histogram_frame
from incidentkit.errors import SourceError
from incidentkit.manifest import Filters, SourceSpec
from incidentkit.sources.evidence_files import expand_paths

LINE_SUFFIXES = (".jsonl", ".ndjson", ".json")
PARQUET_SUFFIXES = (".parquet", ".pq")
MS_THRESHOLD = 1e11
MEMORY_LIMIT = "512MB"
"""DuckDB's own memory cap: it spills to disk past it, so a baseline never takes the host."""


def readable(spec: SourceSpec) -> bool:
    """Whether DuckDB can read ``spec``'s files here: event lines or Parquet rows (not a
    session document, a Vertex AI, Firestore or BigQuery Agent Analytics export, or a
    database)."""
    if spec.is_database or spec.format not in (None, "adk-java-json"):
        return False
    from incidentkit.sources.events import export_format

    if export_format(spec) is not None:  # its rows are not ADK events: the frames' path
        return False
    try:
        paths = expand_paths(spec.paths, what="events")
    except SourceError:
        return False
    if not paths:
        return False
    if all(p.suffix.lower() in PARQUET_SUFFIXES for p in paths):
        return _parquet_rows(paths[0], spec.event_column)
    if not all(p.suffix.lower() in LINE_SUFFIXES for p in paths):
        return False
    first = _first_record(paths[0])
    return isinstance(first, dict) and not isinstance(first.get("events"), list)


def _parquet_rows(path: Path, column: str) -> bool:
    """Whether a Parquet file holds events-table rows (an ``app_name`` and the event column),
    not frames of some other shape."""
    import duckdb

    conn = duckdb.connect(config={"autoload_known_extensions": False})
    try:
        rows = conn.execute("SELECT name FROM parquet_schema(?)", [str(path)]).fetchall()
    except duckdb.Error:
        return False
    finally:
        conn.close()
    return {"app_name", column} <= {str(row[0]) for row in rows}


def _first_record(path: Path) -> Any:
    try:
        with path.open(encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    return json.loads(line)
    except (OSError, ValueError):
        return None
    return None


def _source(spec: SourceSpec) -> tuple[str, list[str], bool, bool]:
    """The FROM clause yielding one JSON ``r`` per record, its paths, whether records are
    rows (the event nested), and whether they are ADK Python's (snake_case, seconds)."""
    paths = expand_paths(spec.paths, what="events")
    names = [str(p) for p in paths]
    if all(p.suffix.lower() in PARQUET_SUFFIXES for p in paths):
        return "(SELECT to_json(p) AS r FROM read_parquet($paths) p)", names, True, False
    first = _first_record(paths[0])
    first = first if isinstance(first, dict) else {}
    column = spec.event_column
    rows = isinstance(first.get(column), dict | str) and "author" not in first
    event = first.get(column) if rows else first
    if isinstance(event, str):
        try:
            event = json.loads(event)
        except ValueError:
            event = {}
    event = event if isinstance(event, dict) else {}
    stamp = event.get("timestamp")
    python = "invocation_id" in event or (isinstance(stamp, int | float) and stamp < MS_THRESHOLD)
    lines = (
        "(SELECT json AS r FROM read_json_objects($paths, format = 'newline_delimited', "
        "ignore_errors = true))"
    )
    return lines, names, rows, python


def _text(doc: str, *keys: str) -> str:
    """``COALESCE`` of the text at each JSON path ``keys`` (either key style)."""
    return "COALESCE(" + ", ".join(f"json_extract_string({doc}, '$.{k}')" for k in keys) + ")"


def _events_sql(
    spec: SourceSpec, filters: Filters, marked: Sequence[str] = ()
) -> tuple[str, dict[str, Any]]:
    """The per-invocation CTE over the files, and its parameters."""
    source, paths, rows, python = _source(spec)
    column = spec.event_column.replace("'", "''")
    if rows:
        doc = (
            f"CASE WHEN json_type(r, '$.{column}') = 'VARCHAR' "
            f"THEN CAST(json_extract_string(r, '$.{column}') AS JSON) "
            f"ELSE json_extract(r, '$.{column}') END"
        )
        app = _text("r", "app_name")
        session = _text("r", "session_id")
        nested = _text("doc", "invocationId", "invocation_id")
        inv = f"COALESCE({_text('r', 'invocation_id')}, {nested})"
    else:
        doc = "r"
        app = _text("r", "appName", "app_name")
        session = _text("r", "sessionId", "session_id")
        inv = _text("r", "invocationId", "invocation_id")
    params: dict[str, Any] = {"paths": paths, "marked": list(marked)}
    if spec.identity.get("app_name"):
        app = f"COALESCE({app}, $identity_app)"
        params["identity_app"] = spec.identity["app_name"]
    conditions = ["inv IS NOT NULL"]
    if filters.window is not None:
        conditions += ["s >= $w_start", "s < $w_end"]
        params["w_start"] = filters.window.start.timestamp()
        params["w_end"] = filters.window.end.timestamp()
    if filters.app_name is not None:
        conditions.append("app = $app_name")
        params["app_name"] = filters.app_name
    if filters.session_ids:
        conditions.append("list_contains($sids, session)")
        params["sids"] = list(filters.session_ids)
    if filters.invocation_ids:
        conditions.append("list_contains($invs, inv)")
        params["invs"] = list(filters.invocation_ids)
    parts = "COALESCE(json_extract_string(doc, '$.content.parts'), '')"
    partial = "COALESCE(json_extract_string(doc, '$.partial'), '') IN ('true', '1')"
    has_response = (
        f"({parts} LIKE '%\"functionResponse\":%' OR {parts} LIKE '%\"function_response\":%')"
    )
    has_call = f"({parts} LIKE '%\"functionCall\":%' OR {parts} LIKE '%\"function_call\":%')"
    code = _text("doc", "errorCode", "error_code")
    message = f"lower(COALESCE({_text('doc', 'errorMessage', 'error_message')}, ''))"
    refused = (
        f"(lower(COALESCE({code}, '')) LIKE '%llmcallslimitexceeded%' "
        f"OR {message} LIKE '%llmcallslimitexceeded%' OR {message} LIKE '%limit of %exceeded%')"
    )
    skip = _text("doc", "actions.skipSummarization", "actions.skip_summarization")
    long_running = _text("doc", "longRunningToolIds", "long_running_tool_ids")
    final = (
        f"(COALESCE({skip}, '') IN ('true', '1') OR COALESCE({long_running}, '[]') "
        f"NOT IN ('[]', 'null') OR (NOT {has_call} AND NOT {has_response} AND NOT {partial})"
        + (f" OR ({code} IS NOT NULL AND NOT {partial} AND NOT {has_call}))" if python else ")")
    )
    bare = f"({parts} IN ('', '[]', 'null'))"
    given = "(COALESCE({}, 'null') NOT IN ('null', ''))".format
    rewind = ("actions.rewindBeforeInvocationId", "actions.rewind_before_invocation_id")
    end = _text("doc", "actions.endOfAgent", "actions.end_of_agent")
    state = _text("doc", "actions.agentState", "actions.agent_state")
    marker = (
        f"({given(_text('doc', 'actions.compaction'))} OR {given(_text('doc', *rewind))} OR "
        f"({bare} AND (COALESCE({end}, '') IN ('true', '1') OR {given(state)})))"
    )
    conditions.append(f"NOT {marker}")  # no marker is a turn (sources/events/event_kinds.py)
    usage = _text("doc", "usageMetadata", "usage_metadata")
    model = (
        f"(COALESCE(json_extract_string(doc, '$.author'), 'user') <> 'user' "
        f"AND NOT {partial} AND NOT {has_response} AND NOT {refused} "
        f"AND (NOT {bare} OR {given(usage)}))"
    )
    stamp = "TRY_CAST(json_extract_string(doc, '$.timestamp') AS DOUBLE)"
    cte = f"""
WITH raw AS (SELECT {doc} AS doc, r FROM {source}),
keyed AS (
  SELECT doc, {app} AS app, {session} AS session, {inv} AS inv,
         CASE WHEN {stamp} >= {MS_THRESHOLD} THEN {stamp} / 1000.0 ELSE {stamp} END AS s
  FROM raw
),
flagged AS (
  SELECT inv, s,
         CASE WHEN {model} THEN 1 ELSE 0 END AS model,
         CASE WHEN {final} THEN 1 ELSE 0 END AS final,
         CASE WHEN {refused} THEN 1 ELSE 0 END AS refused,
         CASE WHEN {code} IS NOT NULL THEN 1 ELSE 0 END AS error,
         CASE WHEN list_contains($marked, inv) THEN 1 ELSE 0 END AS marked
  FROM keyed WHERE {" AND ".join(conditions)}
),
per_invocation AS (
  SELECT inv, SUM(model) AS model_calls, MAX(final) AS ended, MAX(refused) AS hit_limit,
         MAX(error) AS error, MAX(marked) AS marked, MIN(s) AS start_s, MAX(s) AS end_s,
         CASE WHEN MAX(CASE WHEN final = 1 THEN s END) >= MAX(s) THEN 1 ELSE 0 END AS last_final
  FROM flagged GROUP BY inv
),
runs AS (
  SELECT start_s, CASE WHEN last_final = 1 THEN (end_s - start_s) * 1000.0 END AS ms,
         last_final AS ended, error
  FROM per_invocation
)"""
    return cte, params


def _run(statement: str, params: dict[str, Any], *, what: str) -> list[tuple[Any, ...]]:
    """Run ``statement`` on a fresh in-memory DuckDB: no extension installed or loaded on its
    own, spills in a private temporary folder (removed after), nothing written elsewhere."""
    import duckdb

    spill = tempfile.mkdtemp(prefix="incidentkit-duckdb-")
    config: dict[str, str | bool | int | float | list[str]] = {
        "memory_limit": MEMORY_LIMIT,
        "threads": 2,
        "temp_directory": spill,
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
    }
    try:
        conn = duckdb.connect(config=config)
        try:
            rows: list[tuple[Any, ...]] = conn.execute(statement, params).fetchall()
        finally:
            conn.close()
    except duckdb.Error as err:
        raise SourceError(
            f"{what}: DuckDB could not read the files",
            value=str(err).splitlines()[0],
            fix="check that the files are JSON lines or Parquet exports of ADK events",
        ) from err
    finally:
        shutil.rmtree(spill, ignore_errors=True)
    return rows


def call_histogram(spec: SourceSpec, filters: Filters, marked: Sequence[str] = ()) -> pd.DataFrame:
    """:func:`incidentkit.baselines.queries.call_histogram` over files."""
    cte, params = _events_sql(spec, filters, marked)
    statement = (
        cte + "\nSELECT model_calls, ended, hit_limit, marked, count(*) FROM per_invocation "
        "WHERE model_calls > 0 GROUP BY ALL ORDER BY ALL"
    )
    return histogram_frame(_run(statement, params, what="events baseline"))


def latency_summary(spec: SourceSpec, filters: Filters) -> dict[str, float]:
    """:func:`incidentkit.baselines.queries.latency_summary` over the events of files."""
    cte, params = _events_sql(spec, filters)
    quantiles = ", ".join(f"quantile_cont(ms, {q}) FILTER (WHERE ended = 1)" for q in QUANTILES)
    statement = (
        cte + f"\nSELECT count(*), COALESCE(sum(ended), 0), COALESCE(sum(error), 0), {quantiles} "
        "FROM runs"
    )
    [row] = _run(statement, params, what="events baseline")
    out = {"runs": float(row[0]), "ended": float(row[1]), "errors": float(row[2])}
    for q, value in zip(QUANTILES, row[3:], strict=True):
        out[f"p{round(q * 100)}_ms"] = float("nan") if value is None else float(value)
    return out


def error_buckets(spec: SourceSpec, filters: Filters, size: pd.Timedelta) -> pd.DataFrame:
    """:func:`incidentkit.baselines.queries.error_buckets` over the events of files."""
    cte, params = _events_sql(spec, filters)
    params["size"] = size.total_seconds()
    statement = (
        cte + "\nSELECT floor(start_s / $size) * $size AS b, count(*), sum(error) FROM runs "
        "GROUP BY b ORDER BY b"
    )
    rows = _run(statement, params, what="events baseline")
    return bucket_frame(rows)
