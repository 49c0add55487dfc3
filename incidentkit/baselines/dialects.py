"""The portable SQL feature set the baseline queries use: one dialect-specific function each.

Everything else in :mod:`.queries` is plain SQLAlchemy Core that every engine speaks
(``CASE``, ``COALESCE``, ``LIKE``, ``LOWER``, ``GROUP BY``, ``MIN``/``MAX``/``SUM``/``COUNT``,
sub-queries). Five features differ between engines; each is one function here, and
``docs/baselines.md`` lists what each engine (and BigQuery, Trino, Spark SQL) calls:

=================  =====================================  ======================================
feature            function                               PostgreSQL / SQLite / MariaDB, MySQL
=================  =====================================  ======================================
JSON field text    :func:`json_text`                      ``->>`` / ``json_extract`` /
                                                          ``JSON_UNQUOTE(JSON_EXTRACT())``
epoch seconds      :func:`epoch_seconds`                  ``EXTRACT(EPOCH FROM)`` /
                                                          ``strftime('%s')`` + fraction /
                                                          ``UNIX_TIMESTAMP``
time bucket        :func:`time_bucket`                    ``floor(e / s) * s`` / integer cast /
                                                          ``FLOOR``
percentile         :func:`percentiles`                    ``percentile_cont WITHIN GROUP`` /
                                                          window functions / ``PERCENTILE_CONT
                                                          OVER ()`` (MariaDB), window functions
                                                          (MySQL)
=================  =====================================  ======================================

DuckDB (files, :mod:`.files`) uses ``json_extract_string``, ``LIKE`` on the parts' text,
``floor`` and ``quantile_cont`` (its times are the events' own epoch numbers). Percentiles
are continuous (linear interpolation), as pandas' and numpy's default, so every engine gives
the numbers the pandas path gives.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from incidentkit.errors import SourceError
from incidentkit.sources.sql import TimeStorage

ENGINES = ("postgresql", "sqlite", "mysql")
"""The SQLAlchemy dialect names the queries run on (MariaDB reports ``mysql``)."""


def check_engine(conn: Connection, *, what: str) -> str:
    """The dialect name of ``conn``, refused when the feature set has no spelling for it."""
    name = conn.dialect.name
    if name not in ENGINES:
        raise SourceError(
            f"{what}: no baseline queries for this database kind",
            value=name,
            fix="use PostgreSQL, MySQL/MariaDB or SQLite, or leave baseline empty",
        )
    return name


WORK_MEM = "256MB"
"""PostgreSQL ``work_mem`` of a baseline's transaction: a week's invocations fit one hash
aggregate in memory (the server's default 4MB spills to disk and doubles the time)."""


def prepare(conn: Connection) -> None:
    """Session settings of a baseline's read-only transaction (``SET LOCAL``: gone at its
    rollback; nothing is written)."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SET LOCAL work_mem = '{WORK_MEM}'")


def is_mariadb(conn: Connection) -> bool:
    """MariaDB (which has ``PERCENTILE_CONT``) rather than MySQL (which has none)."""
    return conn.dialect.name == "mysql" and bool(getattr(conn.dialect, "is_mariadb", False))


def json_path(keys: Sequence[str]) -> str:
    """``$.a.b`` for keys ``("a", "b")`` (the keys the kit asks for are plain identifiers)."""
    return "$." + ".".join(keys)


def json_text(conn: Connection, doc: ColumnElement[Any], keys: Sequence[str]) -> ColumnElement[str]:
    """The value at ``keys`` inside the JSON document ``doc`` as text; NULL when absent.

    Objects and arrays come back as JSON text, ``true`` as ``'true'`` (``'1'`` on SQLite).
    """
    name = conn.dialect.name
    if name == "postgresql":
        return _pg_json(doc, keys)
    if name == "sqlite":
        return sa.cast(sa.func.json_extract(doc, json_path(keys)), sa.Text)
    # MySQL/MariaDB unquote a JSON null to the text 'null': read it as NULL.
    return sa.func.nullif(sa.func.json_unquote(sa.func.json_extract(doc, json_path(keys))), "null")


def has_item_key(
    conn: Connection, doc: ColumnElement[Any], keys: Sequence[str], item_key: str
) -> ColumnElement[bool]:
    """Whether the JSON array at ``keys`` in ``doc`` holds an object with the key
    ``item_key`` whose value is an object (a part's ``functionCall``); false when absent.

    PostgreSQL tests containment (``@>``), MySQL/MariaDB ``JSON_CONTAINS_PATH`` with a
    wildcard; SQLite looks for the key in the array's text (``"functionCall":``), which only
    a key can match (a quote inside a JSON string is escaped).
    """
    name = conn.dialect.name
    if name == "postgresql":
        array: ColumnElement[Any] = sa.cast(doc, JSONB)
        for key in keys:
            array = array.op("->")(sa.cast(sa.literal(key), sa.Text))
        probe = sa.cast(sa.literal(f'[{{"{item_key}": {{}}}}]'), JSONB)
        return sa.func.coalesce(array.op("@>", return_type=sa.Boolean)(probe), sa.false())
    if name == "mysql":
        path = json_path(keys) + f"[*].{item_key}"
        return sa.func.coalesce(sa.func.json_contains_path(doc, "one", path), 0) == 1
    text = sa.func.coalesce(json_text(conn, doc, keys), "")
    return text.like(f'%"{item_key}":%')


def _pg_json(doc: ColumnElement[Any], keys: Sequence[str]) -> ColumnElement[str]:
    """PostgreSQL ``doc::jsonb -> 'a' ->> 'b'`` (a ``json`` or text column reads as jsonb)."""
    value: ColumnElement[Any] = sa.cast(doc, JSONB)
    for i, key in enumerate(keys):
        op = "->>" if i == len(keys) - 1 else "->"
        value = value.op(op)(sa.cast(sa.literal(key), sa.Text))
    return sa.type_coerce(value, sa.Text)


def epoch_seconds(
    conn: Connection, ts: ColumnElement[Any], storage: TimeStorage
) -> ColumnElement[float]:
    """Seconds since 1970 (UTC) of the time column ``ts``, to the microsecond.

    Naive columns hold UTC wall time (ADK writes them so; MySQL sessions of the kit run in
    UTC); SQLite text is SQLAlchemy's ``YYYY-MM-DD HH:MM:SS.ffffff``.
    """
    if storage == "epoch_s":
        return sa.cast(ts, sa.Double)
    name = conn.dialect.name
    if name == "postgresql":
        return sa.type_coerce(sa.extract("epoch", ts), sa.Double)  # numeric: exact
    if name == "sqlite":
        whole = sa.cast(sa.func.strftime("%s", ts), sa.Double)
        fraction = sa.func.coalesce(sa.cast(sa.func.substr(ts, 20), sa.Double), 0.0)
        return whole + fraction
    # DECIMAL(.., 6) for DATETIME(6): exact to the microsecond (never CAST AS FLOAT: 4 bytes).
    return sa.type_coerce(sa.func.unix_timestamp(ts), sa.Double)


def time_bucket(conn: Connection, seconds: ColumnElement[float], size: float) -> ColumnElement[Any]:
    """The start (epoch seconds) of the ``size``-second bucket holding ``seconds`` (>= 0)."""
    step = sa.literal(float(size))
    if conn.dialect.name == "sqlite":  # no floor() without the math extension; epochs are >= 0
        return sa.cast(seconds / step, sa.Integer) * step
    return sa.func.floor(seconds / step) * step


def percentiles(
    conn: Connection, values: sa.Subquery, column: str, quantiles: Sequence[float]
) -> sa.Select[Any]:
    """One row: the continuous percentiles ``quantiles`` of ``values.c[column]`` (NULLs left
    out), labelled ``q0``, ``q1``, ...; all NULL when there is no value."""
    x = values.c[column]
    name = conn.dialect.name
    if name == "postgresql":
        return sa.select(
            *(
                sa.func.percentile_cont(q).within_group(x).label(f"q{i}")
                for i, q in enumerate(quantiles)
            )
        ).where(x.is_not(None))
    if is_mariadb(conn):
        window = sa.select(
            *(
                sa.func.percentile_cont(q).within_group(x).over().label(f"q{i}")
                for i, q in enumerate(quantiles)
            )
        ).where(x.is_not(None))
        inner = window.subquery("pct")
        return sa.select(
            *(sa.func.max(inner.c[f"q{i}"]).label(f"q{i}") for i in range(len(quantiles)))
        )
    return _window_percentiles(values, column, quantiles)


def _window_percentiles(
    values: sa.Subquery, column: str, quantiles: Sequence[float]
) -> sa.Select[Any]:
    """Linear interpolation from window functions (SQLite, MySQL): the row at rank
    ``floor((n - 1) q)`` plus the fraction of the gap to the next value."""
    x = values.c[column]
    ranked = (
        sa.select(
            x.label("x"),
            (sa.func.row_number().over(order_by=x) - 1).label("rn"),
            sa.func.count().over().label("n"),
            sa.func.lead(x).over(order_by=x).label("nx"),
        )
        .where(x.is_not(None))
        .subquery("ranked")
    )
    r = ranked.c
    out = []
    for i, q in enumerate(quantiles):
        h = (r.n - 1) * sa.literal(float(q))
        here = sa.and_(r.rn <= h, r.rn + 1 > h)
        value = r.x + (h - r.rn) * (sa.func.coalesce(r.nx, r.x) - r.x)
        out.append(sa.func.max(sa.case((here, value))).label(f"q{i}"))
    return sa.select(*out)
