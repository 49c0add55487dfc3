"""The BigQuery Agent Analytics table read live: ``url = "bigquery://PROJECT/DATASET"``.

One SQLAlchemy Core ``SELECT`` (:func:`statement`) of the plugin's columns, through the
``sqlalchemy-bigquery`` dialect, its rows fetched in batches into the very builder the exports
go through (:func:`.bigquery_analytics.frame_of`, :func:`.bigquery_analytics.rows_of`): the JSON
columns are selected as JSON text (``TO_JSON_STRING``), what ``bq extract`` writes, and
``content_parts`` as it arrives (a list of part objects), so the same rows give the same frames.

The filters are bound parameters. The plugin builds an event from several rows of its
invocation (the user's state delta from two rows, a model's calls from the rows after its
response), so a filter on rows would cut events apart: the window and the app pick
*invocations* (those with a row in the window, of the app), and every row of them is read
within the window widened by :data:`MARGIN` (the partition filter on ``timestamp``). Session
and invocation ids filter rows (``IN UNNEST(@sid)``): an event's rows share both. The exact
filters are applied again to the events, as for an export.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import pandas as pd
import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SAWarning
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement

from incidentkit import progress
from incidentkit.errors import IncidentkitError, SchemaError, SourceError
from incidentkit.manifest import DEFAULT_MAX_BYTES_BILLED, Filters, SourceSpec
from incidentkit.sources import sql
from incidentkit.sources.events.bigquery_analytics import (
    APP_PATHS,
    COLUMNS,
    JSON_COLUMNS,
    REQUIRED,
    frame_of,
    rows_of,
)
from incidentkit.sources.loaded import RejectSink
from incidentkit.sources.process_memory import bulk_decoding
from incidentkit.times import Naive

TABLE = "agent_events"
"""The plugin's default ``table_id``."""
MARGIN = pd.Timedelta(hours=1)
"""How far before and after the window the rows of an invocation in it are read: an invocation
longer than this at the window's edge loses its rows past it (a wider window brings them)."""
BATCH = 10_000
"""Rows fetched at a time (the dialect's own page is 5,000)."""
_PATH = re.compile(r"\$(\.[a-z_]+)+")
CREDENTIALS = (
    "give the kit the credentials ADK's plugin uses: GOOGLE_APPLICATION_CREDENTIALS naming a "
    "service-account key file, gcloud auth application-default login, or the metadata server "
    "of the machine it runs on"
)


# -- the query -------------------------------------------------------------------------------------


class _JsonText(FunctionElement[str]):
    """A JSON column as its JSON text: ``TO_JSON_STRING`` on BigQuery (what ``bq extract``
    writes), a cast to text elsewhere (DuckDB's JSON type is its text)."""

    type = sa.String()
    inherit_cache = True
    name = "json_text"


@compiles(_JsonText)
def _json_text_cast(element: _JsonText, compiler: SQLCompiler, **kw: Any) -> str:
    return f"CAST({compiler.process(element.clauses, **kw)} AS VARCHAR)"


@compiles(_JsonText, "bigquery")
def _json_text_bigquery(element: _JsonText, compiler: SQLCompiler, **kw: Any) -> str:
    return f"TO_JSON_STRING({compiler.process(element.clauses, **kw)})"


class _JsonValue(FunctionElement[str]):
    """The text scalar at a constant JSON path: ``JSON_VALUE(col, '$.a.b')`` as the plugin's
    views write it (DuckDB's ``json_value`` keeps the quotes: ``json_extract_string``)."""

    type = sa.String()
    inherit_cache = True
    name = "json_value"

    def __init__(self, column: ColumnElement[Any], path: str) -> None:
        if not _PATH.fullmatch(path):  # a constant of this module, rendered as a literal
            raise ValueError(f"not a JSON path the kit writes: {path!r}")
        self.path = path
        super().__init__(column)


@compiles(_JsonValue)
def _json_value(element: _JsonValue, compiler: SQLCompiler, **kw: Any) -> str:
    return f"JSON_VALUE({compiler.process(element.clauses, **kw)}, '{element.path}')"


@compiles(_JsonValue, "duckdb")
def _json_value_duckdb(element: _JsonValue, compiler: SQLCompiler, **kw: Any) -> str:
    return f"json_extract_string({compiler.process(element.clauses, **kw)}, '{element.path}')"


def statement(table: sql.TableInfo, filters: Filters) -> sa.Select[Any]:
    """The ``SELECT`` of the plugin's columns ``table`` has (JSON ones as JSON text), for
    ``filters``, every value a bound parameter, in a stable order."""
    t = table.clause
    present = [col for col in COLUMNS if col in table.columns]
    selected = [
        (_JsonText(t.c[col]) if col in JSON_COLUMNS else t.c[col]).label(col) for col in present
    ]
    conditions: list[ColumnElement[bool]] = []
    for values, col, label in (
        (filters.session_ids, "session_id", "sid"),
        (filters.invocation_ids, "invocation_id", "inv"),
    ):
        if values:
            param = sa.bindparam(label, list(values), type_=sa.String(), expanding=True)
            conditions.append(t.c[col].in_(param))  # BigQuery: IN UNNEST(@sid)
    if filters.window is not None or filters.app_name is not None:
        picked = t.alias("picked")
        chosen: list[ColumnElement[bool]] = []
        if filters.window is not None:
            start, end = filters.window.start.floor("us"), filters.window.end.ceil("us")
            chosen += _between(picked.c.timestamp, start, end, "w")
            conditions += _between(t.c.timestamp, start - MARGIN, end + MARGIN, "p")
        if filters.app_name is not None:
            app = sa.bindparam("app_name", filters.app_name, type_=sa.String())
            chosen.append(
                sa.or_(*(_JsonValue(picked.c.attributes, path) == app for path in APP_PATHS))
                if "attributes" in table.columns
                else sa.false()  # no row names its app: none is of this one
            )
        invocations = sa.select(picked.c.invocation_id).where(*chosen)
        conditions.append(t.c.invocation_id.in_(invocations))
    order = ["session_id", "invocation_id", "timestamp", "event_id"]
    return (
        sa.select(*selected)
        .select_from(t)
        .where(*conditions)
        .order_by(*(sa.nulls_first(t.c[col]) for col in order if col in table.columns))
    )


def _between(
    col: ColumnElement[Any], start: pd.Timestamp, end: pd.Timestamp, label: str
) -> list[ColumnElement[bool]]:
    """``start <= col < end``, the bounds bound as aware UTC times (BigQuery ``TIMESTAMP``)."""
    kind = sa.TIMESTAMP(timezone=True)
    return [
        col >= sa.bindparam(f"{label}_start", start.tz_convert("UTC").to_pydatetime(), kind),
        col < sa.bindparam(f"{label}_end", end.tz_convert("UTC").to_pydatetime(), kind),
    ]


# -- reading -------------------------------------------------------------------------------------


def read(
    spec: SourceSpec,
    filters: Filters,
    environ: Mapping[str, str] | None,
    sink: RejectSink,
    *,
    what: str = "events",
) -> pd.DataFrame:
    """The rows of the section's live table for ``filters``, as
    :func:`.bigquery_analytics.read` gives an export's (rejects and warnings to ``sink``)."""
    where = f"{what} {spec.location()}"
    cap = spec.max_bytes_billed or DEFAULT_MAX_BYTES_BILLED
    table = spec.table or TABLE
    with google_errors(where, cap=cap):  # the dialect makes its client (credentials) here
        engine = sql.open_source(spec, environ, what=where)
        try:
            with sql.connect(engine, what=where) as conn:
                naive = spec.naive_timestamps
                return read_rows(conn, table, filters, sink, naive=naive, what=where, cap=cap)
        finally:
            engine.dispose()


def read_rows(
    conn: Connection,
    table: str,
    filters: Filters,
    sink: RejectSink,
    *,
    naive: Naive = "error",
    what: str = "events",
    cap: int = DEFAULT_MAX_BYTES_BILLED,
) -> pd.DataFrame:
    """The rows of ``table`` on ``conn`` for ``filters``, fetched in batches of
    :data:`BATCH` into the exports' builder; each row's location is ``table:event_id`` (or
    ``table:row N`` in the query's order when it has none)."""
    with google_errors(what, cap=cap):
        info = table_info(conn, table, what=what)
        result = conn.execute(statement(info, filters))
        names = list(result.keys())
        parts: list[pd.DataFrame] = []
        read = 0
        with bulk_decoding():  # fresh lists and dicts: no cycles to collect
            while batch := result.fetchmany(BATCH):
                parts.append(batch_frame(names, batch, table, read, naive))
                read += len(batch)
                progress.advance(len(batch))
            return rows_of(parts, sink, naive=naive)


def table_info(conn: Connection, table: str, *, what: str) -> sql.TableInfo:
    """The plugin's columns ``table`` has; SchemaError when it is missing or lacks one the kit
    needs (:data:`.bigquery_analytics.REQUIRED`). On BigQuery the columns come from the table's
    metadata (no query, nothing billed); on a database whose dialect cannot reflect them
    (``duckdb_engine`` under SQLAlchemy 2.1), from a query that reads no row."""
    schema, _, name = table.rpartition(".")
    inspector = sa.inspect(conn)
    if not inspector.has_table(name, schema=schema or None):
        raise SchemaError(
            f"{what}: the BigQuery Agent Analytics table is not there",
            value=table,
            fix="check the project and dataset the URL names and table = (the plugin's "
            "table_id, default agent_events), and that the credentials may see them",
        )
    if conn.dialect.name == "bigquery":
        with warnings.catch_warnings():  # the dialect knows no JSON type: its name is enough
            warnings.filterwarnings("ignore", r"Did not recognize type 'JSON'", SAWarning)
            found = [col["name"] for col in inspector.get_columns(name, schema=schema or None)]
    else:
        probe = sa.select(sa.text("*")).select_from(sa.table(name, schema=schema or None))
        found = list(conn.execute(probe.where(sa.false())).keys())
    missing = [col for col in REQUIRED if col not in found]
    if missing:
        raise SchemaError(
            f"{what}: table {table} lacks columns of the plugin's table",
            value=missing,
            fix="point at the plugin's own table (table_id), not a view or a copy of some columns",
        )
    kept = tuple(col for col in COLUMNS if col in found)
    return sql.TableInfo(table, kept, frozenset(), frozenset())


def batch_frame(
    names: Sequence[str], batch: Sequence[Sequence[Any]], table: str, before: int, naive: Naive
) -> pd.DataFrame:
    """One fetched batch (rows of the columns ``names``) as the exports' builder takes a file:
    text and lists as they arrive, ``timestamp`` as aware times; rows numbered from
    ``before + 1`` where they have no ``event_id``."""
    columns = [list(col) for col in zip(*batch, strict=True)] if batch else [[] for _ in names]
    values: dict[str, Any] = dict(zip(names, columns, strict=True))
    values["timestamp"] = _times(values.get("timestamp", [None] * len(batch)))
    ids = values.get("event_id", [None] * len(batch))
    locations = [
        f"{table}:{row_id}" if isinstance(row_id, str) and row_id else f"{table}:row {n}"
        for n, row_id in enumerate(ids, start=before + 1)
    ]
    return frame_of(values, locations, naive)


def _times(values: list[Any]) -> Any:
    """``TIMESTAMP`` values (aware datetimes) as a column of UTC times in microseconds (to
    9999-12-31, as BigQuery holds them). Where some are not (another database's column),
    datetimes become ISO 8601 text for the exports' parser (naive ones then lack an offset)
    and other values stay as they are: each such row is read or rejected on its own."""
    if all(isinstance(v, datetime) and v.tzinfo is not None for v in values):
        try:
            return pd.Series(pa.array(values, type=pa.timestamp("us", tz="UTC")).to_pandas())
        except (pa.ArrowException, ValueError, OverflowError):
            pass
    return [v.isoformat() if isinstance(v, datetime) else v for v in values]


# -- errors --------------------------------------------------------------------------------------

_BILLED = re.compile(r"(\d+) or higher required")
_REQUEST = re.compile(r"^\s*(GET|POST|PUT|PATCH|DELETE) \S+: ")


@contextmanager
def google_errors(what: str, *, cap: int) -> Iterator[None]:
    """Google's errors (credentials, API, query) as the kit's: what failed and what to do.
    Messages keep BigQuery's words but not the request's URL; credentials never appear."""
    try:
        yield
    except IncidentkitError:
        raise
    except Exception as err:
        found = _google_cause(err)
        if found is None:
            raise
        raise _translated(found, what, cap) from err


def _google_cause(err: BaseException) -> BaseException | None:
    """The Google error in ``err``'s chain (SQLAlchemy wraps the DB-API's, which wraps the
    client's), None when there is none."""
    try:
        from google.api_core.exceptions import GoogleAPIError
        from google.auth.exceptions import GoogleAuthError
    except ImportError:  # pragma: no cover (the warehouse extra brings both)
        return None
    seen: set[int] = set()
    todo: list[BaseException | None] = [err]
    while todo:
        item = todo.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, GoogleAPIError | GoogleAuthError):
            return item
        todo += [item.__cause__, item.__context__, getattr(item, "orig", None)]
        todo += [arg for arg in item.args if isinstance(arg, BaseException)]
    return None


def _translated(err: BaseException, what: str, cap: int) -> IncidentkitError:
    from google.api_core import exceptions as api
    from google.auth.exceptions import GoogleAuthError

    if isinstance(err, GoogleAuthError):
        return SourceError(
            f"{what}: no usable Google credentials for BigQuery",
            value=type(err).__name__,  # its text may name a key file: not shown
            fix=CREDENTIALS,
        )
    said = _message(err)
    reasons = {
        str(e.get("reason")) for e in getattr(err, "errors", None) or [] if isinstance(e, dict)
    }
    if "bytesBilledLimitExceeded" in reasons or "limit for bytes billed" in said:
        needed = _BILLED.search(said)
        return SourceError(
            f"{what}: the query would bill more bytes than max_bytes_billed allows",
            value=f"max_bytes_billed = {cap}"
            + (f"; BigQuery needs {needed[1]} or more" if needed else f" ({said})"),
            fix="narrow the window (the table is partitioned by day on timestamp: a day's "
            "rows are billed whole) or raise max_bytes_billed in the manifest",
        )
    if isinstance(err, api.NotFound):
        return SchemaError(
            f"{what}: BigQuery found no such project, dataset or table",
            value=said,
            fix="check the project and dataset the URL names and table = (default "
            "agent_events), and the location (?location=... in the URL) of the dataset",
        )
    if isinstance(err, api.Forbidden | api.Unauthorized | api.PermissionDenied):
        return SourceError(
            f"{what}: BigQuery refused access",
            value=said,
            fix="grant the credentials' account roles/bigquery.dataViewer on the dataset and "
            "roles/bigquery.jobUser on the project (or run as one that has them)",
        )
    if isinstance(err, api.BadRequest):
        return SchemaError(
            f"{what}: BigQuery refused the query",
            value=said,
            fix="check that table = names the plugin's own table (a column the kit reads may "
            "be missing or of another type)",
        )
    return SourceError(
        f"{what}: the BigQuery request failed",
        value=said,
        fix="try again (the service may be unavailable), or check the project's quotas",
    )


def _message(err: BaseException) -> str:
    """BigQuery's message without the request line that carries the API URL."""
    text = str(getattr(err, "message", None) or err)
    return sql.first_line(Exception(_REQUEST.sub("", text)))
