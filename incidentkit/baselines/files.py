"""The baseline aggregates over JSONL or Parquet exports: the Core queries, run by DuckDB.

DuckDB reads the files itself (``read_ndjson_objects``, ``read_parquet``), so a week of
events never becomes Python objects: only the aggregates come back. The files are opened
through SQLAlchemy (``duckdb_engine``, ``duckdb://``) as a view shaped like ADK Java's table
(:data:`VIEW`: ``event_id, app_name, user_id, session_id, invocation_id, ts, event``, the event
as JSON text, ``ts`` a ``TIMESTAMP`` in UTC), and the aggregates are :mod:`.queries`' own
(:func:`.queries.call_histogram`, :func:`.queries.event_runs`, ...) in DuckDB's spelling of
the feature set (:mod:`.dialects`).

The shapes read are the kit's event lines (``docs/manifest.md``): events carrying
``appName``/``userId``/``sessionId`` (or snake_case), bare events (their session from
``[events] app_name``, ``user_id``, ``session_id``), and rows of an events table with the event
nested in ``event_column`` (an object or JSON text); a Parquet file is read as such rows
(``COPY adk_event TO 'events.parquet'``), its event column text or a struct. Timestamps are the
events' own epoch numbers: milliseconds (ADK Java) or seconds (ADK Python), told apart as the
normaliser does (at 1e11). Keys are camelCase or snake_case as the first event has them.

DuckDB runs in-process with a memory limit, spills into a private temporary folder (removed
after), installs and loads no extension on its own, and may open only the evidence files (for
reading: the kit issues no write) and that folder (``enable_external_access = false``,
``allowed_paths``, then ``lock_configuration``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from incidentkit.baselines import queries
from incidentkit.errors import SourceError
from incidentkit.manifest import Filters, SourceSpec
from incidentkit.sources import sql
from incidentkit.sources.events import JAVA_COLUMNS, JAVA_TABLE
from incidentkit.sources.evidence_files import expand_paths

LINE_SUFFIXES = (".jsonl", ".ndjson", ".json")
PARQUET_SUFFIXES = (".parquet", ".pq")
MS_THRESHOLD = 1e11
MEMORY_LIMIT = "512MB"
"""DuckDB's own memory cap: it spills to disk past it, so a baseline never takes the host."""
THREADS = 2
VIEW = JAVA_TABLE
"""The view over the files: ADK Java's table (``adk_event``) and its columns."""
RUNS = "ik_runs"
"""The temporary table of one row per run a latency summary reads twice (counts, then
percentiles): the files are scanned once."""
_TEXT_TYPES = ("VARCHAR", "JSON")


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
    """Whether a Parquet file holds events-table rows (an ``app_name`` and the event column
    as JSON text), not frames of some other shape (an event as a struct: its null fields
    would read as keys)."""
    import duckdb

    conn = duckdb.connect(
        config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    )
    try:
        rows = conn.execute("DESCRIBE SELECT * FROM read_parquet(?)", [str(path)]).fetchall()
    except duckdb.Error:
        return False
    finally:
        conn.close()
    types = {str(row[0]): str(row[1]) for row in rows}
    return "app_name" in types and types.get(column) in _TEXT_TYPES


def _first_record(path: Path) -> Any:
    try:
        with path.open(encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    return json.loads(line)
    except (OSError, ValueError):
        return None
    return None


@dataclass(frozen=True)
class Shape:
    """How the files hold their events."""

    parquet: bool
    rows: bool
    """Rows of an events table, the event nested in ``event_column`` (always, for Parquet)."""
    columns: Mapping[str, str]
    """Parquet: each column's DuckDB type."""
    snake: bool
    """The events' keys are snake_case (ADK Python's ``model_dump()``)."""
    python: bool
    """ADK Python's events (snake_case, or epoch seconds): an error that calls nothing ends."""


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _get(doc: str, *keys: str) -> str:
    """``COALESCE`` of the text at each top-level key of the JSON ``doc`` (either style)."""
    found = [f"json_extract_string({doc}, {_sql_text('$.' + json.dumps(k))})" for k in keys]
    return found[0] if len(found) == 1 else "COALESCE(" + ", ".join(found) + ")"


def _event_of_line(column: str) -> str:
    """A row's nested event as JSON text: an object, or JSON text in a string."""
    path = _sql_text("$." + json.dumps(column))
    return (
        f"CASE WHEN json_type(json, {path}) = 'VARCHAR' THEN json_extract_string(json, {path}) "
        f"ELSE CAST(json_extract(json, {path}) AS VARCHAR) END"
    )


def _event_of_parquet(column: str) -> str:
    """A Parquet row's event column (JSON text) as text."""
    return f"CAST(p.{_ident(column)} AS VARCHAR)"


def view_sql(spec: SourceSpec, shape: Shape) -> str:
    """``CREATE TEMP VIEW adk_event`` over the files (named by the variable ``ik_paths``;
    a session given in the manifest by ``ik_app``, ``ik_user``, ``ik_session``)."""
    column = spec.event_column
    if shape.parquet:
        event = _event_of_parquet(column)
        row = {
            name: f"CAST(p.{_ident(name)} AS VARCHAR)"
            for name in ("event_id", "app_name", "user_id", "session_id", "invocation_id")
            if name in shape.columns
        }
        scan = "read_parquet(getvariable('ik_paths')) p"
    else:
        event = _event_of_line(column) if shape.rows else "CAST(json AS VARCHAR)"
        scan = "read_ndjson_objects(getvariable('ik_paths'), ignore_errors = true)"
        row = (
            {name: _get("json", name) for name in JAVA_COLUMNS if name not in ("ts", "event")}
            if shape.rows
            else {}
        )
    inner = [f"{event} AS ik_event", *(f"{expr} AS ik_row_{name}" for name, expr in row.items())]
    source = f"(SELECT {', '.join(inner)} FROM {scan})"
    own = {
        "event_id": _get("ik_event", "id"),
        "app_name": _get("ik_event", "appName", "app_name"),
        "user_id": _get("ik_event", "userId", "user_id"),
        "session_id": _get("ik_event", "sessionId", "session_id"),
        "invocation_id": _get("ik_event", "invocationId", "invocation_id"),
    }
    given = {"app_name": "ik_app", "user_id": "ik_user", "session_id": "ik_session"}
    selected = []
    for name, from_event in own.items():
        found = [f"ik_row_{name}"] if name in row else []
        found.append(from_event)
        if name in given and spec.identity.get(name):
            found.append(f"getvariable('{given[name]}')")
        expr = found[0] if len(found) == 1 else "COALESCE(" + ", ".join(found) + ")"
        selected.append(f"{expr} AS {name}")
    micros = f"CASE WHEN stamp >= {MS_THRESHOLD} THEN stamp * 1000 ELSE stamp * 1000000 END"
    selected.append(f"make_timestamp(CAST(round({micros}) AS BIGINT)) AS ts")
    selected.append("ik_event AS event")
    stamp = "TRY_CAST(json_extract_string(ik_event, '$.timestamp') AS DOUBLE)"
    return (
        f"CREATE TEMP VIEW {VIEW} AS SELECT {', '.join(selected)} "
        f"FROM (SELECT *, {stamp} AS stamp FROM {source})"
    )


def _shape(conn: Connection, spec: SourceSpec, paths: Sequence[Path]) -> Shape:
    """The shape of the files, from the first record (Parquet: its schema and first row)."""
    column = spec.event_column
    if all(p.suffix.lower() in PARQUET_SUFFIXES for p in paths):
        described = conn.exec_driver_sql(
            "DESCRIBE SELECT * FROM read_parquet(getvariable('ik_paths'))"
        ).all()
        columns = {str(r[0]): str(r[1]) for r in described}
        if columns.get(column) not in _TEXT_TYPES:
            raise SourceError(
                "events baseline: the Parquet file has no event column of JSON text",
                value=f"{column}: {columns.get(column, 'absent')}",
                fix=f"it has {sorted(columns)}; name the column of event JSON with [events] "
                "event_column, or give baseline_engine = false to load the frames",
            )
        first = conn.exec_driver_sql(
            f"SELECT {_event_of_parquet(column)} "
            "FROM read_parquet(getvariable('ik_paths')) p LIMIT 1"
        ).scalar()
        event = _as_object(first)
        return Shape(True, True, columns, *_style(event))
    record = _first_record(paths[0])
    record = record if isinstance(record, dict) else {}
    rows = isinstance(record.get(column), dict | str) and "author" not in record
    event = _as_object(record.get(column)) if rows else record
    return Shape(False, rows, {}, *_style(event))


def _as_object(value: object) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def _style(event: Mapping[str, Any]) -> tuple[bool, bool]:
    """(snake_case keys, ADK Python's events) of a first event."""
    snake = "invocation_id" in event and "invocationId" not in event
    stamp = event.get("timestamp")
    early = isinstance(stamp, int | float) and not isinstance(stamp, bool) and stamp < MS_THRESHOLD
    return snake, snake or early


def _config(spill: str) -> dict[str, str | bool | int]:
    return {
        "memory_limit": MEMORY_LIMIT,
        "threads": THREADS,
        "temp_directory": spill,
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
    }


@contextmanager
def event_view(spec: SourceSpec, *, what: str) -> Iterator[tuple[Connection, queries.EventTable]]:
    """A connection to a fresh in-memory DuckDB holding the view :data:`VIEW` over the files
    of ``spec``, and the view as :mod:`.queries` reads an events table.

    DuckDB's errors (an unreadable file, a query it refuses) are SourceErrors naming them.
    """
    import duckdb

    paths = [str(p) for p in expand_paths(spec.paths, what="events")]
    spill = tempfile.mkdtemp(prefix="incidentkit-duckdb-")
    engine = sa.create_engine(
        "duckdb:///:memory:", poolclass=sa.pool.NullPool, connect_args={"config": _config(spill)}
    )
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SET allowed_paths = $1", (paths,))
            conn.exec_driver_sql("SET allowed_directories = $1", ([spill],))
            conn.exec_driver_sql("SET enable_external_access = false")
            conn.exec_driver_sql("SET lock_configuration = true")
            conn.exec_driver_sql("SET VARIABLE ik_paths = $1", (paths,))
            for key, variable in (("app_name", "ik_app"), ("user_id", "ik_user")):
                conn.exec_driver_sql(f"SET VARIABLE {variable} = $1", (spec.identity.get(key),))
            conn.exec_driver_sql("SET VARIABLE ik_session = $1", (spec.identity.get("session_id"),))
            shape = _shape(conn, spec, [Path(p) for p in paths])
            conn.exec_driver_sql(view_sql(spec, shape))
            info = sql.TableInfo(VIEW, JAVA_COLUMNS, frozenset({"ts"}), frozenset())
            keys = queries.SNAKE if shape.snake else queries.CAMEL
            names = {name: name for name in JAVA_COLUMNS}
            yield conn, queries.EventTable(info, names, keys, "naive", python=shape.python)
    except (sa.exc.DBAPIError, duckdb.Error) as err:
        orig = getattr(err, "orig", None) or err
        raise SourceError(
            f"{what}: DuckDB could not read the files",
            value=sql.first_line(orig),
            fix="check that the files are JSON lines or Parquet exports of ADK events",
        ) from err
    finally:
        engine.dispose()
        shutil.rmtree(spill, ignore_errors=True)


def call_histogram(spec: SourceSpec, filters: Filters, marked: Sequence[str] = ()) -> pd.DataFrame:
    """:func:`incidentkit.baselines.queries.call_histogram` over files."""
    with event_view(spec, what="events baseline") as (conn, events):
        return queries.call_histogram(conn, events, filters, marked)


def latency_summary(spec: SourceSpec, filters: Filters) -> dict[str, float]:
    """:func:`incidentkit.baselines.queries.latency_summary` over the events of files."""
    with event_view(spec, what="events baseline") as (conn, events):
        runs = queries.event_runs(conn, events, filters)
        conn.execute(sa.select(runs).into(RUNS, temporary=True))
        kept = sa.table(RUNS, *(sa.column(col.name) for col in runs.c))
        return queries.latency_summary(conn, sa.select(kept).subquery("runs"))


def error_buckets(spec: SourceSpec, filters: Filters, size: pd.Timedelta) -> pd.DataFrame:
    """:func:`incidentkit.baselines.queries.error_buckets` over the events of files."""
    with event_view(spec, what="events baseline") as (conn, events):
        return queries.error_buckets(conn, queries.event_runs(conn, events, filters), size)
