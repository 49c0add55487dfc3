"""The portable feature set on every engine here: the same values give the numbers pandas and
numpy give (JSON field text, epoch seconds, time buckets, continuous percentiles)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import numpy as np
import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from incidentkit.baselines import dialects
from incidentkit.sources import sql

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
    sa.Column("id", sa.Integer, primary_key=True),
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
        stamp = STAMP if conn.dialect.name == "postgresql" else STAMP.replace(tzinfo=None)
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


def test_percentiles_are_numpys_linear_ones(engine_url: str) -> None:
    engine = _read(engine_url)
    with sql.connect(engine, what="test") as conn:
        for group, expected in ((1, VALUES), (3, [7.5])):
            values = sa.select(values_table.c.x).where(values_table.c.g == group).subquery("v")
            [row] = conn.execute(dialects.percentiles(conn, values, "x", QUANTILES)).all()
            assert list(row) == pytest.approx([np.quantile(expected, q) for q in QUANTILES])
        none = sa.select(values_table.c.x).where(values_table.c.g == 2).subquery("v")
        assert list(conn.execute(dialects.percentiles(conn, none, "x", (0.5,))).one()) == [None]
    engine.dispose()


def test_json_text_reads_nested_keys_flags_and_absent_ones(engine_url: str) -> None:
    engine = _read(engine_url)
    doc = docs_table.c.doc
    with sql.connect(engine, what="test") as conn:
        fields = [
            dialects.json_text(conn, doc, keys)
            for keys in (
                ("author",),
                ("partial",),
                ("errorCode",),
                ("actions", "skipSummarization"),
                ("content", "parts"),
                ("missing", "key"),
            )
        ]
        rows = conn.execute(sa.select(*fields).order_by(docs_table.c.id)).all()
    engine.dispose()
    first, second = rows
    assert first[0] == "a" and first[1] in ("true", "1")
    assert json.loads(first[4]) == DOCS[0]["content"]["parts"]  # type: ignore[index]
    assert '"functionCall":' in first[4]  # the key test the queries use
    assert second[0] == "user" and second[2] is None and second[3] in ("false", "0")
    assert first[5] is None and second[5] is None


def test_epoch_seconds_and_buckets_to_the_microsecond(engine_url: str) -> None:
    engine = _read(engine_url)
    with sql.connect(engine, what="test") as conn:
        info = sql.inspect_table(conn, "docs")
        assert info is not None
        out = []
        for name in ("aware", "naive"):
            col = docs_table.c[name]
            seconds = dialects.epoch_seconds(conn, col, sql.time_storage(info, name))
            out.append(
                conn.execute(
                    sa.select(seconds, dialects.time_bucket(conn, seconds, 300)).limit(1)
                ).one()
            )
    engine.dispose()
    for seconds, bucket in out:
        assert float(seconds) == pytest.approx(STAMP.timestamp(), abs=1e-6)
        assert float(bucket) == STAMP.timestamp() // 300 * 300
