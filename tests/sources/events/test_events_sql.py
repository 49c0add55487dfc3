"""The events loader on a table of ADK Java event JSON: SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import sqlalchemy as sa

from incidentkit import store
from incidentkit.errors import ManifestError, SchemaError, SourceError
from incidentkit.manifest import Filters, SourceSpec, Window, parse_manifest
from incidentkit.sources import events
from incidentkit.sources.loaded import Loaded

DATA = Path(__file__).resolve().parents[2] / "data" / "events"
FRAMES = ("events", "calls", "responses", "state_writes")
SESSION_KEYS = ("appName", "userId", "sessionId")


def java_lines() -> list[dict[str, Any]]:
    text = (DATA / "java_events.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def table_row(line: dict[str, Any]) -> dict[str, Any]:
    """One ``adk_event`` row for a JSON line: the session keys move to columns."""
    return {
        "event_id": line["id"],
        "app_name": line["appName"],
        "user_id": line["userId"],
        "session_id": line["sessionId"],
        "invocation_id": line["invocationId"],
        "ts": pd.Timestamp(line["timestamp"], unit="ms", tz="UTC").to_pydatetime(),
        "event": {k: v for k, v in line.items() if k not in SESSION_KEYS},
    }


POISON = {  # an event without an author: read, it would be a reject
    "event_id": "poison",
    "app_name": "elsewhere",
    "user_id": "u9",
    "session_id": "s9",
    "invocation_id": "e-inv9",
    "ts": pd.Timestamp("2030-01-01", tz="UTC").to_pydatetime(),
    "event": {"id": "poison", "invocationId": "e-inv9", "timestamp": 1893456000000},
}


def write_java(url: str, *, extra: tuple[dict[str, Any], ...] = ()) -> None:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    store.create_tables(engine, store.kit_metadata)
    store.insert_rows(engine, store.adk_event, [*map(table_row, java_lines()), *extra])
    engine.dispose()


def load_db(url: str, filters: Filters | None = None, **spec: Any) -> Loaded:
    source = SourceSpec("events", url_ref="env:IK_EVENTS", **spec)
    return events.load(source, filters or Filters(), environ={"IK_EVENTS": url})


def from_lines(filters: Filters | None = None) -> Loaded:
    return events.load(
        SourceSpec("events", paths=(DATA / "java_events.jsonl",)), filters or Filters()
    )


@pytest.fixture
def java_url(db_url: str) -> str:
    """A database of each kind holding the Java fixture events and one poisoned row."""
    write_java(db_url, extra=(POISON,))
    return db_url


def test_a_java_table_loads_exactly_like_the_json_lines(java_url: str) -> None:
    loaded = load_db(java_url, Filters(app_name="billing"))
    assert loaded.rejects.empty, loaded.rejects.to_dict("records")
    lines = from_lines()
    for name in FRAMES:
        pd.testing.assert_frame_equal(loaded.frames[name], lines.frames[name])


def test_an_unfiltered_read_sees_the_poisoned_row(java_url: str) -> None:
    loaded = load_db(java_url, format="sql")
    assert loaded.rejects[["location", "reason"]].to_dict("records") == [
        {"location": "adk_event:poison", "reason": "author is missing"}
    ]
    assert len(loaded.frames["events"]) == 9


@pytest.mark.parametrize(
    "filters",
    [
        Filters(window=Window.parse("2025-06-15T15:06:41Z", "2025-06-15T15:06:43Z")),
        Filters(session_ids=("s2", "s1")),
        Filters(invocation_ids=("e-inv2",)),
        Filters(app_name="billing", session_ids=("s1",), invocation_ids=("e-inv1",)),
    ],
)
def test_filters_run_in_sql(java_url: str, filters: Filters) -> None:
    """The poisoned row lies outside every filter: a pandas-side filter would reject it."""
    loaded = load_db(java_url, filters)
    assert loaded.rejects.empty, loaded.rejects.to_dict("records")
    want = from_lines(filters)
    assert len(want.frames["events"]) > 0
    for name in FRAMES:
        pd.testing.assert_frame_equal(loaded.frames[name], want.frames[name])


def test_the_window_is_closed_open_on_the_ts_column(sqlite_path: Path) -> None:
    url = f"sqlite:///{sqlite_path}"
    write_java(url)
    window = Window.parse("2025-06-15T15:06:41Z", "2025-06-15T15:06:43Z")  # s1-call .. s1-draft
    got = load_db(url, Filters(window=window)).frames["events"]
    assert list(got["event_id"]) == ["s1-call", "s1-response"]


def test_mapped_columns_and_table_name(sqlite_path: Path) -> None:
    url = f"sqlite:///{sqlite_path}"
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "CREATE TABLE agent_events (eid TEXT PRIMARY KEY, app TEXT, usr TEXT, sid TEXT, "
                "inv TEXT, created TIMESTAMP, payload TEXT)"
            )
        )
        conn.execute(
            sa.text("INSERT INTO agent_events VALUES (:e, :a, :u, :s, :i, :t, :p)"),
            [
                {
                    "e": row["event_id"],
                    "a": row["app_name"],
                    "u": row["user_id"],
                    "s": row["session_id"],
                    "i": row["invocation_id"],
                    "t": row["ts"].strftime("%Y-%m-%d %H:%M:%S.%f"),
                    "p": json.dumps(row["event"]),
                }
                for row in map(table_row, java_lines())
            ],
        )
    engine.dispose()
    columns = {
        "event_id": "eid",
        "app_name": "app",
        "user_id": "usr",
        "session_id": "sid",
        "invocation_id": "inv",
        "ts": "created",
        "event": "payload",
    }
    loaded = load_db(url, Filters(session_ids=("s2",)), table="agent_events", columns=columns)
    want = from_lines(Filters(session_ids=("s2",)))
    for name in FRAMES:
        pd.testing.assert_frame_equal(loaded.frames[name], want.frames[name])
    assert set(loaded.rejects["location"]) == set()


def test_a_missing_table_is_a_schema_error(sqlite_path: Path) -> None:
    url = f"sqlite:///{sqlite_path}"
    write_java(url)
    with pytest.raises(SchemaError, match="table not found: 'nope'"):
        load_db(url, table="nope")


def test_a_missing_column_is_a_schema_error(sqlite_path: Path) -> None:
    url = f"sqlite:///{sqlite_path}"
    write_java(url)
    with pytest.raises(SchemaError, match=r"lacks columns: \['payload'\]"):
        load_db(url, columns={"event": "payload"})


def test_an_unknown_canonical_column_is_a_manifest_error(sqlite_path: Path) -> None:
    url = f"sqlite:///{sqlite_path}"
    write_java(url)
    with pytest.raises(ManifestError, match=r"not columns of an event table: \['payload'\]"):
        load_db(url, columns={"payload": "event"})


def test_table_or_columns_with_an_adk_python_store_is_a_manifest_error(sqlite_path: Path) -> None:
    with pytest.raises(ManifestError, match="do not apply to an ADK Python session store"):
        load_db(f"sqlite:///{sqlite_path}", format="adk-python-db", table="events")


def test_a_database_without_event_tables_is_a_schema_error(sqlite_path: Path) -> None:
    url = f"sqlite:///{sqlite_path}"
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE unrelated (x INTEGER)"))
    engine.dispose()
    with pytest.raises(SchemaError, match="no ADK event table in the database"):
        load_db(url)


def test_an_unreachable_database_is_a_source_error() -> None:
    with pytest.raises(SourceError, match="cannot connect to the database"):
        load_db("postgresql+psycopg://postgres@127.0.0.1:9/nothing")


def test_a_session_json_format_on_a_database_is_a_source_error(sqlite_path: Path) -> None:
    with pytest.raises(SourceError, match="format adk-session-json reads files"):
        load_db(f"sqlite:///{sqlite_path}", format="adk-session-json")


def test_a_manifest_db_path_is_read_as_sqlite(tmp_path: Path) -> None:
    write_java(f"sqlite:///{tmp_path / 'evidence.db'}")
    manifest = parse_manifest({"events": {"path": "evidence.db"}}, base=tmp_path)
    loaded = events.load(manifest.sources["events"], manifest.filters)
    pd.testing.assert_frame_equal(loaded.frames["events"], from_lines().frames["events"])


@pytest.mark.postgres
def test_a_row_to_json_export_of_the_table_loads_like_the_table(
    pg_url: str, tmp_path: Path
) -> None:
    """What ``psql -c "\\copy (SELECT row_to_json(e) FROM adk_event e) TO 'events.jsonl'"``
    writes: \\copy is COPY ... TO STDOUT run by the client, so the same statement is run here."""
    write_java(pg_url)
    engine = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
    raw = engine.raw_connection()
    try:
        cursor = raw.driver_connection.cursor()  # type: ignore[union-attr]
        statement = "COPY (SELECT row_to_json(e) FROM adk_event e) TO STDOUT"
        with cursor.copy(statement) as copy:
            exported = b"".join(bytes(block) for block in copy)
    finally:
        raw.close()
        engine.dispose()
    path = tmp_path / "events.jsonl"
    path.write_bytes(exported)
    first = json.loads(exported.splitlines()[0])
    assert set(first) == {"event_id", "app_name", "user_id", "session_id", "invocation_id"} | {
        "ts",
        "event",
    }
    loaded = events.load(SourceSpec("events", paths=(path,)), Filters())
    assert loaded.rejects.empty and loaded.warnings.empty
    for name in FRAMES:
        pd.testing.assert_frame_equal(loaded.frames[name], from_lines().frames[name])


@pytest.mark.postgres
def test_a_postgres_scheme_url_is_read_as_postgresql(pg_url: str) -> None:
    """``postgres://`` is what Heroku-style settings and many tools write."""
    write_java(pg_url)
    url = sa.make_url(pg_url).set(drivername="postgres").render_as_string(hide_password=False)
    loaded = load_db(url)
    assert len(loaded.frames["events"]) == len(java_lines())
