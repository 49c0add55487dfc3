"""The portable feature set on every engine here: the same values give the numbers pandas and
numpy give (JSON field text, a part with a key, epoch seconds, time buckets, continuous
percentiles) on SQLite, PostgreSQL, MariaDB, DuckDB (``duckdb_engine``) and ClickHouse (the
``clickhousedb`` dialect's SQL run by chdb, ClickHouse in-process); BigQuery's SQL (its own
dialect) is compiled and read, as no BigQuery runs here."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Dialect
from sqlalchemy.engine.default import DefaultDialect

from incidentkit.baselines import dialects
from incidentkit.errors import SourceError
from incidentkit.manifest import Filters, Window
from incidentkit.sources import sql

pytestmark = pytest.mark.xdist_group("chdb")  # chDB runs one engine folder per process

VALUES = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.5, 3.25]
QUANTILES = (0.0, 0.5, 0.95, 0.99, 1.0)
DOCS = [
    {"author": "a", "partial": True, "content": {"parts": [{"functionCall": {"name": "t"}}]}},
    {"author": "user", "errorCode": None, "actions": {"skipSummarization": False}},
]
STAMP = datetime(2026, 11, 29, 3, 10, 7, 250001, tzinfo=UTC)

AWARE = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
NAIVE = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")

metadata = sa.MetaData()
values_table = sa.Table("vals", metadata, sa.Column("x", sa.Float), sa.Column("g", sa.Integer))
docs_table = sa.Table(
    "docs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("doc", sa.Text().with_variant(mysql.LONGTEXT(), "mysql")),
    sa.Column("aware", AWARE),
    sa.Column("naive", NAIVE),
)


def _fill(url: str) -> None:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        metadata.create_all(conn)
        conn.execute(values_table.insert(), [{"x": x, "g": 1} for x in VALUES])
        conn.execute(values_table.insert(), [{"x": None, "g": 2}, {"x": 7.5, "g": 3}])
        zoned = conn.dialect.name in ("postgresql", "duckdb")  # timestamptz, TIMESTAMPTZ
        stamp = STAMP if zoned else STAMP.replace(tzinfo=None)
        conn.execute(
            docs_table.insert(),
            [
                {"id": i, "doc": json.dumps(d), "aware": stamp, "naive": STAMP.replace(tzinfo=None)}
                for i, d in enumerate(DOCS, start=1)
            ],
        )
    engine.dispose()


@pytest.fixture
def engine_url(db_url: str) -> str:
    _fill(db_url)
    return db_url


def _read(url: str) -> sa.Engine:
    return sql.open_engine(url, what="test")


StorageOf = Callable[[sa.Connection, str], sql.TimeStorage]
KEYS = (
    ("author",),
    ("partial",),
    ("errorCode",),
    ("actions", "skipSummarization"),
    ("content", "parts"),
    ("missing", "key"),
)


def _inspected(conn: sa.Connection, name: str) -> sql.TimeStorage:
    return sql.time_storage(sql.inspect_table(conn, "docs"), name)


def check_percentiles(engine: sa.Engine) -> None:
    with sql.connect(engine, what="test") as conn:
        for group, expected in ((1, VALUES), (3, [7.5])):
            values = sa.select(values_table.c.x).where(values_table.c.g == group).subquery("v")
            [row] = conn.execute(dialects.percentiles(conn, values, "x", QUANTILES)).all()
            assert list(row) == pytest.approx([np.quantile(expected, q) for q in QUANTILES])
        none = sa.select(values_table.c.x).where(values_table.c.g == 2).subquery("v")
        assert list(conn.execute(dialects.percentiles(conn, none, "x", (0.5,))).one()) == [None]
    engine.dispose()


def _json_select(conn: dialects.Bound, doc: sa.ColumnElement[Any]) -> sa.Select[Any]:
    """:data:`KEYS`' texts, then whether the parts hold a ``functionCall``, a
    ``functionResponse``, for each of :data:`DOCS`."""
    parts = ("content", "parts")
    columns: list[sa.ColumnElement[Any]] = [
        *(dialects.json_text(conn, doc, keys) for keys in KEYS),
        dialects.has_item_key(conn, doc, parts, "functionCall"),
        dialects.has_item_key(conn, doc, parts, "functionResponse"),
    ]
    return sa.select(*columns).order_by(docs_table.c.id)


def check_json(rows: list[Any]) -> None:
    """The rows of :func:`_json_select`."""
    first, second = rows
    assert first[0] == "a" and first[1] in ("true", "1")
    assert json.loads(first[4]) == DOCS[0]["content"]["parts"]  # type: ignore[index]
    assert '"functionCall":' in first[4]  # the key test the text-searching engines use
    assert second[0] == "user" and second[2] is None and second[3] in ("false", "0")
    assert first[5] is None and second[5] is None
    flags = [bool(first[6]), bool(first[7]), bool(second[6]), bool(second[7])]
    assert flags == [True, False, False, False]


def check_json_text(engine: sa.Engine) -> None:
    with sql.connect(engine, what="test") as conn:
        rows = conn.execute(_json_select(conn, docs_table.c.doc)).all()
    engine.dispose()
    check_json(list(rows))


def check_epoch(engine: sa.Engine, storage_of: StorageOf) -> None:
    with sql.connect(engine, what="test") as conn:
        out = []
        for name in ("aware", "naive"):
            col = docs_table.c[name]
            seconds = dialects.epoch_seconds(conn, col, storage_of(conn, name))
            out.append(
                conn.execute(
                    sa.select(seconds, dialects.time_bucket(conn, seconds, 300)).limit(1)
                ).one()
            )
    engine.dispose()
    for seconds, bucket in out:
        assert float(seconds) == pytest.approx(STAMP.timestamp(), abs=1e-6)
        assert float(bucket) == STAMP.timestamp() // 300 * 300


def test_percentiles_are_numpys_linear_ones(engine_url: str) -> None:
    check_percentiles(_read(engine_url))


def test_json_text_reads_nested_keys_flags_and_absent_ones(engine_url: str) -> None:
    check_json_text(_read(engine_url))


def test_epoch_seconds_and_buckets_to_the_microsecond(engine_url: str) -> None:
    check_epoch(_read(engine_url), _inspected)


# DuckDB, through duckdb_engine (the engine of the files' baselines).


@pytest.fixture
def duckdb_engine(tmp_path: Path) -> sa.Engine:
    """A DuckDB file holding the tables, opened read-only through SQLAlchemy."""
    url = f"duckdb:///{tmp_path / 'features.duckdb'}"
    _fill(url)
    return sa.create_engine(url, poolclass=sa.pool.NullPool, connect_args={"read_only": True})


def _declared(_conn: sa.Connection, name: str) -> sql.TimeStorage:
    """The columns' storage as declared (duckdb_engine 0.17 cannot reflect columns under
    SQLAlchemy 2.1: its query names ``pg_catalog.pg_collation``, which DuckDB lacks)."""
    return "naive" if name == "naive" else "aware"


def test_duckdb_percentiles_are_numpys(duckdb_engine: sa.Engine) -> None:
    check_percentiles(duckdb_engine)


def test_duckdb_json_text_and_part_keys(duckdb_engine: sa.Engine) -> None:
    check_json_text(duckdb_engine)


def test_duckdb_epoch_seconds_and_buckets(duckdb_engine: sa.Engine) -> None:
    check_epoch(duckdb_engine, _declared)


# ClickHouse: the clickhousedb dialect's SQL text, run by chdb (ClickHouse in-process).


@dataclass(frozen=True)
class Compiling:
    """What the features read of a connection (its dialect), for an engine not reachable."""

    dialect: Dialect

    def sql(self, statement: sa.Select[Any]) -> str:
        return str(statement.compile(dialect=self.dialect, compile_kwargs={"literal_binds": True}))


Run = Callable[[str], list[list[Any]]]


@dataclass(frozen=True)
class ClickHouseStore:
    """The module's chDB folder holding :data:`VALUES`, :data:`DOCS` and :data:`STAMP` in
    tables shaped as the tests' (``aware`` a ``DateTime64(6, 'UTC')``, ``naive`` one without a
    zone: chDB's is UTC), and a function running ClickHouse SQL text on it."""

    url: str
    run: Callable[[str], list[list[Any]]]


@pytest.fixture(scope="module")
def clickhouse_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClickHouseStore]:
    import clickhouse_connect

    url = f"chdb://{tmp_path_factory.mktemp('chdb')}"
    client = clickhouse_connect.get_client(dsn=url)
    client.command("CREATE TABLE vals (x Nullable(Float64), g Int32) ENGINE = Memory")
    client.command(
        "CREATE TABLE docs (id Int32, doc String, aware DateTime64(6, 'UTC'), "
        "naive DateTime64(6)) ENGINE = MergeTree ORDER BY (aware, naive)"
    )
    values: list[list[Any]] = [[x, 1] for x in VALUES] + [[None, 2], [7.5, 3]]
    client.insert("vals", values, column_names=["x", "g"])
    docs = [[i, json.dumps(d), STAMP, STAMP] for i, d in enumerate(DOCS, start=1)]
    client.insert("docs", docs, column_names=["id", "doc", "aware", "naive"])

    def run(text: str) -> list[list[Any]]:
        return [list(row) for row in client.query(text).result_rows]

    yield ClickHouseStore(url, run)
    client.close()


@pytest.fixture(scope="module")
def clickhouse(clickhouse_store: ClickHouseStore) -> Run:
    """A function running ClickHouse SQL text on :func:`clickhouse_store`'s tables."""
    return clickhouse_store.run


def _clickhouse() -> Compiling:
    from clickhouse_connect.cc_sqlalchemy.dialect import ClickHouseDialect

    return Compiling(ClickHouseDialect())


def test_clickhouse_percentiles_are_numpys(clickhouse: Run) -> None:
    ch = _clickhouse()
    for group, expected in ((1, VALUES), (3, [7.5])):
        values = sa.select(values_table.c.x).where(values_table.c.g == group).subquery("v")
        [row] = clickhouse(ch.sql(dialects.percentiles(ch, values, "x", QUANTILES)))
        assert row == pytest.approx([np.quantile(expected, q) for q in QUANTILES])
    none = sa.select(values_table.c.x).where(values_table.c.g == 2).subquery("v")
    assert clickhouse(ch.sql(dialects.percentiles(ch, none, "x", (0.5,)))) == [[None]]


def test_clickhouse_json_text_and_part_keys(clickhouse: Run) -> None:
    ch = _clickhouse()
    check_json(clickhouse(ch.sql(_json_select(ch, docs_table.c.doc))))


def test_clickhouse_epoch_seconds_and_buckets(clickhouse: Run) -> None:
    ch = _clickhouse()
    seconds = dialects.epoch_seconds(ch, docs_table.c.aware, "aware")
    bucket = dialects.time_bucket(ch, seconds, 300)
    rows = clickhouse(ch.sql(sa.select(seconds, bucket).order_by(docs_table.c.id)))
    assert len(rows) == len(DOCS)
    for found, start in rows:
        assert found == pytest.approx(STAMP.timestamp(), abs=1e-6)
        assert start == STAMP.timestamp() // 300 * 300


def test_clickhouse_features_on_the_kits_own_engine(clickhouse_store: ClickHouseStore) -> None:
    """The same features through the kit's read-only ``chdb://`` engine (clickhouse-connect's
    DB-API and dialect, values bound as the card binds them), not compiled to text."""
    check_percentiles(_read(clickhouse_store.url))
    check_json_text(_read(clickhouse_store.url))
    check_epoch(_read(clickhouse_store.url), _inspected)


def test_clickhouse_window_bounds_keep_their_microseconds(
    clickhouse_store: ClickHouseStore,
) -> None:
    """A window on a ``DateTime64`` key column, with or without a zone: the bound keeps its
    microseconds (``STAMP`` is at ``.250001``), start included, end excluded."""
    engine = _read(clickhouse_store.url)
    us = pd.Timedelta(microseconds=1)
    stamp = pd.Timestamp(STAMP)
    with sql.connect(engine, what="test") as conn:
        info = sql.inspect_table(conn, "docs")
        assert info is not None
        for name in ("aware", "naive"):
            on = sql.Predicates(time=name)
            counts = []
            for start, end in (
                (stamp, stamp + us),
                (stamp + us, stamp + 2 * us),
                (stamp - us, stamp),
            ):
                filters = Filters(window=Window(start, end))
                conditions = sql.where(conn, filters, on, info)
                statement = sa.select(sa.func.count()).select_from(info.clause).where(*conditions)
                counts.append(conn.execute(statement).scalar())
            assert counts == [len(DOCS), 0, 0], name
    engine.dispose()


# BigQuery: compiled with sqlalchemy-bigquery's dialect and read (no BigQuery runs here).


def _bigquery() -> Compiling:
    from sqlalchemy_bigquery import BigQueryDialect

    sql.forget_bigquery_unnest()  # as the kit does when it opens BigQuery
    return Compiling(BigQueryDialect())


def test_bigquery_sql_of_each_feature() -> None:
    bq = _bigquery()
    doc, aware, naive = docs_table.c.doc, docs_table.c.aware, docs_table.c.naive
    text = bq.sql(sa.select(dialects.json_text(bq, doc, ("actions", "skipSummarization"))))
    assert (
        "coalesce(json_value(`docs`.`doc`, '$.actions.skipSummarization'), "
        "nullif(json_query(`docs`.`doc`, '$.actions.skipSummarization'), 'null'))"
    ) in text
    compiled = str(
        dialects.json_text(bq, doc, ("actions", "skipSummarization")).compile(dialect=bq.dialect)
    )
    assert "json_value(`docs`.`doc`, '$.actions.skipSummarization')" in compiled  # no parameter
    with pytest.raises(ValueError, match="not a JSON path"):
        dialects.json_text(bq, doc, ("actions", "x') OR TRUE --"))
    text = bq.sql(sa.select(dialects.has_item_key(bq, doc, ("content", "parts"), "functionCall")))
    assert "json_query(`docs`.`doc`, '$.content.parts')" in text
    assert """LIKE '%%"functionCall":%%'""" in text  # pyformat: the driver reads %% as %
    seconds = dialects.epoch_seconds(bq, aware, "aware")
    text = bq.sql(sa.select(seconds, dialects.time_bucket(bq, seconds, 300)))
    assert "CAST(unix_micros(`docs`.`aware`) AS FLOAT64) / CAST(1000000.0 AS FLOAT64)" in text
    assert text.startswith("SELECT CAST(unix_micros(") and "floor((CAST(unix_micros(" in text
    assert "/ CAST(300.0 AS FLOAT64)) * 300.0" in text
    text = bq.sql(sa.select(dialects.epoch_seconds(bq, naive, "naive")))
    assert "unix_micros(timestamp(`docs`.`naive`))" in text  # a DATETIME is UTC wall time
    values = sa.select(values_table.c.x).subquery("v")
    text = bq.sql(dialects.percentiles(bq, values, "x", (0.5, 0.99)))
    assert "percentile_cont(`v`.`x`, 0.99) OVER () AS `q1`" in text
    plain = str(dialects.percentiles(bq, values, "x", (0.5,)).compile(dialect=bq.dialect))
    assert (
        "percentile_cont(`v`.`x`, __[POSTCOMPILE_" in plain
    )  # a literal when run, not a parameter
    assert text.startswith("SELECT max(`pct`.`q0`) AS `q0`, max(`pct`.`q1`) AS `q1`")
    assert "WHERE `v`.`x` IS NOT NULL" in text


def test_bigquerys_bucket_is_the_portable_one_run_on_duckdb(duckdb_engine: sa.Engine) -> None:
    """The time bucket is the same Core expression on BigQuery and DuckDB (``floor``), and
    DuckDB computes it; the JSON, epoch and percentile spellings are BigQuery's own."""
    bq = _bigquery()
    seconds = sa.literal(STAMP.timestamp(), sa.Double)
    with sql.connect(duckdb_engine, what="test") as conn:
        on_duckdb = dialects.time_bucket(conn, seconds, 300)
        on_bigquery = dialects.time_bucket(bq, seconds, 300)
        assert str(on_duckdb.compile(dialect=bq.dialect)) == str(
            on_bigquery.compile(dialect=bq.dialect)
        )
        assert conn.execute(sa.select(on_bigquery)).scalar() == STAMP.timestamp() // 300 * 300
    duckdb_engine.dispose()


class Snowflake(DefaultDialect):
    """A dialect the feature set has no spelling for (its name is all the features read)."""

    name = "snowflake"


def test_a_dialect_with_no_spelling_is_refused_and_named() -> None:
    unknown = Compiling(Snowflake())
    values = sa.select(values_table.c.x).subquery("v")
    features: list[Callable[[], object]] = [
        lambda: dialects.json_text(unknown, docs_table.c.doc, ("author",)),
        lambda: dialects.has_item_key(unknown, docs_table.c.doc, ("content",), "functionCall"),
        lambda: dialects.epoch_seconds(unknown, docs_table.c.aware, "aware"),
        lambda: dialects.time_bucket(unknown, docs_table.c.aware, 60),
        lambda: dialects.percentiles(unknown, values, "x", [0.5]),
    ]
    for feature in features:
        with pytest.raises(SourceError, match="no baseline queries") as caught:
            feature()
        assert caught.value.value == "snowflake"
