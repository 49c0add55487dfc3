"""Read-only database access: engines, table checks, filtered bulk reads.

Every connection the kit opens is read-only (PostgreSQL and MySQL read-only transactions,
SQLite opened with ``mode=ro``). Filters are bound parameters; on PostgreSQL the rows travel
through ``COPY (SELECT ...) TO STDOUT`` (measured about 8x faster than ``pandas.read_sql`` for
JSON rows), elsewhere through ``pandas.read_sql``.

Window bounds are bound the way the time column stores instants (:data:`TimeStorage`), so the
database compares like with like, exactly to the microsecond: PostgreSQL ``timestamptz`` takes
aware UTC datetimes, ``timestamp without time zone`` and MySQL/MariaDB ``DATETIME``/``TIMESTAMP``
(compared in the session zone, UTC) naive UTC datetimes, SQLite (which has no time type and
compares text) UTC text in the form SQLAlchemy and ADK write, ``YYYY-MM-DD HH:MM:SS.ffffff``,
and epoch columns (SqliteSessionService's ``REAL``) seconds.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError

from incidentkit.errors import SchemaError, SourceError
from incidentkit.manifest import Filters, Window
from incidentkit.redact import redact_url, scrub_text

NULL_MARK = "\\N"
READ_ONLY_OPTIONS = "-c default_transaction_read_only=on -c TimeZone=UTC"
"""PostgreSQL session settings of every kit connection; they follow (and so beat) the URL's."""
TimeStorage = Literal["aware", "naive", "epoch_s"]
"""How a column keeps instants: a zoned type, UTC wall time without a zone, epoch seconds."""
SQLITE_TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f"
"""The text SQLAlchemy's SQLite ``DATETIME`` (and so ADK) writes; SQLite compares it as text."""
_D = "[0-9]"
_SQLITE_TIME_GLOB = f"{_D * 4}-{_D * 2}-{_D * 2} {_D * 2}:{_D * 2}:{_D * 2}.{_D * 6}"


def open_engine(url: str, *, what: str) -> Engine:
    """A read-only engine for ``url``; ``what`` names the source in error messages."""
    try:
        parsed = make_url(url)
    except ArgumentError as err:
        raise SourceError(
            f"{what}: not a database URL",
            value="<hidden>",
            fix="give a SQLAlchemy URL such as postgresql+psycopg://user@host/db",
        ) from err
    backend = parsed.get_backend_name()
    safe = redact_url(url)
    try:
        if backend == "sqlite":
            database = parsed.database or ""
            if not database or database == ":memory:":
                raise SourceError(
                    f"{what}: an in-memory SQLite database holds no evidence",
                    value=safe,
                    fix="point at a SQLite file",
                )
            engine = sa.create_engine(
                f"sqlite:///file:{database}?mode=ro&uri=true", poolclass=sa.pool.NullPool
            )
        elif backend == "postgresql":
            if parsed.drivername == "postgresql":
                parsed = parsed.set(drivername="postgresql+psycopg")
            options = " ".join([*_query_values(parsed, "options"), READ_ONLY_OPTIONS])
            engine = sa.create_engine(
                parsed.difference_update_query(["options"]),
                connect_args={"options": options},
                poolclass=sa.pool.NullPool,
            )
        elif backend in ("mysql", "mariadb"):
            if parsed.drivername in ("mysql", "mariadb"):
                parsed = parsed.set(drivername="mysql+pymysql")
            engine = sa.create_engine(parsed, poolclass=sa.pool.NullPool)
            # Two statements: MySQL/MariaDB cannot combine TRANSACTION with variables in one SET.
            sa.event.listen(engine, "connect", _mysql_read_only)
        else:
            raise SourceError(
                f"{what}: database kind not supported",
                value=backend,
                fix="use PostgreSQL, MySQL/MariaDB or SQLite",
            )
    except NoSuchModuleError as err:
        raise SourceError(
            f"{what}: no driver for this URL",
            value=safe,
            fix="use postgresql+psycopg://, mysql+pymysql:// or sqlite:///",
        ) from err
    return engine


def _query_values(url: sa.URL, key: str) -> list[str]:
    """The values of query parameter ``key`` in ``url`` (none, one or repeated)."""
    value = url.query.get(key)
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _mysql_read_only(dbapi_conn: Any, _record: Any) -> None:
    with dbapi_conn.cursor() as cursor:
        cursor.execute("SET SESSION TRANSACTION READ ONLY")
        cursor.execute("SET SESSION time_zone = '+00:00'")


@contextmanager
def connect(engine: Engine, *, what: str) -> Iterator[Connection]:
    """A connection in a read-only transaction; connection failures become SourceError."""
    safe = redact_url(engine.url.render_as_string(hide_password=False))
    try:
        conn = engine.connect()
    except DBAPIError as err:
        reason = first_line(err.orig if err.orig else err)
        raise SourceError(
            f"{what}: cannot connect to the database",
            value=f"{safe} ({reason})",
            fix="check that the server is up, the URL's host, port and database, and the "
            "credentials in the environment variable the manifest names",
        ) from err
    try:
        with conn.begin():
            yield conn
    finally:
        conn.close()


@dataclass(frozen=True)
class TableInfo:
    """The columns a table has, and which of them store timestamps without a time zone."""

    name: str
    columns: tuple[str, ...]
    naive_time_columns: frozenset[str]
    json_columns: frozenset[str]


def inspect_table(conn: Connection, table: str, *, what: str = "") -> TableInfo | None:
    """Describe ``table`` (``schema.table`` allowed), or None when it does not exist.

    ``what`` is unused; it stays until ``sources/events.py`` stops passing it.
    """
    schema, _, name = table.rpartition(".")
    inspector = sa.inspect(conn)
    if not inspector.has_table(name, schema=schema or None):
        return None
    naive: set[str] = set()
    json_cols: set[str] = set()
    columns = []
    for col in inspector.get_columns(name, schema=schema or None):
        columns.append(col["name"])
        col_type = col["type"]
        if isinstance(col_type, sa.DateTime) and not getattr(col_type, "timezone", False):
            naive.add(col["name"])
        if isinstance(col_type, sa.JSON):
            json_cols.add(col["name"])
    return TableInfo(table, tuple(columns), frozenset(naive), frozenset(json_cols))


def require_table(conn: Connection, table: str, needed: Sequence[str], *, what: str) -> TableInfo:
    """``inspect_table`` that raises SchemaError for a missing table or missing columns."""
    info = inspect_table(conn, table)
    if info is None:
        raise SchemaError(
            f"{what}: table not found",
            value=table,
            fix="check the manifest's table name (schema.table is allowed) and the database",
        )
    missing = [col for col in needed if col not in info.columns]
    if missing:
        raise SchemaError(
            f"{what}: table {table} lacks columns",
            value=missing,
            fix=f"it has {list(info.columns)}; map your names with columns = {{ canonical = "
            '"yours" } in the manifest',
        )
    return info


@dataclass(frozen=True)
class Predicates:
    """Column names the filters apply to, for one table; None means the filter does not apply.

    ``time_storage`` says how ``time`` keeps instants; None takes it from the ``table`` given to
    :func:`where` (naive when listed in ``naive_time_columns``), else aware.
    """

    time: str | None = None
    app_name: str | None = None
    session_id: str | None = None
    invocation_id: str | None = None
    time_storage: TimeStorage | None = None


def where(
    conn: Connection,
    filters: Filters,
    on: Predicates,
    *,
    table: TableInfo | None = None,
    prefix: str = "",
) -> tuple[str, dict[str, Any]]:
    """A SQL ``WHERE`` fragment (with ``:name`` binds) and its parameters."""
    clauses: list[str] = []
    params: dict[str, Any] = {}
    if filters.window is not None and on.time:
        time_col = prefix + quote(conn, on.time)
        clauses.append(f"{time_col} >= :w_start AND {time_col} < :w_end")
        storage = on.time_storage or time_storage(table, on.time)
        params["w_start"], params["w_end"] = window_params(conn, filters.window, storage)
    if filters.app_name is not None and on.app_name:
        clauses.append(f"{prefix}{quote(conn, on.app_name)} = :app_name")
        params["app_name"] = filters.app_name
    for values, column, label in (
        (filters.session_ids, on.session_id, "sid"),
        (filters.invocation_ids, on.invocation_id, "inv"),
    ):
        if values and column and conn.dialect.name == "postgresql":
            # One array parameter, however many ids: the statement stays short.
            clauses.append(f"{prefix}{quote(conn, column)} = ANY(:{label})")
            params[label] = list(values)
        elif values and column:
            names = [f"{label}_{i}" for i in range(len(values))]
            clauses.append(
                f"{prefix}{quote(conn, column)} IN ({', '.join(':' + n for n in names)})"
            )
            params.update(zip(names, values, strict=True))
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


def time_storage(table: TableInfo | None, column: str) -> TimeStorage:
    """``naive`` when ``table`` lists ``column`` as a timestamp without a zone, else ``aware``."""
    return "naive" if table is not None and column in table.naive_time_columns else "aware"


def window_params(conn: Connection, window: Window, storage: TimeStorage) -> tuple[Any, Any]:
    """The window's start and end as a column of ``storage`` on ``conn`` compares with them.

    Databases keep whole microseconds: the window is widened to them (start floored, end
    ceiled), so a bound in nanoseconds never loses a row.
    """
    return (
        bind_time(conn, window.start.floor("us"), storage),
        bind_time(conn, window.end.ceil("us"), storage),
    )


def bind_time(conn: Connection, stamp: pd.Timestamp, storage: TimeStorage) -> Any:
    """``stamp`` (aware, whole microseconds) in the representation a time column stores."""
    utc = stamp.tz_convert("UTC")
    if storage == "epoch_s":
        return utc.timestamp()
    if conn.dialect.name == "sqlite":
        return utc.strftime(SQLITE_TIME_FORMAT)
    if storage == "naive" or conn.dialect.name != "postgresql":
        return utc.tz_localize(None).to_pydatetime()  # MySQL keeps no zone (session zone UTC)
    return utc.to_pydatetime()


def time_unknown(conn: Connection, column_sql: str, storage: TimeStorage) -> str:
    """SQL true where ``column_sql`` holds no time SQL can compare with bound ones.

    That is NULL and, on SQLite, text not in :data:`SQLITE_TIME_FORMAT` (``T``-separated or
    offset ISO 8601, a value without microseconds, text that is no time). Such rows can only be
    placed after parsing: a loader that lets them through must filter them again in pandas.
    """
    if conn.dialect.name == "sqlite" and storage != "epoch_s":
        return f"({column_sql} IS NULL OR {column_sql} NOT GLOB '{_SQLITE_TIME_GLOB}')"
    return f"{column_sql} IS NULL"


def quote(conn: Connection, identifier: str) -> str:
    """Quote one SQL identifier for ``conn``'s dialect (``schema.table`` quoted per part)."""
    preparer = conn.dialect.identifier_preparer
    return ".".join(preparer.quote_identifier(part) for part in identifier.split("."))


def read_frame(
    conn: Connection, query: str, params: Mapping[str, Any], *, what: str
) -> pd.DataFrame:
    """Run ``query`` and return its rows; PostgreSQL rows come through COPY as text.

    On PostgreSQL every value arrives as text (NULL as NaN), so callers parse JSON and
    timestamps themselves; on other databases values arrive as the driver gives them.
    """
    driver_errors: tuple[type[Exception], ...] = (SQLAlchemyError,)
    try:
        if conn.dialect.name == "postgresql" and conn.dialect.driver == "psycopg":
            import psycopg

            driver_errors = (SQLAlchemyError, psycopg.Error)  # COPY runs on the raw cursor
            return _copy_frame(conn, query, params)
        return pd.read_sql(sa.text(query), conn, params=dict(params), dtype=object)
    except driver_errors as err:
        raise SourceError(
            f"{what}: query failed",
            value=first_line(getattr(err, "orig", None) or err),
            fix="check the table and column names in the manifest, and that the database "
            "user may read them",
        ) from err


def first_line(err: BaseException) -> str:
    """The first line of a driver's message, with any URL password masked."""
    lines = str(err).strip().splitlines()
    return scrub_text(lines[0] if lines else type(err).__name__)


def _copy_frame(conn: Connection, query: str, params: Mapping[str, Any]) -> pd.DataFrame:
    from psycopg import sql as psql

    # psycopg merges COPY parameters client-side with proper literal quoting.
    statement, ordered = _pyformat(query, params)
    raw = conn.connection.driver_connection
    buffer = io.BytesIO()
    with raw.cursor() as cursor:  # type: ignore[union-attr]
        copy_sql = psql.SQL("COPY ({}) TO STDOUT (FORMAT csv, HEADER, NULL {})").format(
            psql.SQL(statement),
            psql.Literal(NULL_MARK),
        )
        with cursor.copy(copy_sql, ordered) as copy:
            for block in copy:
                buffer.write(block)
    buffer.seek(0)
    if buffer.getbuffer().nbytes == 0:
        return pd.DataFrame()
    return pd.read_csv(
        buffer, dtype=object, keep_default_na=False, na_values=[NULL_MARK], encoding="utf-8"
    )


def _pyformat(query: str, params: Mapping[str, Any]) -> tuple[str, list[Any]]:
    """Turn ``:name`` binds into psycopg ``%s`` placeholders, in order of appearance."""
    import re

    ordered: list[Any] = []

    def swap(match: re.Match[str]) -> str:
        ordered.append(params[match.group(1)])
        return "%s"

    escaped = query.replace("%", "%%")
    return re.sub(r"(?<![:\w]):(\w+)", swap, escaped), ordered
