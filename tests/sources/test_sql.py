"""SQL guarantees of the ledger and journal loaders on real SQLite, PostgreSQL and MariaDB.

The same rows give the same frames from CSV, JSON lines and every database; filters travel as
bound parameters; schema problems and unreachable servers raise errors that say what to do;
and the kit's connections cannot write.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import sqlalchemy as sa

from incidentkit import store
from incidentkit.errors import ManifestError, SchemaError, SourceError
from incidentkit.frames import TS, conform, spec_of, to_utc
from incidentkit.manifest import Filters, SourceSpec, Window
from incidentkit.sources import journal, ledger, sql
from incidentkit.sources.base import Loaded

DATA = Path(__file__).resolve().parent.parent / "data"
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


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgresql", marks=pytest.mark.postgres),
        pytest.param("mysql", marks=pytest.mark.mysql),
    ]
)
def db_url(request: pytest.FixtureRequest) -> str:
    """An empty database of each kind."""
    if request.param == "sqlite":
        return f"sqlite:///{request.getfixturevalue('sqlite_path')}"
    url: str = request.getfixturevalue("pg_url" if request.param == "postgresql" else "mysql_url")
    return url


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
    real = sql.read_frame

    def recording(conn: sa.Connection, query: str, params: Mapping[str, Any], **kw: Any) -> Any:
        seen.append((query, dict(params)))
        return real(conn, query, params, **kw)

    monkeypatch.setattr(sql, "read_frame", recording)
    filters = Filters(window=WINDOW, app_name="support", session_ids=("s'4",))
    runs = ledger.load(db_spec("ledger", pg_url), filters).frames["runs"]
    assert runs.empty  # run 4 of s'4 starts after the window
    [(query, params)] = seen
    assert "s'4" not in query and "support" not in query and "2026" not in query
    assert {"s'4", "support", WINDOW.start.to_pydatetime()} <= set(params.values())


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
            "column 2); attempts is not an integer: two; started_at: not an ISO 8601 timestamp",
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
        r'if they hold UTC, set naive_timestamps = "utc"',
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


def test_missing_sqlite_file_is_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "gone.sqlite"
    with pytest.raises(SourceError, match=r"cannot connect to the database"):
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
        with pytest.raises(sa.exc.DBAPIError, match=r"(?i)read.?only"):  # noqa: SIM117
            with sql.connect(engine, what="test") as conn:
                conn.execute(store.agent_run.insert(), [rows[1]])
    finally:
        engine.dispose()
    writer = sa.create_engine(db_url)
    with writer.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM agent_run")).scalar_one() == 1
    writer.dispose()
