"""The SQL tables the kit reads, as SQLAlchemy metadata, and a bulk writer for them.

Used by the simulator (``--into``) and by tests to build evidence databases. The kit never
writes to evidence it reads: loaders use :mod:`incidentkit.sources.sql`, which is read-only.
Types follow production: PostgreSQL ``uuid``/``jsonb``/``timestamptz`` for the ledger, the
ADK Java event table and the journal; ADK Python's ``DatabaseSessionService`` schema v1 with
its naive-UTC ``DateTime`` columns and ``JSONB``/``LONGTEXT``/``TEXT`` event data.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql
from sqlalchemy.engine import Engine

from incidentkit.errors import SimulationError

_JSONB = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
_DYNAMIC_JSON = (
    sa.Text()
    .with_variant(postgresql.JSONB(), "postgresql")
    .with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
)
_UUID = sa.String(36).with_variant(postgresql.UUID(as_uuid=False), "postgresql")
_TSTZ = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
_NAIVE = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
_K = sa.String(128)

kit_metadata = sa.MetaData()
"""The ledger, ADK Java event and journal tables of the foundation issue."""

agent_run = sa.Table(
    "agent_run",
    kit_metadata,
    sa.Column("run_id", _UUID, primary_key=True),
    sa.Column(
        "app_name", sa.Text().with_variant(sa.String(128), "mysql", "mariadb"), nullable=False
    ),
    sa.Column("user_id", sa.String(128), nullable=False),
    sa.Column("session_id", sa.String(128), nullable=False),
    sa.Column("invocation_id", sa.String(256)),
    sa.Column("request", _JSONB, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("owner", sa.String(128)),
    sa.Column("lease_until", _TSTZ),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("started_at", _TSTZ, nullable=False),
    sa.Column("updated_at", _TSTZ, nullable=False),
)
adk_event = sa.Table(
    "adk_event",
    kit_metadata,
    sa.Column("event_id", sa.String(128), primary_key=True),
    sa.Column("app_name", sa.String(128), nullable=False),
    sa.Column("user_id", sa.String(128), nullable=False),
    sa.Column("session_id", sa.String(128), nullable=False),
    sa.Column("invocation_id", sa.String(256), nullable=False),
    sa.Column("ts", _TSTZ, nullable=False),
    sa.Column("event", _JSONB, nullable=False),
    sa.Index("adk_event_app_session_ts", "app_name", "session_id", "ts"),
)
tool_journal = sa.Table(
    "tool_journal",
    kit_metadata,
    sa.Column("key", sa.String(256), primary_key=True),
    sa.Column("invocation_id", sa.String(256), nullable=False),
    sa.Column("function_call_id", sa.String(256), nullable=False, server_default=""),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("result", _JSONB),
    sa.Column("created_at", _TSTZ, nullable=False),
    sa.Column("updated_at", _TSTZ, nullable=False),
)

adk_python_metadata = sa.MetaData()
"""ADK Python ``DatabaseSessionService`` schema v1 (google-adk 2.x)."""

adk_internal_metadata = sa.Table(
    "adk_internal_metadata",
    adk_python_metadata,
    sa.Column("key", _K, primary_key=True),
    sa.Column("value", sa.String(256), nullable=False),
)


def _state_table(name: str, *keys: str, created: bool = False) -> sa.Table:
    """The state of one scope (a session, an app, a user): its keys, the ``state`` JSON,
    ``create_time`` when ``created``, and ``update_time``."""
    times = ("create_time", "update_time") if created else ("update_time",)
    return sa.Table(
        name,
        adk_python_metadata,
        *(sa.Column(key, _K, primary_key=True) for key in keys),
        sa.Column("state", _DYNAMIC_JSON, nullable=False),
        *(sa.Column(time, _NAIVE, nullable=False) for time in times),
    )


adk_sessions = _state_table("sessions", "app_name", "user_id", "id", created=True)
adk_app_states = _state_table("app_states", "app_name")
adk_user_states = _state_table("user_states", "app_name", "user_id")
adk_events = sa.Table(
    "events",
    adk_python_metadata,
    sa.Column("id", _K, primary_key=True),
    sa.Column("app_name", _K, primary_key=True),
    sa.Column("user_id", _K, primary_key=True),
    sa.Column("session_id", _K, primary_key=True),
    sa.Column("invocation_id", sa.String(256), nullable=False),
    sa.Column("timestamp", _NAIVE, nullable=False),
    sa.Column("event_data", _DYNAMIC_JSON),
    sa.ForeignKeyConstraint(
        ["app_name", "user_id", "session_id"],
        ["sessions.app_name", "sessions.user_id", "sessions.id"],
        ondelete="CASCADE",
    ),
    sa.Index(
        "idx_events_app_user_session_ts_id", "app_name", "user_id", "session_id", "timestamp", "id"
    ),
)


def create_tables(engine: Engine, metadata: sa.MetaData) -> None:
    """Create every table of ``metadata``; refuse when one of them already holds rows."""
    with engine.begin() as conn:
        inspector = sa.inspect(conn)
        for table in metadata.sorted_tables:
            if inspector.has_table(table.name):
                count = conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
                if count:
                    raise SimulationError(
                        f"table {table.name} already holds rows",
                        value=f"{count} rows in {engine.url.render_as_string(hide_password=True)}",
                        fix="write into an empty database (or drop the tables first); "
                        "incidentkit never mixes simulated rows with existing ones",
                    )
        metadata.create_all(conn)


def insert_rows(
    engine: Engine, table: sa.Table, rows: Iterable[Mapping[str, object]], *, batch: int = 20_000
) -> int:
    """Insert ``rows`` into ``table`` in batches (COPY on PostgreSQL); returns the row count."""
    total = 0
    chunk: list[Mapping[str, object]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= batch:
            total += _write(engine, table, chunk)
            chunk = []
    if chunk:
        total += _write(engine, table, chunk)
    return total


def _json_columns(table: sa.Table) -> set[str]:
    """Columns holding JSON documents; rows give them as Python objects."""
    return {
        col.name
        for col in table.columns
        if isinstance(col.type, sa.JSON) or col.type is _DYNAMIC_JSON
    }


def _write(engine: Engine, table: sa.Table, rows: Sequence[Mapping[str, object]]) -> int:
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            _copy_in(conn, table, rows)
        else:
            # sa.JSON columns serialise themselves; TEXT-typed JSON needs the text. SQLite and
            # MySQL keep no zone: times are stored as UTC wall time (read with naive = "utc").
            text_json = {col.name for col in table.columns if col.type is _DYNAMIC_JSON}
            conn.execute(
                table.insert(),
                [
                    {
                        k: json.dumps(v) if k in text_json and v is not None else _utc_wall(v)
                        for k, v in row.items()
                    }
                    for row in rows
                ],
            )
    return len(rows)


def _utc_wall(value: object) -> object:
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


def _copy_in(conn: sa.Connection, table: sa.Table, rows: Sequence[Mapping[str, object]]) -> None:
    from psycopg import sql as psql

    names = [col.name for col in table.columns]
    raw = conn.connection.driver_connection
    statement = psql.SQL("COPY {} ({}) FROM STDIN").format(
        psql.Identifier(table.name), psql.SQL(", ").join(map(psql.Identifier, names))
    )
    json_cols = _json_columns(table)
    with raw.cursor() as cursor, cursor.copy(statement) as copy:  # type: ignore[union-attr]
        for row in rows:
            copy.write_row(
                [
                    json.dumps(row.get(name))
                    if name in json_cols and row.get(name) is not None
                    else row.get(name)
                    for name in names
                ]
            )
