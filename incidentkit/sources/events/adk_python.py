"""ADK Python session stores: ``DatabaseSessionService`` schema v1 and ``SqliteSessionService``.

Both keep one row per event in ``events`` with the whole event as snake_case JSON in
``event_data``. The schema version comes from ``adk_internal_metadata``; a v0 store (pickled
``actions``) is refused with the migration command, never unpickled. The batch's ``meta``
carries ``ts_reason``: why the ``timestamp`` column could not be read, for the reject of an
event whose event_data has no timestamp either.
"""

from __future__ import annotations

import pandas as pd
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from incidentkit.errors import SchemaError
from incidentkit.manifest import Filters
from incidentkit.sources import sql
from incidentkit.sources.events.adk_events import PYTHON_DB_V1, PYTHON_SQLITE, Batch, Origin
from incidentkit.times import parse_utc

EVENTS_TABLE = "events"
METADATA_TABLE = "adk_internal_metadata"
SUPPORTED_VERSION = "1"
COLUMNS = ("id", "app_name", "user_id", "session_id", "invocation_id", "timestamp", "event_data")


def is_python_store(conn: Connection) -> bool:
    """Whether the database holds an ADK Python ``events`` table (any schema version)."""
    inspector = sa.inspect(conn)
    with sql.decoded(conn, what=f"ADK Python store, table {EVENTS_TABLE}"):
        if not inspector.has_table(EVENTS_TABLE):
            return False
        names = {col["name"] for col in inspector.get_columns(EVENTS_TABLE)}
    return "event_data" in names or "actions" in names


def read(conn: Connection, filters: Filters, *, what: str) -> Batch:
    """The filtered events of an ADK Python store, as a raw batch for the normaliser."""
    origin, storage = _detect(conn, what=what)
    info = sql.require_table(conn, EVENTS_TABLE, COLUMNS, what=what)
    table = info.clause
    c = {name: sql.column(table, name) for name in COLUMNS}
    conditions = sql.where(
        conn,
        filters,
        sql.Predicates(
            time="timestamp",
            app_name="app_name",
            session_id="session_id",
            invocation_id="invocation_id",
            time_storage=storage,
        ),
        info,
    )
    # Equal times keep SqliteSessionService's own read order (rowid); else the id decides.
    tie = sa.literal_column("rowid") if origin is PYTHON_SQLITE else c["id"]
    statement = (
        sa.select(
            c["id"].label("event_id"),
            *(c[name] for name in COLUMNS[1:5]),
            c["timestamp"].label("ts"),
            c["event_data"],
        )
        .select_from(table)
        .where(*conditions)
        .order_by(c["app_name"], c["user_id"], c["session_id"], c["timestamp"], tie)
    )
    frame = sql.read_frame(conn, statement, what=what)
    if frame.empty:
        sql.require_rows(conn, info, what=what)
    frame = frame.reindex(columns=["event_id", *COLUMNS[1:5], "ts", "event_data"])
    times, why = (
        parse_utc(frame["ts"], unit="s")
        if storage == "epoch_s"
        else parse_utc(frame["ts"], naive="utc")
    )
    where = EVENTS_TABLE + ":" + frame["session_id"].astype(str) + "/"
    meta = frame[["event_id", "app_name", "user_id", "session_id", "invocation_id"]].assign(
        location=where + frame["event_id"].astype(str), ts=times, ts_reason=_ts_reasons(frame, why)
    )
    return Batch(values=frame["event_data"], meta=meta, origin=origin)


def _ts_reasons(frame: pd.DataFrame, why: pd.Series) -> pd.Series:
    """Why the ``timestamp`` column holds no time, for rows whose event_data lacks one too.

    The normaliser falls back to the column only when the event carries no timestamp; this
    is the reject reason then (null where the column was read).
    """
    bad = why.notna()
    reasons = pd.Series(None, index=frame.index, dtype=object)
    reasons[bad] = [
        f"timestamp is missing from event_data and the {EVENTS_TABLE}.timestamp column is "
        f"unreadable ({reason}: {value!r})"
        for reason, value in zip(why[bad], frame["ts"][bad], strict=True)
    ]
    return reasons


def _detect(conn: Connection, *, what: str) -> tuple[Origin, sql.TimeStorage]:
    """Which store this is and how its ``timestamp`` column keeps time; refuse other versions."""
    inspector = sa.inspect(conn)
    with sql.decoded(conn, what=what):
        if not inspector.has_table(EVENTS_TABLE):
            raise SchemaError(
                f"{what}: no ADK Python events table",
                value=EVENTS_TABLE,
                fix="point the manifest at the database of DatabaseSessionService or "
                "SqliteSessionService (adk web keeps it in <agent>/.adk/session.db)",
            )
        types = {col["name"]: col["type"] for col in inspector.get_columns(EVENTS_TABLE)}
        has_metadata = inspector.has_table(METADATA_TABLE)
    if has_metadata:
        version = _schema_version(conn, what=what)
    elif "actions" in types and "event_data" not in types:
        version = "0"
    else:
        version = SUPPORTED_VERSION
    if version == "0":
        raise SchemaError(
            f"{what}: the ADK Python session store uses schema version 0 (pickled actions), "
            "which incidentkit does not read",
            value=version,
            fix="migrate it to schema v1 with ADK >= 1.22.1: adk migrate session "
            "--source_db_url=<this database> --dest_db_url=<a new database>, then point the "
            "manifest at the new one (incidentkit never unpickles stored data)",
        )
    if version != SUPPORTED_VERSION:
        raise SchemaError(
            f"{what}: unknown ADK Python session schema version",
            value=version,
            fix=f"incidentkit reads schema version {SUPPORTED_VERSION}; upgrade incidentkit, or "
            "export the events with ADK as session JSON (adk-session-json)",
        )
    stamp = types.get("timestamp")
    if isinstance(stamp, sa.DateTime):
        return PYTHON_DB_V1, "aware" if stamp.timezone else "naive"
    if isinstance(stamp, sa.Float | sa.Numeric | sa.Integer):
        return PYTHON_SQLITE, "epoch_s"
    return PYTHON_DB_V1, "naive"


def _schema_version(conn: Connection, *, what: str) -> str:
    info = sql.require_table(conn, METADATA_TABLE, ("key", "value"), what=what)
    table = info.clause
    statement = sa.select(sql.column(table, "value")).where(
        sql.column(table, "key") == sa.bindparam("key", "schema_version")
    )
    row = conn.execute(statement).first()
    if row is None:
        raise SchemaError(
            f"{what}: {METADATA_TABLE} has no schema_version row",
            value=METADATA_TABLE,
            fix="check that this is an ADK DatabaseSessionService database",
        )
    return str(row[0])
