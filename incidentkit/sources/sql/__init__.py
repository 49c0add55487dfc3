"""Read-only database access: engines, table checks, filtered bulk reads.

Three promises hold here, whatever a manifest or a parameter holds:

- **Read-only.** Every transaction the kit opens says so itself (``SET TRANSACTION READ ONLY``
  on PostgreSQL, ``START TRANSACTION READ ONLY`` on MySQL/MariaDB), on top of the session
  default (PostgreSQL ``default_transaction_read_only``, MySQL ``SET SESSION TRANSACTION READ
  ONLY``); SQLite files are opened through a ``file:`` URI with ``mode=ro`` and
  ``PRAGMA query_only``, and the transaction is rolled back, never committed. BigQuery has no
  read-only transaction: a ``bigquery://`` engine sends compiled Core ``SELECT`` statements
  only (anything else is refused before it is sent), its URL may carry no option that would
  give a query a destination table, and every query job is capped by ``maximum_bytes_billed``
  (``docs/bigquery.md``). ClickHouse has no transactions either: every connection of a
  ``clickhousedb://`` (``clickhouse://``) engine, and of a ``chdb:///folder`` one (the embedded
  engine, through clickhouse-connect's chdb backend), sends ``readonly = 2`` with each query
  (no write, no DDL; the server refuses them), and a statement carrying ClickHouse settings of
  its own is refused before it is sent (:func:`_clickhouse_engine`).
- **One statement, values bound.** Queries are SQLAlchemy Core statements: identifiers from the
  manifest are checked against the table's real columns, then quoted by the dialect; every
  value (filters, window bounds, id lists) is a bind parameter. On PostgreSQL the rows travel
  through ADBC (``adbc-driver-postgresql``), which sends the query with its parameters bound
  server-side and receives the rows by binary COPY straight into Arrow. MySQL connections
  never allow several statements.
- **Nothing beside the evidence.** A SQLite file is opened with ``immutable=1`` (no ``-wal``,
  ``-shm`` or journal is created); one with a ``-wal`` or ``-journal`` beside it (a store being
  written, or not checkpointed) is copied with its sidecars into a temporary folder first, so
  its last writes are read and nothing next to it changes (:func:`open_sqlite`).

Window bounds are bound the way the time column stores instants (:data:`TimeStorage`), so the
database compares like with like, exactly to the microsecond: PostgreSQL ``timestamptz`` takes
aware UTC datetimes, ``timestamp without time zone`` and MySQL/MariaDB ``DATETIME``/``TIMESTAMP``
(compared in the session zone, UTC) naive UTC datetimes, SQLite (which has no time type and
compares text) UTC text in the form SQLAlchemy and ADK write, ``YYYY-MM-DD HH:MM:SS.ffffff``,
and ClickHouse (whose ``DateTime64`` of any zone compares with a number as an instant) and
epoch columns (SqliteSessionService's ``REAL``) seconds.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import tempfile
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote as percent_encode
from urllib.parse import unquote, urlsplit

import pandas as pd
import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError
from sqlalchemy.sql.elements import ColumnElement

from incidentkit import progress
from incidentkit.errors import SchemaError, SourceError
from incidentkit.manifest import Filters, SourceSpec, Window
from incidentkit.redact import redact_url, scrub_text

READ_ONLY_OPTIONS = "-c default_transaction_read_only=on -c TimeZone=UTC"
"""PostgreSQL session settings of every kit connection; they follow (and so beat) the URL's."""
TimeStorage = Literal["aware", "naive", "epoch_s"]
"""How a column keeps instants: a zoned type, UTC wall time without a zone, epoch seconds."""
SQLITE_TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f"
"""The text SQLAlchemy's SQLite ``DATETIME`` (and so ADK) writes; SQLite compares it as text."""
SQLITE_SIDECARS = ("-wal", "-journal", "-shm")
"""Files SQLite keeps beside a database; a ``-wal`` or ``-journal`` means unread writes."""
_D = "[0-9]"
_SQLITE_TIME_GLOB = f"{_D * 4}-{_D * 2}-{_D * 2} {_D * 2}:{_D * 2}:{_D * 2}.{_D * 6}"
_MYSQL_MULTI_STATEMENTS = 1 << 16  # pymysql.constants.CLIENT.MULTI_STATEMENTS


def open_engine(
    url: str,
    *,
    what: str,
    shown: str | None = None,
    base: Path | None = None,
    max_bytes_billed: int | None = None,
) -> Engine:
    """A read-only engine for ``url``; ``what`` names the source in error messages.

    ``shown`` stands for the URL in every message about it (``env:NAME`` for a URL read from
    the environment: its value is never shown, whatever it holds); without it the URL is shown
    with its passwords masked. A relative ``sqlite:///`` file starts at ``base`` (the
    manifest's folder), else at the working directory. ``max_bytes_billed`` caps every query
    of a ``bigquery://`` engine (None: :data:`~incidentkit.manifest.DEFAULT_MAX_BYTES_BILLED`);
    other databases ignore it.
    """
    safe = shown if shown is not None else redact_url(url)
    variable = safe.startswith("env:")
    example = "a SQLAlchemy URL such as postgresql+psycopg://user@host:5432/db"
    try:
        parsed = make_url(url)
        parsed.port  # noqa: B018  (a non-integer port raises here, not at connect time)
    except (ArgumentError, ValueError) as err:
        raise SourceError(
            f"{what}: not a database URL",
            value=safe,
            fix=f"set {safe[4:]} to {example}, or make the manifest name the variable that "
            "holds the URL (not one holding a password or a key)"
            if variable
            else f"give {example}",
        ) from err
    backend = parsed.get_backend_name()
    if backend == "postgres":  # what Heroku-style settings and many tools write
        parsed = parsed.set(drivername="postgresql+psycopg")
        backend = "postgresql"
    try:
        if backend == "sqlite":
            database = parsed.database or ""
            if not database or database == ":memory:" or database.startswith("file:"):
                raise SourceError(
                    f"{what}: give SQLite evidence as a file path",
                    value=safe,
                    fix='point at a SQLite file: path = "sessions.db" in the manifest, or '
                    "sqlite:////absolute/path.db",
                )
            start = base if base is not None else Path.cwd()
            engine = open_sqlite(start / Path(database).expanduser(), what=what)
        elif backend == "postgresql":
            if parsed.drivername == "postgresql":
                parsed = parsed.set(drivername="postgresql+psycopg")
            options = " ".join([*_query_values(parsed, "options"), READ_ONLY_OPTIONS])
            engine = sa.create_engine(
                parsed.difference_update_query(["options"]),
                connect_args={"options": options},
                poolclass=sa.pool.NullPool,
            )
            _CONNINFO[engine] = _conninfo(engine, options)
        elif backend in ("mysql", "mariadb"):
            if parsed.drivername in ("mysql", "mariadb"):
                parsed = parsed.set(drivername="mysql+pymysql")
            engine = sa.create_engine(parsed, poolclass=sa.pool.NullPool, paramstyle="pyformat")
            sa.event.listen(engine, "do_connect", _mysql_single_statements)
            # Two statements: MySQL/MariaDB cannot combine TRANSACTION with variables in one SET.
            sa.event.listen(engine, "connect", _mysql_read_only)
        elif backend == "bigquery":
            engine = _bigquery_engine(parsed, what=what, safe=safe, cap=max_bytes_billed)
        elif backend in CLICKHOUSE_BACKENDS:
            engine = _clickhouse_engine(url, parsed, what=what, safe=safe)
        else:
            raise SourceError(
                f"{what}: database kind not supported",
                value=safe if variable else backend,
                fix="use PostgreSQL, MySQL/MariaDB, SQLite, BigQuery or ClickHouse",
            )
    except NoSuchModuleError as err:
        raise SourceError(
            f"{what}: no driver for this URL",
            value=safe,
            fix="install the warehouse extra for bigquery:// (pip install 'incidentkit[warehouse]')"
            if backend == "bigquery"
            else "use postgresql+psycopg://, mysql+pymysql://, sqlite:/// or clickhousedb://",
        ) from err
    if shown is not None:
        _SHOWN[engine] = shown
    return engine


_SHOWN: weakref.WeakKeyDictionary[Engine, str] = weakref.WeakKeyDictionary()
"""What messages show for an engine's URL, when not the URL (``env:NAME``)."""


def open_source(spec: SourceSpec, environ: Mapping[str, str] | None, *, what: str) -> Engine:
    """A read-only engine for a database section: its SQLite file, or its (``env:``) URL."""
    if spec.sqlite_path is not None:
        return open_sqlite(spec.sqlite_path, what=what)
    ref = spec.url_ref
    shown = ref if ref is not None and ref.startswith("env:") else None
    return open_engine(
        spec.url(environ),
        what=what,
        shown=shown,
        base=spec.base,
        max_bytes_billed=spec.max_bytes_billed,
    )


def open_sqlite(path: Path, *, what: str) -> Engine:
    """A read-only engine on the SQLite file ``path`` that writes nothing beside it.

    The file is opened through a ``file:`` URI with every path character percent-encoded (a
    ``#``, ``?`` or ``%`` in a folder name stays part of the path) and ``mode=ro``. A file with
    no ``-wal`` or ``-journal`` beside it is opened ``immutable=1``: SQLite then takes no lock
    and creates no ``-shm``. One with such a sidecar holds writes the main file lacks, which
    ``immutable`` would ignore, and opening it normally would create or touch its ``-shm``: it
    is copied with its sidecars into a temporary folder, removed when the engine is disposed.
    """
    path = path.expanduser().absolute()
    if not path.is_file():
        raise SourceError(
            f"{what}: SQLite file not found",
            value=str(path),
            fix="check the path or sqlite:/// URL (a relative one starts at the manifest's folder)",
        )
    pending = [s for s in SQLITE_SIDECARS[:2] if _sidecar(path, s).exists()]
    copy_dir: Path | None = None
    if pending:
        copy_dir = Path(tempfile.mkdtemp(prefix="incidentkit-sqlite-"))
        target = copy_dir / "evidence.db"
        try:
            shutil.copyfile(path, target)
            for suffix in pending:
                shutil.copyfile(_sidecar(path, suffix), _sidecar(target, suffix))
        except OSError as err:
            shutil.rmtree(copy_dir, ignore_errors=True)
            raise SourceError(
                f"{what}: cannot copy the SQLite store to a temporary folder",
                value=str(path),
                fix=f"free space in {tempfile.gettempdir()} (or set TMPDIR), or checkpoint the "
                "store so it has no -wal file",
            ) from err
        uri = f"file:{percent_encode(str(target))}?mode=ro"
    else:
        uri = f"file:{percent_encode(str(path))}?mode=ro&immutable=1"

    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
        conn.execute("PRAGMA query_only = ON")
        return conn

    # Named binds: SQLAlchemy's qmark rendering rewrites a "%(name)s" inside a quoted
    # identifier into a placeholder (seen with SQLAlchemy 2.1); sqlite3 parses :name itself.
    shown = sa.URL.create("sqlite", database=str(path))  # for messages; creator connects
    engine = sa.create_engine(
        shown, creator=connect, poolclass=sa.pool.NullPool, paramstyle="named"
    )
    if copy_dir is not None:
        cleanup = weakref.finalize(engine, shutil.rmtree, copy_dir, ignore_errors=True)
        sa.event.listen(engine, "engine_disposed", lambda _engine: cleanup())
    return engine


BIGQUERY_URL_KEYS = frozenset({"location"})
"""The only option a ``bigquery://`` URL may carry. The dialect would take others from the URL
into every query's job configuration (``destination``, ``write_disposition``, ``dry_run``,
``credentials_base64``...): a destination table would make a query write, and credentials
belong in the environment."""


def _bigquery_engine(parsed: sa.URL, *, what: str, safe: str, cap: int | None) -> Engine:
    """An engine on ``bigquery://PROJECT/DATASET`` whose every query job carries
    ``maximum_bytes_billed`` (``cap``) and which runs Core ``SELECT`` statements only.

    BigQuery has no read-only transaction: the kit's reads are read-only because the URL
    can name no destination (:data:`BIGQUERY_URL_KEYS`) and every statement is checked to be
    a compiled ``Select`` before it is sent (:func:`_selects_only`). The dialect builds its
    client here, from ``google.auth.default()`` (as ADK's plugin does): credentials never
    pass through the kit.
    """
    from incidentkit.manifest import DEFAULT_MAX_BYTES_BILLED

    options = sorted(set(parsed.query) - BIGQUERY_URL_KEYS)
    if options:
        raise SourceError(
            f"{what}: the BigQuery URL carries options the kit does not take",
            value=options,
            fix="write bigquery://PROJECT/DATASET (?location=... allowed); credentials come "
            "from the environment (GOOGLE_APPLICATION_CREDENTIALS, gcloud's application-default "
            "login, the metadata server), the cost cap from max_bytes_billed in the manifest",
        )
    if not parsed.host or not parsed.database:
        raise SourceError(
            f"{what}: the BigQuery URL must name the project and the dataset",
            value=safe,
            fix="write bigquery://PROJECT/DATASET (the plugin's project_id and dataset_id)",
        )
    limit = DEFAULT_MAX_BYTES_BILLED if cap is None else cap
    capped = parsed.update_query_dict({"maximum_bytes_billed": str(limit)})
    engine = sa.create_engine(capped, poolclass=sa.pool.NullPool)
    forget_bigquery_unnest()
    sa.event.listen(engine, "before_cursor_execute", _selects_only)
    return engine


def forget_bigquery_unnest() -> None:
    """Undo what importing ``sqlalchemy_bigquery`` does to every other dialect: it registers
    its ``unnest`` (ARRAY arguments only, no cache key) as SQLAlchemy's ``func.unnest``, which
    PostgreSQL's own reflection calls (``has_index``), so a process that has read BigQuery
    would warn, or fail, reading PostgreSQL. The kit never calls ``func.unnest``; BigQuery's
    ``IN UNNEST(@param)`` is written by its compiler, not through the registry."""
    from sqlalchemy.sql import functions

    registry = functions._registry["_default"]
    found = registry.get("unnest")
    if found is not None and found.__module__.startswith("sqlalchemy_bigquery"):
        del registry["unnest"]


CLICKHOUSE_DRIVERS: Mapping[str, frozenset[str]] = {
    "clickhouse": frozenset({"", "http", "https", "connect"}),
    "clickhousedb": frozenset({"", "http", "https", "connect"}),
    "chdb": frozenset({""}),
}
"""URL schemes (before ``+``) read through clickhouse-connect's ``clickhousedb`` dialect (a
server over HTTP(S); a chDB folder, ``chdb:///path``), and the drivers (after ``+``) each takes."""
CLICKHOUSE_BACKENDS = frozenset(CLICKHOUSE_DRIVERS)
CLICKHOUSE_URL_KEYS = frozenset({"secure"})
"""The only option a ClickHouse URL may carry. The dialect gives every other one to the client,
which sends it as a ClickHouse setting with each query: a setting can change what a query
computes (``join_use_nulls``...) or lift ``readonly``."""
_CLICKHOUSE_TIMEOUTS = {"connect_timeout": 10, "send_receive_timeout": 300}
_CHDB_FIX = (
    "chDB runs one engine folder per process: read this folder in a process that has opened no "
    "other (close other chdb clients first), and give chdb:///absolute/path/to/folder, a folder "
    "chDB has written"
)


def _clickhouse_engine(url: str, parsed: sa.URL, *, what: str, safe: str) -> Engine:
    """A read-only engine of clickhouse-connect's ``clickhousedb`` dialect on a ClickHouse
    server (``clickhousedb://user@host:8123/db``; ``clickhouse://`` and ``+https`` too) or on a
    chDB folder (``chdb:///absolute/folder``, the embedded engine: tests, local copies).

    ClickHouse has no transactions and no read-only one: every connection sends ``readonly =
    2`` with each of its queries (:func:`_clickhouse_read_only`; a user whose profile says
    ``readonly = 2`` keeps it), which refuses writes and DDL on the server; a statement
    asking for ClickHouse settings of its own (which would beat the connection's) is refused
    before it is sent (:func:`_no_settings`).
    """
    options = sorted(set(parsed.query) - CLICKHOUSE_URL_KEYS)
    if options:
        raise SourceError(
            f"{what}: the ClickHouse URL carries options the kit does not take",
            value=options,
            fix="write clickhousedb://user@host:8123/database (?secure=true, or +https, allowed); "
            "the kit sends its own settings (readonly = 2)",
        )
    backend, _, driver = parsed.drivername.partition("+")
    if driver not in CLICKHOUSE_DRIVERS[backend]:
        raise SourceError(
            f"{what}: the kit reads ClickHouse over HTTP(S) only (clickhouse-connect)",
            value=safe,
            fix="write clickhousedb://user@host:8123/database (8443 with +https), not the "
            "native protocol's port 9000; chdb:///absolute/folder for chDB",
        )
    if backend == "chdb":
        folder = _chdb_folder(url, what=what, safe=safe)
        engine = sa.create_engine(
            sa.URL.create("clickhousedb", database=str(folder)),  # for messages; creator connects
            creator=lambda: _chdb_connection(folder, what=what, safe=safe),
            poolclass=sa.pool.NullPool,
        )
        _SHOWN.setdefault(engine, safe)
    else:
        secure = driver == "https" or str(parsed.query.get("secure", "")).lower() in (
            "1",
            "true",
            "yes",
        )
        server = parsed.set(drivername="clickhousedb").difference_update_query(["secure"])
        engine = sa.create_engine(
            server,
            connect_args={
                "secure": secure,
                "autogenerate_session_id": False,
                **_CLICKHOUSE_TIMEOUTS,
            },
            poolclass=sa.pool.NullPool,
        )
    # first: before the dialect's own first queries on the connection
    sa.event.listen(engine, "connect", _clickhouse_read_only(what, safe), insert=True)
    sa.event.listen(engine, "before_cursor_execute", _no_settings)
    return engine


def _chdb_folder(url: str, *, what: str, safe: str) -> Path:
    """The folder of ``chdb:///absolute/folder`` (percent-decoded); it must exist."""
    split = urlsplit(url)
    folder = Path(unquote(split.path)) if not split.netloc and split.path else None
    if split.fragment or folder is None or not folder.is_absolute() or not folder.is_dir():
        raise SourceError(
            f"{what}: no chDB folder at this URL",
            value=safe,
            fix="give chdb:///absolute/path/to/folder, a folder chDB has written (a # or ? in "
            "its name written %23, %3F)",
        )
    return folder


def _chdb_connection(folder: Path, *, what: str, safe: str) -> Any:
    """A clickhouse-connect DB-API connection on the chDB folder ``folder``.

    The folder goes as ``path``, not in a ``chdb://`` DSN: the DSN's path is not
    percent-decoded and a ``#`` or ``?`` in it cuts it short (another folder would be opened).
    """
    from clickhouse_connect import dbapi
    from clickhouse_connect.driver.exceptions import Error as ClickHouseError

    try:
        return dbapi.connect(interface="chdb", path=str(folder))
    except (ClickHouseError, OSError, ImportError) as err:
        raise SourceError(
            f"{what}: cannot open the chDB folder",
            value=f"{safe} ({first_line(err)})",
            fix=_CHDB_FIX,
        ) from err


CLICKHOUSE_SETTINGS = {"aggregate_functions_null_for_empty": "1", "join_use_nulls": "1"}
"""ClickHouse settings every kit connection sends besides ``readonly = 2``: the SQL semantics
the Core queries assume on every other engine. ClickHouse's own defaults give ``0`` for
``MAX``/``MIN``/``SUM`` over no row (a ``latest_seconds`` of an empty window would be 1970)
and a type's default for the missing side of an outer join."""


def _clickhouse_read_only(what: str, safe: str) -> Any:
    """A ``connect`` listener that makes each ClickHouse connection send ``readonly = 2`` and
    :data:`CLICKHOUSE_SETTINGS` with every query.

    A user whose profile says ``readonly = 1`` is refused: ClickHouse then refuses every
    setting a query carries, so the kit's could not be sent (``readonly = 2`` allows settings
    and still no write). A profile with ``readonly = 2`` keeps it.
    """

    def listen(dbapi_conn: Any, _record: Any) -> None:
        from clickhouse_connect.driver.exceptions import Error as ClickHouseError

        client = dbapi_conn.client
        try:
            current = client.server_settings.get("readonly")
            value = "0" if current is None else str(current.value)
            if value not in ("0", "2"):
                raise ValueError(f"the user's profile has readonly = {value}")
            for key, setting in CLICKHOUSE_SETTINGS.items():
                client.set_client_setting(key, setting)
            if value == "0":  # a profile's readonly = 2 cannot be set again, even to 2
                client.set_client_setting("readonly", "2")
        except (ClickHouseError, ValueError) as err:
            dbapi_conn.close()
            raise SourceError(
                f"{what}: cannot make the ClickHouse connection read-only",
                value=f"{safe} ({first_line(err)})",
                fix="use a user allowed to set readonly = 2 (a profile with readonly = 2, or "
                "none): the kit sends readonly = 2 and "
                + ", ".join(f"{k} = {v}" for k, v in CLICKHOUSE_SETTINGS.items())
                + " with each query",
            ) from err

    return listen


def _no_settings(
    _conn: Connection,
    _cursor: Any,
    statement: str,
    _parameters: Any,
    context: Any,
    _executemany: bool,
) -> None:
    """Refuse a statement that carries ClickHouse settings (``execution_options(settings=...)``):
    they are sent with the query and beat the connection's ``readonly``."""
    options = dict(getattr(context, "execution_options", None) or {})
    compiled = getattr(context, "compiled", None)
    element = getattr(compiled, "statement", None)
    if element is not None:
        options.update(element.get_execution_options())
    if options.get("settings"):
        raise SourceError(
            "ClickHouse: the kit sends no statement with settings of its own",
            value=sorted(options["settings"]),
            fix="this is a bug in the kit: report it (no statement was sent)",
        )


def _selects_only(
    _conn: Connection,
    _cursor: Any,
    statement: str,
    _parameters: Any,
    context: Any,
    _executemany: bool,
) -> None:
    """Refuse any statement but a compiled Core ``Select`` (or a ``UNION`` of them): no text
    SQL, no DML, DDL or script."""
    compiled = getattr(context, "compiled", None)
    if not isinstance(getattr(compiled, "statement", None), sa.Select | sa.CompoundSelect):
        raise SourceError(
            "BigQuery: the kit sends SELECT statements only",
            value=statement.split(None, 1)[0][:40] if statement.strip() else "(empty)",
            fix="this is a bug in the kit: report it (no statement was sent)",
        )


def _sidecar(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _query_values(url: sa.URL, key: str) -> list[str]:
    """The values of query parameter ``key`` in ``url`` (none, one or repeated)."""
    value = url.query.get(key)
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _mysql_single_statements(
    _dialect: Any, _record: Any, _cargs: Any, cparams: dict[str, Any]
) -> None:
    """Clear MULTI_STATEMENTS, whatever the URL asked for: one statement per execute."""
    cparams["client_flag"] = int(cparams.get("client_flag", 0)) & ~_MYSQL_MULTI_STATEMENTS


def _mysql_read_only(dbapi_conn: Any, _record: Any) -> None:
    with dbapi_conn.cursor() as cursor:
        cursor.execute("SET SESSION TRANSACTION READ ONLY")
        cursor.execute("SET SESSION time_zone = '+00:00'")


_BEGIN_READ_ONLY = {
    "postgresql": "SET TRANSACTION READ ONLY",
    "mysql": "START TRANSACTION READ ONLY",
}
"""The statement that makes a transaction read-only, by dialect. None for ClickHouse
(``clickhousedb``): it has no transactions (the driver's begin and rollback do nothing), and
every query of the kit's connections carries ``readonly = 2`` (:func:`_clickhouse_engine`)."""


@contextmanager
def connect(engine: Engine, *, what: str) -> Iterator[Connection]:
    """A connection in a transaction that is read-only by its own statement, then rolled back.

    Connection failures become SourceError; so does a schema SQLite cannot decode as UTF-8
    (its driver raises UnicodeDecodeError on the message naming it), as SchemaError.
    """
    safe = _shown(engine)
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
    except SQLAlchemyError as err:
        raise SourceError(
            f"{what}: cannot open the database",
            value=f"{safe} ({first_line(err)})",
            fix="check the URL and that the file or server is a database of the named kind",
        ) from err
    try:
        transaction = conn.begin()
        try:
            statement = _BEGIN_READ_ONLY.get(conn.dialect.name)
            if statement is not None:
                conn.exec_driver_sql(statement)
            yield conn
        finally:
            transaction.rollback()
    except DBAPIError as err:
        raise SourceError(
            f"{what}: the database refused a statement",
            value=f"{safe}: {first_line(err.orig if err.orig else err)}",
            fix="check that the file or server is a database of the kind the manifest names, "
            "and that the database user may read it",
        ) from err
    except UnicodeDecodeError as err:
        raise _undecodable(err, safe, what=what) from err
    finally:
        conn.close()


def _shown(engine: Engine) -> str:
    """The engine's URL as messages show it: ``env:NAME``, else with its passwords masked."""
    return _SHOWN.get(engine) or redact_url(engine.url.render_as_string(hide_password=False))


def _undecodable(err: UnicodeDecodeError, where: str, *, what: str) -> SchemaError:
    """The error for text of a database (a schema, a message naming it) that is not UTF-8:
    it names the database and the text, undecodable bytes as ``\\xff``."""
    raw = err.object if isinstance(err.object, bytes) else bytes(err.object)
    text = scrub_text(raw.decode("utf-8", "backslashreplace"))
    return SchemaError(
        f"{what}: the database holds text that is not UTF-8",
        value=f"{where}: {text}",
        fix="repair the schema or the value with the sqlite3 shell (PRAGMA integrity_check "
        "shows the damage), or export the evidence to JSON lines",
    )


@dataclass(frozen=True)
class TableInfo:
    """The columns a table has, and which of them store timestamps without a time zone."""

    name: str
    columns: tuple[str, ...]
    naive_time_columns: frozenset[str]
    json_columns: frozenset[str]

    @cached_property
    def clause(self) -> sa.TableClause:
        """The table as a Core clause with exactly its real columns, every name quoted."""
        schema, _, name = self.name.rpartition(".")
        return sa.table(
            sa.sql.quoted_name(name, quote=True),
            *(sa.column(sa.sql.quoted_name(col, quote=True)) for col in self.columns),
            schema=sa.sql.quoted_name(schema, quote=True) if schema else None,
        )


def inspect_table(conn: Connection, table: str, *, what: str = "") -> TableInfo | None:
    """Describe ``table`` (``schema.table`` allowed), or None when it does not exist.

    A schema that is not UTF-8 is a SchemaError naming the database (``what`` names the
    source; default the table)."""
    schema, _, name = table.rpartition(".")
    inspector = sa.inspect(conn)
    with decoded(conn, what=what or f"reading table {table}"):
        if not inspector.has_table(name, schema=schema or None):
            return None
        return _describe(conn, inspector, table, name, schema)


@contextmanager
def decoded(conn: Connection, *, what: str) -> Iterator[None]:
    """Turn a database's text that is not UTF-8 (a SQLite schema: sqlite3 raises
    UnicodeDecodeError) into a SchemaError naming the database and the text."""
    try:
        yield
    except UnicodeDecodeError as err:
        raise _undecodable(err, _shown(conn.engine), what=what) from err


def _describe(
    conn: Connection, inspector: sa.Inspector, table: str, name: str, schema: str
) -> TableInfo:
    """The :class:`TableInfo` of an existing ``table``."""
    naive: set[str] = set()
    json_cols: set[str] = set()
    columns = []
    for col in inspector.get_columns(name, schema=schema or None):
        if conn.dialect.name == "mysql":
            # SQLAlchemy reads MySQL columns from SHOW CREATE TABLE and leaves a backtick in a
            # name doubled, as that text escapes it (seen with SQLAlchemy 2.1).
            col["name"] = col["name"].replace("``", "`")
        columns.append(col["name"])
        col_type = col["type"]
        if isinstance(col_type, sa.DateTime) and not getattr(col_type, "timezone", False):
            naive.add(col["name"])
        if isinstance(col_type, sa.JSON):
            json_cols.add(col["name"])
    return TableInfo(table, tuple(columns), frozenset(naive), frozenset(json_cols))


def require_table(conn: Connection, table: str, needed: Sequence[str], *, what: str) -> TableInfo:
    """``inspect_table`` that raises SchemaError for a missing table or missing columns."""
    info = inspect_table(conn, table, what=what)
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


def require_rows(conn: Connection, table: TableInfo, *, what: str) -> None:
    """Refuse a table that holds no row at all: a source must say something.

    Called when a filtered read came back empty, to tell "nothing matched" from "nothing there".
    """
    probe = sa.select(sa.literal(1)).select_from(table.clause).limit(1)
    if conn.execute(probe).first() is None:
        raise SourceError(
            f"{what}: the table {table.name} is empty",
            value=table.name,
            fix="check that the manifest points at the right database and table",
        )


def distinct_values(
    conn: Connection, table: TableInfo, name: str, *, limit: int = 200
) -> tuple[list[str], bool]:
    """What a filter on column ``name`` of ``table`` could name: its distinct values (nulls
    left out) as text, sorted, at most ``limit``; and whether that is all of them. One
    read-only ``SELECT DISTINCT``, no value from input in it."""
    col = column(table.clause, name)
    statement = sa.select(col).where(col.is_not(None)).distinct().order_by(col).limit(limit + 1)
    with decoded(conn, what=f"the values of {table.name}.{name}"):
        found = [str(row[0]) for row in conn.execute(statement)]
    return found[:limit], len(found) <= limit


def holds_value(conn: Connection, table: TableInfo, name: str, value: str) -> bool:
    """Whether some row of ``table`` has ``value`` in column ``name`` (the value bound)."""
    col = column(table.clause, name)
    probe = sa.select(sa.literal(1)).select_from(table.clause)
    probe = probe.where(col == sa.bindparam("value", value)).limit(1)
    with decoded(conn, what=f"the values of {table.name}.{name}"):
        return conn.execute(probe).first() is not None


def column(table: sa.TableClause, name: str) -> sa.ColumnClause[Any]:
    """The column ``name`` of ``table``; only real columns (checked by require_table) exist."""
    found: sa.ColumnClause[Any] = table.c[name]
    return found


@dataclass(frozen=True)
class Predicates:
    """Column names the filters apply to, for one table; None means the filter does not apply.

    ``time_storage`` says how ``time`` keeps instants; None takes it from the table's
    ``naive_time_columns``, else aware.
    """

    time: str | None = None
    app_name: str | None = None
    session_id: str | None = None
    invocation_id: str | None = None
    time_storage: TimeStorage | None = None

    @classmethod
    def named(
        cls, names: Mapping[str, str], *, time: str, time_storage: TimeStorage | None = None
    ) -> Predicates:
        """Every filter, on a table whose canonical columns (``time`` and ``app_name``,
        ``session_id``, ``invocation_id``) have the names ``names`` gives them."""
        return cls(
            time=names[time],
            app_name=names["app_name"],
            session_id=names["session_id"],
            invocation_id=names["invocation_id"],
            time_storage=time_storage,
        )


def where(
    conn: Connection, filters: Filters, on: Predicates, table: TableInfo
) -> list[ColumnElement[bool]]:
    """The filters as Core conditions on ``table``, every value a bind parameter."""
    clause = table.clause
    conditions: list[ColumnElement[bool]] = []
    if filters.window is not None and on.time:
        time_col = column(clause, on.time)
        storage = on.time_storage or time_storage(table, on.time)
        start, end = window_params(conn, filters.window, storage)
        conditions += [
            time_col >= sa.bindparam("w_start", start),
            time_col < sa.bindparam("w_end", end),
        ]
    if filters.app_name is not None and on.app_name:
        conditions.append(column(clause, on.app_name) == sa.bindparam("app_name", filters.app_name))
    for values, name, label in (
        (filters.session_ids, on.session_id, "sid"),
        (filters.invocation_ids, on.invocation_id, "inv"),
    ):
        if values and name:
            conditions.append(in_values(conn, column(clause, name), label, values))
    return conditions


def in_values(
    conn: Connection, col: ColumnElement[Any], label: str, values: Sequence[Any]
) -> ColumnElement[bool]:
    """``col`` is one of ``values``: one array parameter on PostgreSQL, else expanding IN."""
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import ARRAY

        array = sa.bindparam(label, list(values), type_=ARRAY(sa.String()))
        return col == sa.any_(array)
    return col.in_(sa.bindparam(label, list(values), expanding=True))


def time_storage(table: TableInfo | None, column: str) -> TimeStorage:
    """``naive`` when ``table`` lists ``column`` as a timestamp without a zone, else ``aware``."""
    return "naive" if table is not None and column in table.naive_time_columns else "aware"


BoundTime = float | str | datetime
"""A time as a bind parameter: epoch seconds, SQLite's text, or a datetime (naive or aware)."""


def window_params(
    conn: Connection, window: Window, storage: TimeStorage
) -> tuple[BoundTime, BoundTime]:
    """The window's start and end as a column of ``storage`` on ``conn`` compares with them.

    Databases keep whole microseconds: the window is widened to them (start floored, end
    ceiled), so a bound in nanoseconds never loses a row.
    """
    return (
        bind_time(conn, window.start.floor("us"), storage),
        bind_time(conn, window.end.ceil("us"), storage),
    )


def bind_time(conn: Connection, stamp: pd.Timestamp, storage: TimeStorage) -> BoundTime:
    """``stamp`` (aware, whole microseconds) in the representation a time column stores.

    ClickHouse compares its time columns with epoch seconds (a ``Float64``): a ``DateTime`` or
    ``DateTime64`` of any zone compares with a number as the instant it holds, exactly to the
    microsecond (checked on chDB, equality included, through a MergeTree key). The other
    spellings fail there: clickhouse-connect renders a bound ``datetime`` to the second, text
    is read in the column's zone, and the key analysis refuses text with a zone (``...Z``) for
    a ``DateTime64`` and text with a fraction for a ``DateTime``.
    """
    utc = stamp.tz_convert("UTC")
    if storage == "epoch_s" or conn.dialect.name == "clickhousedb":
        return utc.timestamp()
    if conn.dialect.name == "sqlite":
        return utc.strftime(SQLITE_TIME_FORMAT)
    if storage == "naive" or conn.dialect.name != "postgresql":
        return utc.tz_localize(None).to_pydatetime()  # MySQL keeps no zone (session zone UTC)
    return utc.to_pydatetime()


def time_unknown(
    conn: Connection, col: ColumnElement[Any], storage: TimeStorage
) -> ColumnElement[bool]:
    """True where ``col`` holds no time SQL can compare with bound ones.

    That is NULL and, on SQLite, text not in :data:`SQLITE_TIME_FORMAT` (``T``-separated or
    offset ISO 8601, a value without microseconds, text that is no time). Such rows can only be
    placed after parsing: a loader that lets them through must filter them again in pandas.
    """
    if conn.dialect.name == "sqlite" and storage != "epoch_s":
        return sa.or_(col.is_(None), sa.not_(col.op("GLOB")(sa.literal(_SQLITE_TIME_GLOB))))
    return col.is_(None)


def read_frame(conn: Connection, statement: sa.Select[Any], *, what: str) -> pd.DataFrame:
    """Run ``statement`` and return its rows; PostgreSQL rows come through ADBC as text.

    On PostgreSQL every value arrives as its text (NULL as NaN), so callers parse JSON and
    timestamps themselves; on other databases values arrive as the driver gives them.
    """
    [frame] = stream_frames(conn, statement, what=what, rows=None)  # one frame, always
    return frame


def stream_frames(
    conn: Connection, statement: sa.Select[Any], *, what: str, rows: int | None
) -> Iterator[pd.DataFrame]:
    """:func:`read_frame` in frames of about ``rows`` rows each (None: one frame), each
    holding its own memory; at least one frame, empty when no row matches.

    On PostgreSQL the rows travel through ADBC (``adbc-driver-postgresql``: binary COPY into
    Arrow, in C) on a connection of its own, opened with the same read-only settings in a
    transaction that says ``SET TRANSACTION READ ONLY`` and is rolled back; every selected
    value is cast to text in the query, so callers see what PostgreSQL's text output gives
    (``bench_sql_read.py``). A stream left early closes that connection, which ends its query.
    Other databases give one frame, through SQLAlchemy.
    """
    conninfo = _CONNINFO.get(conn.engine)
    with _query_errors(what, arrow=conninfo is not None):
        if conninfo is None:
            yield pd.read_sql(statement, conn, dtype=object)
            return
        query, params = _arrow_statement(conn, statement)
        yield from _arrow_frames(conninfo, query, params, rows)


_CONNINFO: weakref.WeakKeyDictionary[Engine, str] = weakref.WeakKeyDictionary()
"""The libpq connection string of each PostgreSQL engine, for its ADBC reads."""


def _conninfo(engine: Engine, options: str) -> str:
    """``engine``'s connection parameters (as its psycopg dialect passes them) as a libpq
    connection string, with the kit's session ``options``."""
    from psycopg.conninfo import make_conninfo

    _args, params = engine.dialect.create_connect_args(engine.url)
    plain = {key: value for key, value in params.items() if isinstance(value, str | int)}
    return make_conninfo("", **{**plain, "options": options})


def _arrow_statement(conn: Connection, statement: sa.Select[Any]) -> tuple[str, tuple[Any, ...]]:
    """``statement`` with each selected column cast to text, in PostgreSQL's ``$n`` style,
    and its bound values in that order.

    The statement is compiled as psycopg takes it (``%(name)s`` binds, every other ``%``
    doubled, identifiers and literals included), and Python's own ``%`` formatting, the rule
    psycopg applies, turns each bind into its number: a name or text that looks like a bind
    (a column called ``%(app_name)s`` or ``$1``) stays what it is. SQLAlchemy's own
    ``numeric_dollar`` rendering rewrites such a quoted name (seen with SQLAlchemy 2.1).
    """
    as_text = [
        sa.cast(col, sa.Text()).label(name) for name, col in statement.selected_columns.items()
    ]
    compiled = statement.with_only_columns(*as_text, maintain_column_froms=True).compile(
        dialect=conn.dialect, compile_kwargs={"render_postcompile": True}
    )
    numbers = _Numbered()
    query = compiled.string % numbers
    return query, tuple(compiled.params[name] for name in numbers.order)


class _Numbered(dict[str, str]):
    """``$1``, ``$2``, ... for bind names in the order ``%`` formatting first asks for them."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[str] = []

    def __missing__(self, name: str) -> str:
        self.order.append(name)
        self[name] = f"${len(self.order)}"
        return self[name]


_BATCH_OPTION = "adbc.postgresql.batch_size_hint_bytes"
_BATCH_BYTES = 4 << 20
"""Bytes of rows ADBC gathers into one Arrow batch (its default, 16 MiB, makes a progress bar
jump and frames of a few rows coarse); measured as fast in ``bench_sql_read.py``."""


def _arrow_frames(
    conninfo: str, query: str, params: tuple[Any, ...], rows: int | None
) -> Iterator[pd.DataFrame]:
    """The rows of ``query`` read by ADBC, grouped into frames of about ``rows`` rows."""
    import adbc_driver_postgresql.dbapi as adbc

    with adbc.connect(conninfo) as raw, raw.cursor() as cursor:
        cursor.adbc_statement.set_options(**{_BATCH_OPTION: str(_BATCH_BYTES)})
        cursor.execute("SET TRANSACTION READ ONLY")
        cursor.execute(query, parameters=params)
        reader = cursor.fetch_record_batch()
        batches: list[pa.RecordBatch] = []
        grouped, yielded = 0, False
        for batch in reader:
            batches.append(batch)
            grouped += batch.num_rows
            progress.advance(batch.num_rows)
            if rows is not None and grouped >= rows:
                yield pa.Table.from_batches(batches, reader.schema).to_pandas()
                batches, grouped, yielded = [], 0, True
        if batches:
            yield pa.Table.from_batches(batches, reader.schema).to_pandas()
        elif not yielded:
            yield pd.DataFrame({name: pd.Series([], dtype=object) for name in reader.schema.names})
        raw.rollback()


@contextmanager
def _query_errors(what: str, *, arrow: bool) -> Iterator[None]:
    """A failed query (the driver's error; through ADBC, the server's message it carries) as
    a SourceError naming the source."""
    driver_errors: tuple[type[Exception], ...] = (SQLAlchemyError, pd.errors.DatabaseError)
    if arrow:
        import adbc_driver_manager

        driver_errors = (*driver_errors, adbc_driver_manager.Error, pa.ArrowException)
    try:
        yield
    except driver_errors as err:
        raise SourceError(
            f"{what}: query failed",
            value=_server_message(err),
            fix="check the table and column names in the manifest, and that the database "
            "user may read them",
        ) from err


_SERVER_ERROR = re.compile(r"ERROR:\s+(.+)")


def _server_message(err: BaseException) -> str:
    """The server's own message in a driver's error (ADBC wraps it in its own words), else
    the error's first line; passwords masked either way."""
    found = _SERVER_ERROR.search(str(err))
    return scrub_text(found[1].strip()) if found else first_line(getattr(err, "orig", None) or err)


def first_line(err: BaseException) -> str:
    """The first line of a driver's message, with any URL password masked."""
    lines = str(err).strip().splitlines()
    return scrub_text(lines[0] if lines else type(err).__name__)
