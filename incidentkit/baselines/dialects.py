"""The portable SQL feature set the baseline queries use: one dialect-specific function each.

Everything else in :mod:`.queries` is plain SQLAlchemy Core that every engine speaks
(``CASE``, ``COALESCE``, ``LIKE``, ``LOWER``, ``GROUP BY``, ``MIN``/``MAX``/``SUM``/``COUNT``,
sub-queries). Five features differ between engines; each is one function here, keyed on the
SQLAlchemy dialect's name, and ``docs/baselines.md`` has the table of every spelling:

- JSON field as text (:func:`json_text`): ``->>``, ``json_extract``, ``JSON_UNQUOTE``,
  ``json_extract_string`` (DuckDB), ``JSON_VALUE``/``JSON_QUERY`` (BigQuery), ``JSONType`` +
  ``JSONExtractString``/``JSONExtractRaw`` (ClickHouse);
- a part with a key (:func:`has_item_key`): ``@>``, ``JSON_CONTAINS_PATH``, ``arrayExists``
  (ClickHouse), else ``LIKE`` on the parts' text;
- epoch seconds (:func:`epoch_seconds`): ``EXTRACT(EPOCH)``, ``strftime``, ``UNIX_TIMESTAMP``,
  ``epoch_us`` (DuckDB), ``UNIX_MICROS`` (BigQuery), ``toUnixTimestamp64Micro`` (ClickHouse);
- time bucket (:func:`time_bucket`): ``floor(e / s) * s``, an integer cast on SQLite;
- continuous percentile (:func:`percentiles`): ``percentile_cont WITHIN GROUP``, ``PERCENTILE_CONT
  OVER ()`` (MariaDB, BigQuery), window functions (SQLite, MySQL), ``quantile_cont`` (DuckDB),
  ``quantileExactInclusiveOrNull`` (ClickHouse).

Percentiles are continuous (linear interpolation), as pandas' and numpy's default, so every
engine gives the numbers the pandas path gives. A dialect with no spelling is refused, named.
The functions take anything with a ``dialect`` (a connection, an engine), so an expression can
be compiled for a warehouse that is not reachable from here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.sql.visitors import InternalTraversal

from incidentkit.errors import SourceError
from incidentkit.sources.sql import TimeStorage

ENGINES = ("postgresql", "sqlite", "mysql", "duckdb", "bigquery", "clickhousedb")
"""The SQLAlchemy dialect names with a spelling of every feature (MariaDB reports ``mysql``;
``duckdb`` is ``duckdb_engine``, ``bigquery`` ``sqlalchemy-bigquery``, ``clickhousedb``
clickhouse-connect's own dialect)."""
NAMES = {
    "postgresql": "PostgreSQL",
    "sqlite": "SQLite",
    "mysql": "MySQL",
    "duckdb": "DuckDB",
    "bigquery": "BigQuery",
    "clickhousedb": "ClickHouse",
}
"""How findings name each engine."""


class Bound(Protocol):
    """What the features need of a connection: its dialect (an engine has one too)."""

    @property
    def dialect(self) -> Dialect: ...


def check_engine(conn: Bound, *, what: str) -> str:
    """The dialect name of ``conn``, refused when the feature set has no spelling for it."""
    name = conn.dialect.name
    if name not in ENGINES:
        raise SourceError(
            f"{what}: no baseline queries for this database kind",
            value=name,
            fix="use PostgreSQL, MySQL/MariaDB, SQLite, DuckDB, BigQuery or ClickHouse, or "
            "leave baseline empty",
        )
    return name


def _engine(conn: Bound) -> str:
    return check_engine(conn, what="baseline query")


WORK_MEM = "256MB"
"""PostgreSQL ``work_mem`` of a baseline's transaction: a week's invocations fit one hash
aggregate in memory (the server's default 4MB spills to disk and doubles the time)."""


def prepare(conn: sa.Connection) -> None:
    """Session settings of a baseline's read-only transaction (``SET LOCAL``: gone at its
    rollback; nothing is written)."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SET LOCAL work_mem = '{WORK_MEM}'")


def is_mariadb(conn: Bound) -> bool:
    """MariaDB (which has ``PERCENTILE_CONT``) rather than MySQL (which has none)."""
    return conn.dialect.name == "mysql" and bool(getattr(conn.dialect, "is_mariadb", False))


def json_path(keys: Sequence[str]) -> str:
    """``$.a.b`` for keys ``("a", "b")`` (the keys the kit asks for are plain identifiers)."""
    return "$." + ".".join(keys)


_IDENTIFIER_PATH = re.compile(r"\$(\.[A-Za-z_][A-Za-z0-9_]*)+")


def _checked_path(path: str) -> str:
    """``path``, which is written into SQL text: only a path of plain identifiers."""
    if not _IDENTIFIER_PATH.fullmatch(path):
        raise ValueError(f"not a JSON path of identifiers: {path!r}")
    return path


def json_text(conn: Bound, doc: ColumnElement[Any], keys: Sequence[str]) -> ColumnElement[str]:
    """The value at ``keys`` inside the JSON document ``doc`` as text; NULL when absent or
    null.

    Objects and arrays come back as JSON text (compact, ``"key":``, where the part test reads
    it: SQLite, DuckDB, BigQuery), ``true`` as ``'true'`` (``'1'`` on SQLite).
    """
    name = _engine(conn)
    path = json_path(keys)
    if name == "postgresql":
        return _pg_json(doc, keys)
    if name == "sqlite":
        return sa.cast(sa.func.json_extract(doc, path), sa.Text)
    if name == "duckdb":
        return sa.func.json_extract_string(doc, path, type_=sa.Text)
    if name == "bigquery":
        # JSON_VALUE gives scalars (NULL for objects, arrays and null), JSON_QUERY the rest.
        # The path is a literal, as the plugin's own views write it (the kit's identifiers).
        literal: ColumnElement[str] = sa.literal_column(f"'{_checked_path(path)}'")
        whole = sa.func.nullif(sa.func.json_query(doc, literal), "null")
        return sa.func.coalesce(sa.func.json_value(doc, literal), whole, type_=sa.Text)
    if name == "clickhousedb":
        kind = sa.func.JSONType(doc, *keys)  # 'Null' for an absent key too
        return sa.case(
            (kind == "String", sa.func.JSONExtractString(doc, *keys)),
            (kind == "Null", sa.null()),
            else_=sa.func.JSONExtractRaw(doc, *keys),  # compact: [{"functionCall":{...}}]
        )
    # MySQL/MariaDB unquote a JSON null to the text 'null': read it as NULL.
    return sa.func.nullif(sa.func.json_unquote(sa.func.json_extract(doc, path)), "null")


def has_item_key(
    conn: Bound, doc: ColumnElement[Any], keys: Sequence[str], item_key: str
) -> ColumnElement[bool]:
    """Whether the JSON array at ``keys`` in ``doc`` holds an object with the key
    ``item_key`` whose value is an object (a part's ``functionCall``); false when absent.

    PostgreSQL tests containment (``@>``), MySQL/MariaDB ``JSON_CONTAINS_PATH`` with a
    wildcard, ClickHouse each item's ``JSONType``; SQLite, DuckDB and BigQuery look for the key
    in the array's compact text (``"functionCall":``), which only a key can match (a quote
    inside a JSON string is escaped).
    """
    name = _engine(conn)
    if name == "postgresql":
        array: ColumnElement[Any] = sa.cast(doc, JSONB)
        for key in keys:
            array = array.op("->")(sa.cast(sa.literal(key), sa.Text))
        probe = sa.cast(sa.literal(f'[{{"{item_key}": {{}}}}]'), JSONB)
        return sa.func.coalesce(array.op("@>", return_type=sa.Boolean)(probe), sa.false())
    if name == "mysql":
        path = json_path(keys) + f"[*].{item_key}"
        return sa.func.coalesce(sa.func.json_contains_path(doc, "one", path), 0) == 1
    if name == "clickhousedb":
        test = Lambda("item", sa.func.JSONType(sa.column("item"), item_key) == "Object")
        return sa.func.arrayExists(test, sa.func.JSONExtractArrayRaw(doc, *keys)) == 1
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
    conn: Bound, ts: ColumnElement[Any], storage: TimeStorage
) -> ColumnElement[float]:
    """Seconds since 1970 (UTC) of the time column ``ts``, to the microsecond.

    Naive columns hold UTC wall time (ADK writes them so; MySQL sessions of the kit run in
    UTC; BigQuery's ``DATETIME``); SQLite text is SQLAlchemy's ``YYYY-MM-DD HH:MM:SS.ffffff``.
    The engines that count microseconds in an integer (DuckDB, BigQuery, ClickHouse) divide
    it once, exactly rounded.
    """
    name = _engine(conn)
    if storage == "epoch_s":
        return sa.cast(ts, sa.Double)
    million = sa.literal(1e6, sa.Double)
    if name == "postgresql":
        return sa.type_coerce(sa.extract("epoch", ts), sa.Double)  # numeric: exact
    if name == "sqlite":
        whole = sa.cast(sa.func.strftime("%s", ts), sa.Double)
        fraction = sa.func.coalesce(sa.cast(sa.func.substr(ts, 20), sa.Double), 0.0)
        return whole + fraction
    if name == "duckdb":  # TIMESTAMP (naive, UTC) and TIMESTAMPTZ alike
        micros: ColumnElement[Any] | None = sa.func.epoch_us(ts)
    elif name == "bigquery":  # a DATETIME is UTC wall time
        micros = sa.func.unix_micros(sa.func.timestamp(ts) if storage == "naive" else ts)
    elif name == "clickhousedb":  # DateTime and DateTime64 are instants
        micros = sa.func.toUnixTimestamp64Micro(sa.func.toDateTime64(ts, 6))
    else:
        micros = None
    if micros is not None:
        return sa.type_coerce(sa.cast(micros, sa.Double) / million, sa.Double)
    # DECIMAL(.., 6) for DATETIME(6): exact to the microsecond (never CAST AS FLOAT: 4 bytes).
    return sa.type_coerce(sa.func.unix_timestamp(ts), sa.Double)


def time_bucket(conn: Bound, seconds: ColumnElement[float], size: float) -> ColumnElement[Any]:
    """The start (epoch seconds) of the ``size``-second bucket holding ``seconds`` (>= 0)."""
    step = sa.literal(float(size))
    if _engine(conn) == "sqlite":  # no floor() without the math extension; epochs are >= 0
        return sa.cast(seconds / step, sa.Integer) * step
    return sa.func.floor(seconds / step) * step


def percentiles(
    conn: Bound, values: sa.Subquery, column: str, quantiles: Sequence[float]
) -> sa.Select[Any]:
    """One row: the continuous percentiles ``quantiles`` of ``values.c[column]`` (NULLs left
    out), labelled ``q0``, ``q1``, ...; all NULL when there is no value."""
    x = values.c[column]
    name = _engine(conn)
    labels = [f"q{i}" for i in range(len(quantiles))]
    out: sa.Select[Any]
    if name == "postgresql":
        out = sa.select(
            *(
                sa.func.percentile_cont(q).within_group(x).label(label)
                for q, label in zip(quantiles, labels, strict=True)
            )
        ).where(x.is_not(None))
        return out
    if name == "duckdb":
        out = sa.select(
            *(
                sa.func.quantile_cont(x, float(q)).label(label)
                for q, label in zip(quantiles, labels, strict=True)
            )
        ).where(x.is_not(None))
        return out
    if name == "clickhousedb":  # the inclusive exact quantile is numpy's linear one
        exact: list[ColumnElement[Any]] = [
            Parametric("quantileExactInclusiveOrNull", float(q), x).label(label)
            for q, label in zip(quantiles, labels, strict=True)
        ]
        out = sa.select(*exact).where(x.is_not(None))
        return out
    if is_mariadb(conn) or name == "bigquery":
        window = sa.select(
            *(
                (  # BigQuery's percentile is a literal, not a query parameter
                    sa.func.percentile_cont(x, sa.literal(float(q), literal_execute=True)).over()
                    if name == "bigquery"
                    else sa.func.percentile_cont(q).within_group(x).over()
                ).label(label)
                for q, label in zip(quantiles, labels, strict=True)
            )
        ).where(x.is_not(None))
        inner = window.subquery("pct")
        return sa.select(*(sa.func.max(inner.c[label]).label(label) for label in labels))
    return _window_percentiles(values, column, quantiles)


class Parametric(FunctionElement[float]):
    """A ClickHouse parametric aggregate, ``name(parameter)(argument)``: the parameter is a
    number the kit chose (a quantile), rendered as such; the argument is compiled."""

    inherit_cache = True
    type = sa.Double()
    _traverse_internals: list[tuple[str, InternalTraversal]] = [  # noqa: RUF012 (SQLAlchemy's own)
        *FunctionElement._traverse_internals,
        ("fname", InternalTraversal.dp_string),
        ("parameter", InternalTraversal.dp_plain_obj),
    ]

    def __init__(self, fname: str, parameter: float, argument: ColumnElement[Any]) -> None:
        self.fname = fname
        self.parameter = float(parameter)
        super().__init__(argument)


@compiles(Parametric)
def _parametric(element: Parametric, compiler: SQLCompiler, **kw: Any) -> str:
    arguments = compiler.process(element.clauses, **kw)
    return f"{element.fname}({element.parameter!r})({arguments})"


class Lambda(ColumnElement[Any]):
    """A ClickHouse lambda, ``name -> body``, for ``arrayExists`` and its kin."""

    __visit_name__ = "ik_lambda"
    inherit_cache = True
    _traverse_internals: list[tuple[str, InternalTraversal]] = [  # noqa: RUF012 (SQLAlchemy's own)
        ("name", InternalTraversal.dp_string),
        ("body", InternalTraversal.dp_clauseelement),
    ]

    def __init__(self, name: str, body: ColumnElement[Any]) -> None:
        self.name = name
        self.body = body


@compiles(Lambda)
def _lambda(element: Lambda, compiler: SQLCompiler, **kw: Any) -> str:
    return f"{element.name} -> {compiler.process(element.body, **kw)}"


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
