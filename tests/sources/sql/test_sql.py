"""SQL guarantees of the ledger and journal loaders on real SQLite, PostgreSQL and MariaDB.

The same rows give the same frames from CSV, JSON lines and every database; filters travel as
bound parameters, window bounds in the form each column stores time (exact below a second);
schema problems and unreachable servers raise errors that say what to do; and the kit's
connections cannot write.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from incidentkit import store
from incidentkit.errors import ManifestError, SchemaError, SourceError
from incidentkit.frames import TS, conform, spec_of
from incidentkit.manifest import Filters, SourceSpec, Window
from incidentkit.sources import sql
from incidentkit.sources.loaded import Loaded
from incidentkit.sources.sql import journal, ledger
from incidentkit.times import to_utc

DATA = Path(__file__).resolve().parents[2] / "data"
WINDOW = Window.parse("2026-11-29T03:00:00Z", "2026-11-29T04:00:00Z")
Load = Callable[..., Loaded]
SECTIONS: Mapping[str, tuple[Load, sa.Table, str, list[str]]] = {
    "ledger": (ledger.load, store.agent_run, "runs", ["started_at", "run_id"]),
    "journal": (journal.load, store.tool_journal, "journal", ["key"]),
}
FILTERS = [
    Filters(),
    Filters(window=WINDOW),
    Filters(session_ids=("s'4",)),
    Filters(app_name="billing", invocation_ids=("e-101", "e-103", "e-106")),
    Filters(window=WINDOW, invocation_ids=("e-101", "e-105")),
]


def canonical_rows(section: str) -> list[dict[str, Any]]:
    """The rows of tests/data/<section>/expected.json, timestamps as UTC datetimes."""
    rows = json.loads((DATA / section / "expected.json").read_text(encoding="utf-8"))
    frame_name = SECTIONS[section][2]
    times = [col for col, dtype in spec_of(frame_name).columns if dtype == TS]
    return [
        {k: pd.Timestamp(v).to_pydatetime() if k in times and v else v for k, v in row.items()}
        for row in rows
    ]


def expected(section: str) -> pd.DataFrame:
    _, _, name, order = SECTIONS[section]
    frame = pd.DataFrame(canonical_rows(section))
    for col, dtype in spec_of(name).columns:
        if dtype == TS:
            frame[col] = to_utc(frame[col], what=col)
    return conform(name, frame.sort_values(order).reset_index(drop=True))


def write(url: str, table: sa.Table, rows: list[dict[str, Any]]) -> None:
    engine = sa.create_engine(url)
    try:
        if not sa.inspect(engine).has_table(table.name):
            store.create_tables(engine, store.kit_metadata)
        store.insert_rows(engine, table, rows)
    finally:
        engine.dispose()


def execute(url: str, *statements: str) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            for statement in statements:
                conn.execute(sa.text(statement))
    finally:
        engine.dispose()


def db_spec(section: str, url: str, **options: Any) -> SourceSpec:
    # SQLite and MySQL DATETIME columns hold no zone: the manifest must vouch for UTC.
    naive = "error" if url.startswith("postgresql") else "utc"
    return SourceSpec(section=section, url_ref=url, **{"naive_timestamps": naive, **options})


def rows_with_db_nulls(section: str) -> list[dict[str, Any]]:
    rows = canonical_rows(section)
    if section == "journal":  # function_call_id is NOT NULL DEFAULT '' in the DDL
        rows = [{**row, "function_call_id": row["function_call_id"] or ""} for row in rows]
    return rows


@pytest.mark.parametrize("section", ["ledger", "journal"])
def test_every_source_gives_the_same_frame(db_url: str, section: str) -> None:
    load, table, name, _ = SECTIONS[section]
    write(db_url, table, rows_with_db_nulls(section))
    csv_spec = SourceSpec(section, paths=(DATA / section / f"{name}.csv",))
    jsonl_spec = SourceSpec(section, paths=(DATA / section / f"{name}.jsonl",))
    full = load(db_spec(section, db_url), Filters())
    pd.testing.assert_frame_equal(full.frames[name], expected(section))
    for filters in FILTERS:
        from_db = load(db_spec(section, db_url), filters)
        assert from_db.rejects.empty
        for spec in (csv_spec, jsonl_spec):
            pd.testing.assert_frame_equal(from_db.frames[name], load(spec, filters).frames[name])


def test_filters_narrow_the_rows_exactly(db_url: str) -> None:
    write(db_url, store.agent_run, canonical_rows("ledger"))
    runs = ledger.load(db_spec("ledger", db_url), Filters(session_ids=("s'4",))).frames["runs"]
    assert runs["session_id"].tolist() == ["s'4"]  # not "S'4": exact, whatever the collation
    runs = ledger.load(db_spec("ledger", db_url), Filters(window=WINDOW)).frames["runs"]
    assert runs["run_id"].str[-1].tolist() == ["5", "1", "3", "6"]


def test_filters_are_bound_parameters(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    write(pg_url, store.agent_run, canonical_rows("ledger"))
    seen: list[tuple[str, Mapping[str, Any]]] = []
    real = sql.stream_frames

    def recording(conn: sa.Connection, statement: sa.Select[Any], **kw: Any) -> Any:
        compiled = statement.compile(dialect=conn.dialect)
        seen.append((compiled.string, dict(compiled.params)))
        return real(conn, statement, **kw)

    monkeypatch.setattr(sql, "stream_frames", recording)
    filters = Filters(window=WINDOW, app_name="support", session_ids=("s'4",))
    runs = ledger.load(db_spec("ledger", pg_url), filters).frames["runs"]
    assert runs.empty  # run 4 of s'4 starts after the window
    [(query, params)] = seen
    assert "s'4" not in query and "support" not in query and "2026" not in query
    assert params["sid"] == ["s'4"]  # one array parameter on PostgreSQL
    assert {"support", WINDOW.start.to_pydatetime()} <= {
        v for v in params.values() if not isinstance(v, list)
    }


def test_rejects_name_the_table_and_key(db_url: str) -> None:
    rows = canonical_rows("ledger")
    write(db_url, store.agent_run, [rows[0], {**rows[1], "status": "LOST"}])
    loaded = ledger.load(db_spec("ledger", db_url), Filters())
    assert loaded.frames["runs"]["run_id"].tolist() == [rows[0]["run_id"]]
    assert loaded.rejects[["location", "reason"]].values.tolist() == [
        [
            f"agent_run:{rows[1]['run_id']}",
            "status LOST is not one of RUNNING, PAUSED, DONE, FAILED, PARKED",
        ]
    ]


def test_sqlite_text_values_that_are_not_times_or_json_are_rejected(sqlite_path: Path) -> None:
    url = f"sqlite:///{sqlite_path}"
    write(url, store.agent_run, [])
    execute(
        url,
        "INSERT INTO agent_run VALUES ('r-1', 'a', 'u', 's', 'e', '{oops', 'DONE', NULL, NULL,"
        " 'two', 'yesterday', '2026-11-29T03:30:00+00:00')",
    )
    loaded = ledger.load(db_spec("ledger", url), Filters(window=WINDOW))
    assert loaded.rejects[["location", "reason"]].values.tolist() == [
        [
            "agent_run:r-1",
            "request: malformed JSON (Expecting property name enclosed in double quotes at "
            "column 2); attempts is not a 64-bit integer: two; "
            "started_at: not an ISO 8601 timestamp",
        ]
    ]


def copy_of(table: sa.Table, name: str, **renamed: str) -> sa.Table:
    """``table``'s columns under another table name, some renamed or (to None) left out."""
    columns = [
        sa.Column(renamed.get(col.name, col.name), col.type)
        for col in table.columns
        if renamed.get(col.name, col.name)
    ]
    return sa.Table(name, sa.MetaData(), *columns)


def create(url: str, table: sa.Table) -> None:
    engine = sa.create_engine(url)
    table.metadata.create_all(engine)
    engine.dispose()


def test_column_mapping_on_a_table(db_url: str) -> None:
    yours = "id app usr sess inv payload state worker lease tries created changed"
    names = dict(zip(spec_of("runs").names, yours.split(" "), strict=True))
    table = copy_of(store.agent_run, "runs_export", **names)
    create(db_url, table)
    write(db_url, table, [{names[k]: v for k, v in r.items()} for r in canonical_rows("ledger")])
    spec = db_spec("ledger", db_url, table="runs_export", columns=names)
    csv_spec = SourceSpec("ledger", paths=(DATA / "ledger" / "runs.csv",))
    pd.testing.assert_frame_equal(
        ledger.load(spec, Filters(window=WINDOW)).frames["runs"],
        ledger.load(csv_spec, Filters(window=WINDOW)).frames["runs"],
    )


def test_missing_table_is_a_schema_error(db_url: str) -> None:
    write(db_url, store.agent_run, [])
    with pytest.raises(SchemaError, match=r"table not found: 'ledger_v2'.*check the manifest"):
        ledger.load(db_spec("ledger", db_url, table="ledger_v2"), Filters())


def test_missing_column_is_a_schema_error_naming_it(db_url: str) -> None:
    # The seed's agent_run DDL has no started_at; the kit needs it (or a mapping).
    create(db_url, copy_of(store.agent_run, "agent_run", started_at=""))
    with pytest.raises(
        SchemaError, match=r"lacks columns: \['started_at'\].*columns = \{ canonical"
    ):
        ledger.load(db_spec("ledger", db_url), Filters())


def test_naive_timestamp_columns_need_the_manifest_to_say_utc(db_url: str) -> None:
    table = copy_of(store.agent_run, "agent_run")
    for col in table.columns:  # timestamp without time zone, on every database
        if isinstance(col.type, sa.DateTime):
            col.type = sa.DateTime()
    create(db_url, table)
    rows = [
        {k: v.replace(tzinfo=None) if hasattr(v, "tzinfo") else v for k, v in row.items()}
        for row in canonical_rows("ledger")
    ]
    write(db_url, table, rows)
    refused = db_spec("ledger", db_url, naive_timestamps="error")
    with pytest.raises(
        SchemaError,
        match=r"without a time zone: \['lease_until', 'started_at', 'updated_at'\]\. "
        r'set timezone = "UTC" \(or the zone they were written in',
    ):
        ledger.load(refused, Filters())
    accepted = db_spec("ledger", db_url, naive_timestamps="utc")
    pd.testing.assert_frame_equal(
        ledger.load(accepted, Filters()).frames["runs"], expected("ledger")
    )


@pytest.mark.parametrize(
    "url",
    [
        pytest.param("postgresql+psycopg://postgres@127.0.0.1:1/evidence", id="postgresql"),
        pytest.param("mysql+pymysql://root@127.0.0.1:1/evidence", id="mysql"),
    ],
)
def test_unreachable_database_says_what_to_check(url: str) -> None:
    with pytest.raises(
        SourceError, match=r"cannot connect to the database.*check that the server is up"
    ):
        ledger.load(SourceSpec("ledger", url_ref=url), Filters())


def undecodable_schema(path: Path, table: str) -> None:
    """Damage the schema of ``table`` in the SQLite file ``path``: a byte that is not UTF-8 in
    its CREATE statement (SQLite then names the statement in the error of every query)."""
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA writable_schema = ON")
        db.execute(
            "UPDATE sqlite_master SET sql = 'CRE' || CAST(X'FF' AS TEXT) || substr(sql, 5) "
            "WHERE name = ?",
            (table,),
        )
    db.close()


def test_a_schema_that_is_not_utf8_is_a_schema_error_naming_file_and_text(
    sqlite_path: Path,
) -> None:
    write(f"sqlite:///{sqlite_path}", store.agent_run, canonical_rows("ledger"))
    undecodable_schema(sqlite_path, "agent_run")
    spec = SourceSpec("ledger", sqlite_path=sqlite_path, paths=(sqlite_path,))
    with pytest.raises(SchemaError, match="not UTF-8") as info:
        ledger.load(spec, Filters())
    assert str(sqlite_path) in str(info.value) and "CRE\\xffTE" in str(info.value)
    engine = sql.open_sqlite(sqlite_path, what="test")
    try:
        with (  # inspect_table itself, outside sql.connect's guard
            engine.connect() as conn,
            pytest.raises(SchemaError, match=r"reading table agent_run: .* not UTF-8"),
        ):
            sql.inspect_table(conn, "agent_run")
        with (  # any other statement: connect's guard
            pytest.raises(SchemaError, match=r"test: .* not UTF-8.*CRE\\xffTE"),
            sql.connect(engine, what="test") as conn,
        ):
            conn.exec_driver_sql("SELECT count(*) FROM agent_run").scalar()
    finally:
        engine.dispose()


def test_missing_sqlite_file_is_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "gone.sqlite"
    with pytest.raises(SourceError, match=r"SQLite file not found"):
        journal.load(SourceSpec("journal", url_ref=f"sqlite:///{missing}"), Filters())
    assert not missing.exists()


def test_env_url_resolves_only_from_the_environment(pg_url: str) -> None:
    spec = SourceSpec("ledger", url_ref="env:IK_TEST_LEDGER_URL")
    with pytest.raises(
        ManifestError, match=r"not set: 'env:IK_TEST_LEDGER_URL'\. export IK_TEST_LEDGER_URL="
    ):
        ledger.load(spec, Filters(), environ={})
    write(pg_url, store.agent_run, canonical_rows("ledger"))
    loaded = ledger.load(spec, Filters(), environ={"IK_TEST_LEDGER_URL": pg_url})
    pd.testing.assert_frame_equal(loaded.frames["runs"], expected("ledger"))


def test_the_kits_connection_cannot_write(db_url: str) -> None:
    rows = canonical_rows("ledger")
    write(db_url, store.agent_run, rows[:1])
    engine = sql.open_engine(db_url, what="test")
    try:
        with pytest.raises(SourceError, match=r"(?i)refused a statement.*read.?only"):  # noqa: SIM117
            with sql.connect(engine, what="test") as conn:
                conn.execute(store.agent_run.insert(), [rows[1]])
    finally:
        engine.dispose()
    writer = sa.create_engine(db_url)
    with writer.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM agent_run")).scalar_one() == 1
    writer.dispose()


# -- window bounds at sub-second precision ----------------------------------------------------

BOUNDARY = Window.parse("2026-11-29T03:00:00.5Z", "2026-11-29T04:00:00.25Z")
TICKS = {
    "before": "2026-11-29T03:00:00.499999Z",
    "at-start": "2026-11-29T03:00:00.5Z",
    "after-start": "2026-11-29T03:00:00.500001Z",
    "before-end": "2026-11-29T04:00:00.249999Z",
    "at-end": "2026-11-29T04:00:00.25Z",
}
NAIVE_START = datetime(2026, 11, 29, 3, 0, 0, 500000)
START_UTC = NAIVE_START.replace(tzinfo=UTC)


def naive_utc(text: str) -> datetime:
    return pd.Timestamp(text).tz_convert("UTC").tz_localize(None).to_pydatetime()


def in_plus_two(text: str) -> datetime:
    """The instant in a +02:00 zone: the database must compare instants, not wall times."""
    return pd.Timestamp(text).tz_convert(timezone(timedelta(hours=2))).to_pydatetime()


def epoch_seconds(text: str) -> float:
    return pd.Timestamp(text).timestamp()


PG, MY = pytest.mark.postgres, pytest.mark.mysql
BOUNDARY_CASES = [
    # database, column type, value stored for an ISO text, storage named, bound window start
    pytest.param(
        "sqlite", sa.DateTime(), naive_utc, None, "2026-11-29 03:00:00.500000", id="sqlite-naive"
    ),
    pytest.param("sqlite", sa.Float(), epoch_seconds, "epoch_s", 1795921200.5, id="sqlite-epoch"),
    pytest.param(
        "postgresql", sa.DateTime(), naive_utc, None, NAIVE_START, marks=PG, id="pg-naive"
    ),
    pytest.param(
        "postgresql",
        sa.DateTime(timezone=True),
        in_plus_two,
        None,
        START_UTC,
        marks=PG,
        id="pg-aware",
    ),
    pytest.param(
        "mysql", mysql.DATETIME(fsp=6), naive_utc, None, NAIVE_START, marks=MY, id="mariadb"
    ),
]


@pytest.mark.parametrize(("kind", "column_type", "stored", "storage", "bound"), BOUNDARY_CASES)
def test_window_bounds_compare_exactly_below_a_second(
    kind: str,
    column_type: sa.types.TypeEngine[Any],
    stored: Callable[[str], Any],
    storage: sql.TimeStorage | None,
    bound: Any,
    request: pytest.FixtureRequest,
) -> None:
    url = (
        f"sqlite:///{request.getfixturevalue('sqlite_path')}"
        if kind == "sqlite"
        else request.getfixturevalue("pg_url" if kind == "postgresql" else "mysql_url")
    )
    ticks = sa.Table(
        "ticks",
        sa.MetaData(),
        sa.Column("id", sa.String(16), primary_key=True),
        sa.Column("at", column_type),
    )
    writer = sa.create_engine(url)
    with writer.begin() as conn:
        ticks.create(conn)
        conn.execute(ticks.insert(), [{"id": k, "at": stored(v)} for k, v in TICKS.items()])
    writer.dispose()
    engine = sql.open_engine(url, what="test")
    try:
        with sql.connect(engine, what="test") as conn:
            info = sql.require_table(conn, "ticks", ["id", "at"], what="test")
            conditions = sql.where(
                conn,
                Filters(window=BOUNDARY),
                sql.Predicates(time="at", time_storage=storage),
                info,
            )
            table = info.clause
            statement = sa.select(sql.column(table, "id")).where(*conditions).order_by("id")
            params = statement.compile(dialect=conn.dialect).params
            got = sql.read_frame(conn, statement, what="test")["id"].tolist()
    finally:
        engine.dispose()
    assert got == ["after-start", "at-start", "before-end"]
    # Bound as the column stores time: SQLite text, epoch seconds, naive or aware UTC.
    assert params["w_start"] == bound
    assert type(params["w_start"]) is type(bound)
    if isinstance(bound, datetime):
        assert params["w_start"].tzinfo == bound.tzinfo


def test_sqlite_times_in_other_iso_forms_are_placed_after_parsing(sqlite_path: Path) -> None:
    """Text SQLite cannot compare (``T``, offsets) passes SQL; pandas applies the window."""
    url = f"sqlite:///{sqlite_path}"
    write(url, store.agent_run, [])
    rows = [
        ("r-1", "2026-11-29T05:00:00.25+01:00", "2026-11-29T04:10:00Z"),  # starts at the end
        ("r-2", "2026-11-29T05:00:00.249999+01:00", "2026-11-29 04:10:00.000000"),
        ("r-3", "2026-11-29 02:00:00.000000", "2026-11-29T03:00:00.499999Z"),  # ended before
        ("r-4", "2026-11-29 02:00:00.000000", "2026-11-29 03:00:00.500000"),
        ("r-5", "2026-11-29 02:00:00.000000", "2026-11-29 03:00:00.499999"),
        ("r-6", "2026-11-29 02:00:00", "2026-11-29 03:00:00.5"),  # no microseconds: to pandas
    ]
    execute(
        url,
        *(
            "INSERT INTO agent_run VALUES "
            f"('{run}', 'a', 'u', 's', 'e', '{{}}', 'DONE', NULL, NULL, 0, '{start}', '{end}')"
            for run, start, end in rows
        ),
    )
    loaded = ledger.load(db_spec("ledger", url), Filters(window=BOUNDARY))
    assert loaded.rejects.empty
    assert loaded.frames["runs"]["run_id"].tolist() == ["r-4", "r-6", "r-2"]


# -- secrets and driver errors ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        pytest.param(
            "postgresql+psycopg://u@127.0.0.1:1/db?password=hunter22",
            "127.0.0.1:1/db?password=***",
            id="query-password",
        ),
        pytest.param(
            "postgresql+psycopg://u@127.0.0.1:1/db?sslmode=disable&sslpassword=hunter22",
            "&sslpassword=***",
            id="query-sslpassword",
        ),
        pytest.param(
            "postgresql+psycopg://u:hunter22@127.0.0.1:1/db", "u:***@127.0.0.1:1", id="userinfo"
        ),
    ],
)
def test_the_cannot_connect_error_masks_every_password(url: str, shown: str) -> None:
    with pytest.raises(SourceError, match=r"cannot connect to the database") as info:
        ledger.load(SourceSpec("ledger", url_ref=url), Filters())
    assert "hunter22" not in str(info.value)
    assert shown in str(info.value)


def test_unsupported_database_errors_mask_query_passwords() -> None:
    with pytest.raises(SourceError, match=r"no driver for this URL") as info:
        sql.open_engine("postgresql+nodriver://u@h/db?password=hunter22", what="test")
    assert "hunter22" not in str(info.value)
    assert "password=***" in str(info.value)


def test_first_line_of_a_driver_message_is_scrubbed() -> None:
    err = RuntimeError("cannot use postgresql://ops:hunter22@db/x?sslpassword=k3y22\nSQL: ...")
    assert sql.first_line(err) == "cannot use postgresql://ops:***@db/x?sslpassword=***"


@pytest.mark.postgres
def test_the_urls_own_options_are_kept_beside_the_read_only_ones(pg_url: str) -> None:
    # The URL tries to switch read-only off: the kit's settings come last and win.
    options = "-c search_path=evidence,public -c default_transaction_read_only=off"
    url = sa.make_url(pg_url).update_query_dict({"options": options})
    engine = sql.open_engine(url.render_as_string(hide_password=False), what="test")
    try:
        with sql.connect(engine, what="test") as conn:
            shown = {
                name: conn.execute(sa.text(f"SHOW {name}")).scalar_one()
                for name in ("search_path", "default_transaction_read_only", "TimeZone")
            }
    finally:
        engine.dispose()
    assert shown == {
        "search_path": "evidence,public",
        "default_transaction_read_only": "on",
        "TimeZone": "UTC",
    }


@pytest.mark.postgres
def test_a_failing_query_is_a_source_error_without_a_traceback_of_values(pg_url: str) -> None:
    execute(pg_url, "CREATE TABLE t (id integer)")
    engine = sql.open_engine(pg_url, what="test")
    try:
        with (
            sql.connect(engine, what="test") as conn,
            pytest.raises(
                SourceError,
                match=r"test: query failed: 'column \"nope\" does not exist'\. check the table",
            ) as info,
        ):
            statement = sa.select(sa.column("nope")).select_from(sa.table("t"))
            sql.read_frame(conn, statement.where(sa.column("id") == 7), what="test")
    finally:
        engine.dispose()
    assert "\n" not in str(info.value)
    assert type(info.value.__cause__).__module__.startswith("adbc")


@pytest.mark.postgres
def test_a_read_in_frames_gives_the_rows_of_one_read_in_order(pg_url: str) -> None:
    """Rows that span several Arrow batches (4 MiB each) come in frames of about ``rows``
    rows, together the same as one frame, NULLs and multi-line texts included."""
    execute(pg_url, "CREATE TABLE t (id integer, body text)")
    execute(
        pg_url,
        "INSERT INTO t SELECT i, CASE WHEN i % 97 = 0 THEN NULL WHEN i % 89 = 0 "
        "THEN E'two\\nlines' ELSE repeat('x', 300) END FROM generate_series(1, 40000) i",
    )
    engine = sql.open_engine(pg_url, what="test")
    try:
        with sql.connect(engine, what="test") as conn:
            statement = sa.select(sa.column("id"), sa.column("body")).select_from(sa.table("t"))
            statement = statement.order_by(sa.column("id"))
            whole = sql.read_frame(conn, statement, what="test")
            frames = list(sql.stream_frames(conn, statement, what="test", rows=15_000))
    finally:
        engine.dispose()
    assert len(frames) > 1
    assert all(len(frame) >= 15_000 for frame in frames[:-1])
    pd.testing.assert_frame_equal(pd.concat(frames, ignore_index=True), whole)
    assert whole["body"].isna().sum() == 40000 // 97
    assert (whole["body"] == "two\nlines").any()


def _rows_table(url: str, rows: int) -> None:
    execute(url, "CREATE TABLE t (id integer, body text)")
    execute(url, f"INSERT INTO t SELECT i, repeat('x', 300) FROM generate_series(1, {rows}) i")


@pytest.mark.postgres
def test_a_stream_left_early_ends_its_query_and_leaves_the_connection_usable(
    pg_url: str,
) -> None:
    """A caller that stops drawing frames closes the reading connection: the server runs no
    query of the kit after it, and the kit's own connection answers the next query."""
    _rows_table(pg_url, 200_000)
    engine = sql.open_engine(pg_url, what="test")
    try:
        with sql.connect(engine, what="test") as conn:
            statement = sa.select(sa.column("id"), sa.column("body")).select_from(sa.table("t"))
            frames = sql.stream_frames(conn, statement, what="test", rows=1_000)
            first = next(frames)
            frames.close()
            assert conn.execute(sa.text("SELECT count(*) FROM t")).scalar_one() == 200_000
            running = sa.text(
                "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                "AND datname = current_database() AND query LIKE '%body%'"
            )
            for _ in range(100):  # a closed connection's backend may take a moment to go
                conn.execute(sa.text("SELECT pg_stat_clear_snapshot()"))  # else one per transaction
                if not (left := conn.execute(running).scalar_one()):
                    break
                time.sleep(0.05)
    finally:
        engine.dispose()
    assert left == 0
    assert 1_000 <= len(first) < 200_000


@pytest.mark.postgres
def test_an_error_while_streaming_is_a_source_error_in_the_callers_thread(pg_url: str) -> None:
    """A row the server cannot produce (a division by zero on the 5,000th) fails the query
    on the server; the caller gets the kit's error, naming it."""
    _rows_table(pg_url, 10_000)
    engine = sql.open_engine(pg_url, what="test")
    try:
        with sql.connect(engine, what="test") as conn:
            ratio = (sa.literal(1) / (sa.column("id") - 5_000)).label("ratio")
            statement = sa.select(sa.column("id"), ratio).select_from(sa.table("t"))
            with pytest.raises(SourceError, match="division by zero") as info:
                list(sql.stream_frames(conn, statement.order_by("id"), what="test", rows=100))
    finally:
        engine.dispose()
    assert type(info.value.__cause__).__module__.startswith("adbc")


@pytest.mark.postgres
def test_a_row_larger_than_any_block_is_read_whole(pg_url: str) -> None:
    """Rows of megabytes (a large jsonb, a long text with newlines) straddle every block
    boundary Arrow would pick; they are parsed whole, between ordinary rows."""
    execute(pg_url, "CREATE TABLE t (id integer, body text)")
    big = "SELECT 2, repeat(E'line\\n', 1500000)"  # 7.5 MB, every value a new line
    execute(pg_url, f"INSERT INTO t SELECT 1, 'small' UNION ALL {big} UNION ALL SELECT 3, 'x'")
    engine = sql.open_engine(pg_url, what="test")
    try:
        with sql.connect(engine, what="test") as conn:
            statement = sa.select(sa.column("id"), sa.column("body")).select_from(sa.table("t"))
            frame = sql.read_frame(conn, statement.order_by("id"), what="test")
    finally:
        engine.dispose()
    assert frame["id"].tolist() == ["1", "2", "3"]
    assert frame["body"].str.len().tolist() == [5, 7_500_000, 1]
