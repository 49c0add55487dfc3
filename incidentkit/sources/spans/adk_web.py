"""The SQLite span store of ADK Python's ``SqliteSpanExporter`` into raw spans.

google-adk 2.x ships ``google.adk.telemetry.sqlite_span_exporter.SqliteSpanExporter``, the
local-development store meant for ``adk web`` (it keeps traces of old sessions across
restarts). It writes one row per finished span into the table ``spans``: ``span_id`` (16 hex,
the primary key), ``trace_id`` (32 hex), ``parent_span_id`` (16 hex, NULL at a root),
``name``, ``start_time_unix_nano`` and ``end_time_unix_nano`` (INTEGER nanoseconds),
``session_id`` (the ``gcp.vertex.agent.session_id`` attribute, else ``gen_ai.conversation.id``),
``invocation_id`` (``gcp.vertex.agent.invocation_id``) and ``attributes_json``: every attribute
in one JSON object (Python's ``json.dumps``: sequences become lists, NaN stays NaN, a value JSON
cannot hold becomes ``"<not serializable>"``). The store keeps no status, span kind, events,
links, resource or scope: a span's status is ``ERROR`` when it has an ``error.type`` attribute
(what ADK sets on a failed tool), else missing; exception events are lost.

Rows come out as :data:`.otlp.RawSpan`, checked like every other span. The file is opened
read-only by :func:`incidentkit.sources.sql.open_sqlite`; the manifest's filters select whole
traces in SQL (a trace with a span in the window, or naming the session or invocation in the
table's columns) and :func:`incidentkit.sources.spans.narrow` cuts the frame after the ids are
spread over each trace, so the spans kept are those a full read keeps.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from incidentkit.errors import SchemaError, SourceError
from incidentkit.manifest import Filters
from incidentkit.sources import sql
from incidentkit.sources.json_text import JSON_ERRORS, fast_loads, json_failure
from incidentkit.sources.loaded import RejectSink
from incidentkit.sources.spans.otlp import SHAPE_ERRORS, RawSpan

FORMAT = "adk-web-sqlite"
TABLE = "spans"
COLUMNS = (
    *("span_id", "trace_id", "parent_span_id", "name"),
    *("start_time_unix_nano", "end_time_unix_nano", "session_id", "invocation_id"),
    "attributes_json",
)
"""The exporter's columns, in the order :func:`decode` takes a row's values."""
_OPTIONAL = frozenset({"session_id", "invocation_id"})
"""Columns only the filters use (each span's attributes name its ids)."""
SESSION_TABLES = frozenset({"sessions", "events"})
"""Tables every ADK Python session store has (SqliteSessionService, DatabaseSessionService)."""
SQLITE_HEADER = b"SQLite format 3\x00"


def is_sqlite(path: Path) -> bool:
    """Whether ``path`` starts with the SQLite database header."""
    try:
        with path.open("rb") as handle:
            return handle.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:  # the reader opening it says why it cannot
        return False


def read_spans(
    engine: Engine,
    sink: RejectSink,
    *,
    label: str,
    what: str,
    filters: Filters,
    table: str | None = None,
    wanted: Collection[str] | None = None,
) -> Iterator[tuple[str, RawSpan]]:
    """``(label:rowid N, span)`` of the store's spans in row order, the traces ``filters``
    touch (``wanted``: only these lowercase span ids); unreadable rows go to ``sink``. The
    engine is disposed when the rows are read."""
    try:
        with sql.connect(engine, what=what) as conn:
            info = _span_table(conn, table or TABLE, what=what)
            _keep_bad_text(conn)
            statement = _statement(info, filters, wanted)
            with sql.decoded(conn, what=what):
                result = conn.execute(statement)
            empty = True
            for rowid, *values in result:
                empty = False
                location = f"{label}:rowid {rowid}"
                try:
                    raw = decode(values)
                except SHAPE_ERRORS as err:
                    sink.add(location, f"row cannot be read: {err}", row_text(values))
                    continue
                yield location, raw
            if empty:
                sql.require_rows(conn, info, what=what)
    finally:
        engine.dispose()


def decode(values: Sequence[Any]) -> RawSpan:
    """One row's values (in :data:`COLUMNS` order) as a raw span; ValueError says why a row
    gives none (text that is not UTF-8, attributes that are not a JSON object)."""
    row = dict(zip(COLUMNS, values, strict=True))
    for column, value in row.items():
        if isinstance(value, str) and not _utf8(value):
            raise ValueError(f"{column} is not UTF-8 text")
    attributes = _attributes(row["attributes_json"])
    return {
        "trace": row["trace_id"],
        "span": row["span_id"],
        "parent": row["parent_span_id"],
        "name": row["name"],
        "start": row["start_time_unix_nano"],
        "end": row["end_time_unix_nano"],
        "scale": 1,
        "status": None if attributes.get("error.type") is None else "ERROR",
        "message": None,
        "attrs": attributes,
        "exception": {},
        "json": {**row, "attributes_json": attributes},
    }


def row_text(values: Sequence[Any]) -> str:
    """A row as JSON text for its reject (bytes as their repr, bad text escaped)."""
    return json.dumps(dict(zip(COLUMNS, values, strict=False)), default=repr)


def _attributes(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("attributes_json is not UTF-8 text") from None
    if not isinstance(value, str):
        raise ValueError(f"attributes_json is not JSON text but {type(value).__name__} {value!r}")
    try:
        decoded = fast_loads(value)
    except JSON_ERRORS as err:
        raise ValueError(f"attributes_json is {json_failure(err)}") from None
    if not isinstance(decoded, dict):
        raise ValueError(f"attributes_json is not a JSON object but {type(decoded).__name__}")
    return decoded


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _keep_bad_text(conn: Connection) -> None:
    """Make text that is not UTF-8 arrive as a str with surrogates (a reject of its row), not
    an error that ends the read (sqlite3's default)."""
    raw = conn.connection.driver_connection
    assert raw is not None  # an open connection has its driver's
    raw.text_factory = lambda data: data.decode("utf-8", "surrogateescape")


def _span_table(conn: Connection, table: str, *, what: str) -> sql.TableInfo:
    """The exporter's table, or an error saying what the file is instead."""
    info = sql.inspect_table(conn, table, what=what)
    if info is None:
        with sql.decoded(conn, what=what):
            tables = sorted(sa.inspect(conn).get_table_names())
        if set(tables) >= SESSION_TABLES:
            raise SourceError(
                f"{what}: this is an ADK session store (SqliteSessionService or "
                f"DatabaseSessionService: tables {', '.join(tables)}), not a span store",
                value=tables,
                fix="read it under [events]; under [spans] give the file ADK's "
                "SqliteSpanExporter writes (table spans), or an OTLP/JSON or Jaeger export",
            )
        raise SchemaError(
            f"{what}: the SQLite file has no {table} table, so it is not ADK's span store",
            value=tables,
            fix="give the file ADK's SqliteSpanExporter writes (its db_path), or name the table "
            'with table = "..." in [spans]',
        )
    missing = [name for name in COLUMNS if name not in info.columns and name not in _OPTIONAL]
    if missing:
        raise SchemaError(
            f"{what}: table {table} lacks the columns of ADK's SqliteSpanExporter",
            value=missing,
            fix=f"it has {list(info.columns)}; give the file the exporter writes, or export "
            "the spans as OTLP/JSON",
        )
    return info


def _statement(
    info: sql.TableInfo, filters: Filters, wanted: Collection[str] | None
) -> sa.Select[Any]:
    """The rows of the traces the filters touch, in row order, every value bound."""
    table = info.clause
    rowid: sa.ColumnClause[int] = sa.literal_column("rowid")
    cells = [table.c[name] if name in info.columns else sa.null().label(name) for name in COLUMNS]
    trace = table.c["trace_id"]
    touched: list[sa.ColumnElement[bool]] = []
    if filters.window is not None:
        start = table.c["start_time_unix_nano"]
        in_window = sa.and_(
            start >= sa.bindparam("w_start", int(filters.window.start.value)),
            start < sa.bindparam("w_end", int(filters.window.end.value)),
        )
        # A time SQL cannot compare (text, NULL) is placed after reading: its trace is read.
        unknown = sa.func.typeof(start).not_in(["integer", "real"])
        touched.append(sa.or_(in_window, unknown))
    for values, name in (
        (filters.session_ids, "session_id"),
        (filters.invocation_ids, "invocation_id"),
    ):
        if values and name in info.columns:
            touched.append(
                table.c[name].in_(sa.bindparam(f"{name}s", list(values), expanding=True))
            )
    statement = sa.select(rowid, *cells).select_from(table)
    for condition in touched:
        statement = statement.where(trace.in_(sa.select(trace).where(condition).correlate(None)))
    if wanted is not None:
        ids: sa.BindParameter[list[str]] = sa.bindparam("span_ids", sorted(wanted), expanding=True)
        statement = statement.where(sa.func.lower(table.c["span_id"]).in_(ids))
    return statement.order_by(rowid)
