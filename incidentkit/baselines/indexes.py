"""The index a baseline query needs, and whether the table has one (``incidentkit inspect``).

A baseline reads one app over days: ``WHERE app_name = ? AND ts >= ? AND ts < ?``. Without an
index leading with ``(app_name, ts)`` (or with the time column alone) the database scans the
whole table, every event of every app. The check reads the table's indexes and primary key
through SQLAlchemy's inspector, on the kit's read-only connection, and writes the statement
to run; the kit never runs it (it never writes to evidence).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from incidentkit.baselines import queries
from incidentkit.manifest import SourceSpec
from incidentkit.sources import sql


@dataclass(frozen=True)
class IndexAdvice:
    """The index a section's baseline query needs: whether one serves, else what to run."""

    section: str
    table: str
    columns: tuple[str, str]
    """The table's own names of the app and time columns, in index order."""
    served_by: str | None
    """The index (or primary key) that serves the query; None when none does."""
    statement: str
    """``CREATE INDEX ...`` to run when none serves."""


def _serves(index_columns: list[str | None], app: str, time: str) -> bool:
    head = index_columns[:2]
    return head[:1] == [time] or head == [app, time]


def needed(conn: Connection, section: str, table: str, app: str, time: str) -> IndexAdvice:
    """Whether ``table`` has an index leading with ``(app, time)`` (or ``time``)."""
    schema, _, name = table.rpartition(".")
    inspector = sa.inspect(conn)
    found: list[tuple[str, list[str | None]]] = [
        (str(index.get("name") or "unnamed index"), list(index["column_names"]))
        for index in inspector.get_indexes(name, schema=schema or None)
    ]
    primary = inspector.get_pk_constraint(name, schema=schema or None)
    if primary.get("constrained_columns"):
        found.append(("the primary key", list(primary["constrained_columns"])))
    served = next((label for label, cols in found if _serves(cols, app, time)), None)
    quote = conn.dialect.identifier_preparer.quote
    target = ".".join(quote(part) for part in table.split("."))
    index_name = quote(f"{name}_{app}_{time}".replace(".", "_")[:60])
    statement = f"CREATE INDEX {index_name} ON {target} ({quote(app)}, {quote(time)})"
    return IndexAdvice(section, table, (app, time), served, statement)


def advice(spec: SourceSpec, environ: Mapping[str, str] | None = None) -> IndexAdvice | None:
    """The index advice for a database ``[events]`` or ``[ledger]`` section (None for
    files and other sections)."""
    if not spec.is_database or spec.section not in ("events", "ledger"):
        return None
    if spec.format == "adk-redis":  # a key-value store: no table to index
        return None
    what = f"{spec.section} {spec.location()}"
    engine = sql.open_source(spec, environ, what=what)
    try:
        with sql.connect(engine, what=what) as conn:
            if spec.section == "events":
                events = queries.event_table(conn, spec, what=what)
                app, time = events.names["app_name"], events.names["ts"]
                return needed(conn, "events", events.info.name, app, time)
            table = spec.table or queries.LEDGER_TABLE
            app = spec.columns.get("app_name", "app_name")
            time = spec.columns.get("started_at", "started_at")
            sql.require_table(conn, table, [app, time], what=what)
            return needed(conn, "ledger", table, app, time)
    finally:
        engine.dispose()
