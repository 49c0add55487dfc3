"""ADK Python session stores: DatabaseSessionService v1 on SQLite, PostgreSQL and MariaDB, and
SqliteSessionService; schema-version checks."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import sqlalchemy as sa

from incidentkit import store
from incidentkit.errors import SchemaError
from incidentkit.manifest import Filters, SourceSpec, Window, parse_manifest
from incidentkit.sources import events, sql
from incidentkit.sources.events import adk_python
from incidentkit.sources.loaded import Loaded

DATA = Path(__file__).resolve().parents[2] / "data" / "events"
FRAMES = ("events", "calls", "responses", "state_writes")
SESSION_KEYS = ("app_name", "user_id", "session_id")


def python_lines() -> list[dict[str, Any]]:
    text = (DATA / "python_event_data.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def naive_utc(seconds: float) -> datetime:
    """What DatabaseSessionService stores in ``events.timestamp`` (naive UTC, microseconds)."""
    return datetime.fromtimestamp(seconds, tz=UTC).replace(tzinfo=None)


def event_row(line: dict[str, Any], **override: Any) -> dict[str, Any]:
    """One ``events`` row as DatabaseSessionService writes it for a JSON line."""
    return {
        "id": line["id"],
        "app_name": line["app_name"],
        "user_id": line["user_id"],
        "session_id": line["session_id"],
        "invocation_id": line["invocation_id"],
        "timestamp": naive_utc(line["timestamp"]),
        "event_data": {k: v for k, v in line.items() if k not in SESSION_KEYS},
        **override,
    }


def session_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keys = dict.fromkeys((r["app_name"], r["user_id"], r["session_id"]) for r in rows)
    now = datetime(2025, 6, 15, 15, 0)
    return [
        {"app_name": a, "user_id": u, "id": s, "state": {}, "create_time": now, "update_time": now}
        for a, u, s in keys
    ]


def write_v1(url: str, rows: list[dict[str, Any]], *, version: str | None = "1") -> None:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    store.create_tables(engine, store.adk_python_metadata)
    if version is not None:
        store.insert_rows(
            engine, store.adk_internal_metadata, [{"key": "schema_version", "value": version}]
        )
    store.insert_rows(engine, store.adk_sessions, session_rows(rows))
    store.insert_rows(engine, store.adk_events, rows)
    engine.dispose()


def write_sqlite_service(path: Path, lines: list[dict[str, Any]]) -> None:
    """A SqliteSessionService file: REAL epoch seconds, compact snake_case event_data."""
    with sqlite3.connect(path) as db:
        db.executescript((DATA / "sqlite_session_service.sql").read_text(encoding="utf-8"))
        sessions = dict.fromkeys((x["app_name"], x["user_id"], x["session_id"]) for x in lines)
        db.executemany(
            "INSERT INTO sessions VALUES (?, ?, ?, '{}', 1750000000.0, 1750000000.0)", sessions
        )
        db.executemany(
            "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    row["id"],
                    row["app_name"],
                    row["user_id"],
                    row["session_id"],
                    row["invocation_id"],
                    line["timestamp"],
                    json.dumps(row["event_data"], separators=(",", ":")),
                )
                for line in lines
                for row in [event_row(line)]
            ],
        )
    db.close()


def load_db(url: str, filters: Filters | None = None, **spec: Any) -> Loaded:
    source = SourceSpec("events", url_ref="env:IK_EVENTS", **spec)
    return events.load(source, filters or Filters(), environ={"IK_EVENTS": url})


def clean(loaded: Loaded) -> dict[str, pd.DataFrame]:
    assert loaded.rejects.empty, loaded.rejects.to_dict("records")
    return dict(loaded.frames)


POISON = {  # NULL event_data, far outside the fixtures: read, it would be a reject
    "id": "poison",
    "app_name": "elsewhere",
    "user_id": "u9",
    "session_id": "s9",
    "invocation_id": "e-9999",
    "timestamp": datetime(2030, 1, 1),
    "event_data": None,
}


@pytest.fixture
def v1_url(db_url: str) -> str:
    """A schema-v1 store of each database kind with the fixture events and a poisoned row."""
    write_v1(db_url, [*map(event_row, python_lines()), POISON])
    return db_url


def test_a_v1_store_gives_the_same_frames_on_every_database(
    v1_url: str, sqlite_path: Path, tmp_path: Path
) -> None:
    got = clean(
        load_db(
            v1_url, Filters(window=Window.parse("2025-01-01T00:00:00Z", "2026-01-01T00:00:00Z"))
        )
    )
    reference = tmp_path / "reference.sqlite"
    write_v1(f"sqlite:///{reference}", [*map(event_row, python_lines())])
    want = clean(load_db(f"sqlite:///{reference}"))
    for name in FRAMES:
        pd.testing.assert_frame_equal(got[name], want[name])
    assert [len(got[name]) for name in FRAMES] == [7, 1, 1, 4]
    assert set(got["events"]["source_format"]) == {"adk-python-db-v1"}


def test_a_v1_store_loads_like_its_event_data_as_json_lines(sqlite_path: Path) -> None:
    url = f"sqlite:///{sqlite_path}"
    write_v1(url, [*map(event_row, python_lines())])
    got = clean(load_db(url))
    lines = clean(
        events.load(SourceSpec("events", paths=(DATA / "python_event_data.jsonl",)), Filters())
    )
    pd.testing.assert_frame_equal(
        got["events"].drop(columns="source_format"), lines["events"].drop(columns="source_format")
    )
    for name in FRAMES[1:]:
        pd.testing.assert_frame_equal(got[name], lines[name])
    ev = got["events"].set_index("event_id")
    assert ev.loc["ev-call", "ts"] == pd.Timestamp("2025-06-15T15:06:41.079489Z")  # to the µs
    assert ev.loc["ev2-limit", "final_response"]
    assert ev.loc["ev2-limit", "error_code"] == "LlmCallsLimitExceededError"
    assert ev.loc["ev-final", "text"] == "Order A-42 has shipped."
    assert list(got["state_writes"]["key"]) == ["ticket", "app:flag", "order_status", "user:tier"]
    assert list(got["state_writes"]["scope"]) == ["session", "app", "session", "user"]


def test_an_unfiltered_read_sees_the_poisoned_row(v1_url: str) -> None:
    loaded = load_db(v1_url, format="adk-python-db")
    assert loaded.rejects[["location", "reason"]].to_dict("records") == [
        {"location": "events:s9/poison", "reason": "no event JSON (the value is null)"}
    ]


@pytest.mark.parametrize(
    ("filters", "ids"),
    [
        # closed-open on the naive timestamp column: ev-fr is at exactly 15:06:41.5
        (
            Filters(window=Window.parse("2025-06-15T15:06:41.5Z", "2025-06-15T15:08:20Z")),
            ["ev-fr", "ev-final"],
        ),
        (Filters(session_ids=("ps2",)), ["ev2-user", "ev2-limit"]),
        (Filters(invocation_ids=("e-3333",)), ["ev3-user"]),
        (Filters(app_name="other"), ["ev3-user"]),
    ],
)
def test_filters_run_in_sql_on_the_naive_column(
    v1_url: str, filters: Filters, ids: list[str]
) -> None:
    got = clean(load_db(v1_url, filters))
    assert list(got["events"]["event_id"]) == ids
    assert set(got["state_writes"]["event_id"]) <= set(ids)


def test_event_data_time_wins_over_the_column(sqlite_path: Path) -> None:
    """ADK 1.x wrote local time into the column; event_data.timestamp is the truth."""
    url = f"sqlite:///{sqlite_path}"
    line = python_lines()[0]
    write_v1(url, [event_row(line, timestamp=naive_utc(line["timestamp"]) + timedelta(hours=2))])
    got = clean(load_db(url))["events"]
    assert list(got["ts"]) == [pd.Timestamp(line["timestamp"], unit="s", tz="UTC")]


def test_the_columns_fill_in_what_event_data_lacks(sqlite_path: Path) -> None:
    url = f"sqlite:///{sqlite_path}"
    line = python_lines()[0]
    data = {k: v for k, v in line.items() if k not in ("id", "invocation_id", "timestamp")}
    write_v1(url, [event_row(line, event_data=data)])
    got = clean(load_db(url))["events"]
    assert list(got["event_id"]) == [line["id"]]
    assert list(got["invocation_id"]) == [line["invocation_id"]]
    assert list(got["ts"]) == [pd.Timestamp(naive_utc(line["timestamp"]), tz="UTC")]


def test_sqlite_session_service_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "session.db"
    write_sqlite_service(path, python_lines())
    manifest = parse_manifest({"events": {"path": "session.db"}}, base=tmp_path)
    got = clean(events.load(manifest.sources["events"], Filters()))
    reference = tmp_path / "v1.sqlite"
    write_v1(f"sqlite:///{reference}", [*map(event_row, python_lines())])
    want = clean(load_db(f"sqlite:///{reference}"))
    assert set(got["events"]["source_format"]) == {"adk-python-sqlite"}
    pd.testing.assert_frame_equal(
        got["events"].drop(columns="source_format"), want["events"].drop(columns="source_format")
    )
    for name in FRAMES[1:]:
        pd.testing.assert_frame_equal(got[name], want[name])


def test_sqlite_session_service_window_uses_epoch_seconds(tmp_path: Path) -> None:
    path = tmp_path / "session.db"
    write_sqlite_service(path, python_lines())
    window = Window.parse("2025-06-15T15:06:41.5Z", "2025-06-15T15:08:20Z")
    got = clean(load_db(f"sqlite:///{path}", Filters(window=window)))
    assert list(got["events"]["event_id"]) == ["ev-fr", "ev-final"]


def test_a_v0_store_is_refused_with_the_migration_command(sqlite_path: Path) -> None:
    with sqlite3.connect(sqlite_path) as db:
        db.executescript((DATA / "adk_python_v0.sql").read_text(encoding="utf-8"))
    db.close()
    with pytest.raises(
        SchemaError,
        match=r"schema version 0 \(pickled actions\).*: '0'\. migrate it .*adk migrate session "
        r"--source_db_url=.* --dest_db_url=",
    ):
        load_db(f"sqlite:///{sqlite_path}")


@pytest.mark.postgres
def test_a_v0_version_row_is_refused(pg_url: str) -> None:
    write_v1(pg_url, [event_row(python_lines()[0])], version="0")
    with pytest.raises(SchemaError, match=r"schema version 0.*ADK >= 1\.22\.1"):
        load_db(pg_url, format="adk-python-db")


def test_an_unknown_schema_version_is_named(sqlite_path: Path) -> None:
    url = f"sqlite:///{sqlite_path}"
    write_v1(url, [event_row(python_lines()[0])], version="7")
    with pytest.raises(SchemaError, match=r"unknown ADK Python session schema version: '7'"):
        load_db(url)


def test_a_metadata_table_without_a_version_row_is_a_schema_error(sqlite_path: Path) -> None:
    url = f"sqlite:///{sqlite_path}"
    write_v1(url, [event_row(python_lines()[0])], version=None)
    with pytest.raises(SchemaError, match="adk_internal_metadata has no schema_version row"):
        load_db(url)


def test_python_format_on_a_java_table_is_a_schema_error(sqlite_path: Path) -> None:
    url = f"sqlite:///{sqlite_path}"
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    store.create_tables(engine, store.kit_metadata)
    engine.dispose()
    with pytest.raises(SchemaError, match="no ADK Python events table"):
        load_db(url, format="adk-python-db")


def test_sqlite_session_service_keeps_insertion_order_for_equal_times(tmp_path: Path) -> None:
    first, second = python_lines()[:2]
    tied = [
        {**first, "id": "z-first"},
        {**second, "id": "a-second", "timestamp": first["timestamp"]},
    ]
    path = tmp_path / "session.db"
    write_sqlite_service(path, tied)
    got = clean(load_db(f"sqlite:///{path}"))["events"]
    assert list(got["event_id"]) == ["z-first", "a-second"]
    assert list(got["seq"]) == [0, 1]


def read_batch(url: str) -> pd.DataFrame:
    engine = sql.open_engine(url, what="events")
    try:
        with sql.connect(engine, what="events") as conn:
            return adk_python.read(conn, Filters(), what="events").meta
    finally:
        engine.dispose()


def without_timestamp(line: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in line.items() if k not in (*SESSION_KEYS, "timestamp")}


def test_an_unreadable_timestamp_column_keeps_its_reason(sqlite_path: Path) -> None:
    url = f"sqlite:///{sqlite_path}"
    first, second = python_lines()[:2]
    write_v1(url, [event_row(first), event_row(second, event_data=without_timestamp(second))])
    with sqlite3.connect(sqlite_path) as db:  # SQLite keeps any text in a DATETIME column
        db.execute("UPDATE events SET timestamp = 'yesterday' WHERE id = ?", (second["id"],))
    db.close()
    meta = read_batch(url).set_index("event_id")
    assert meta["ts_reason"].dropna().to_dict() == {
        second["id"]: "timestamp is missing from event_data and the events.timestamp column is "
        "unreadable (not an ISO 8601 timestamp: 'yesterday')",
    }
    assert meta.loc[first["id"], "ts"] == pd.Timestamp(naive_utc(first["timestamp"]), tz="UTC")


def test_an_unreadable_epoch_column_keeps_its_reason(tmp_path: Path) -> None:
    path = tmp_path / "session.db"
    write_sqlite_service(path, python_lines()[:1])
    with sqlite3.connect(path) as db:  # SQLite keeps text in a REAL column
        db.execute(
            "UPDATE events SET timestamp = 'soon', event_data = json_remove(event_data, "
            "'$.timestamp')"
        )
    db.close()
    meta = read_batch(f"sqlite:///{path}")
    assert meta["ts_reason"].tolist() == [
        "timestamp is missing from event_data and the events.timestamp column is unreadable "
        "(timestamp is not a number of s: 'soon')"
    ]


def test_the_reject_says_why_the_timestamp_column_was_unreadable(sqlite_path: Path) -> None:
    url = f"sqlite:///{sqlite_path}"
    line = python_lines()[0]
    write_v1(url, [event_row(line, event_data=without_timestamp(line))])
    with sqlite3.connect(sqlite_path) as db:
        db.execute("UPDATE events SET timestamp = 'yesterday'")
    db.close()
    assert load_db(url).rejects["reason"].tolist() == [
        "timestamp is missing from event_data and the events.timestamp column is unreadable "
        "(not an ISO 8601 timestamp: 'yesterday')"
    ]


def test_a_schema_that_is_not_utf8_is_a_schema_error_naming_file_and_text(
    sqlite_path: Path,
) -> None:
    write_v1(f"sqlite:///{sqlite_path}", [event_row(python_lines()[0])])
    with sqlite3.connect(sqlite_path) as db:  # a byte that is not UTF-8 in a CREATE statement
        db.execute("PRAGMA writable_schema = ON")
        db.execute(
            "UPDATE sqlite_master SET sql = 'CRE' || CAST(X'FF' AS TEXT) || substr(sql, 5) "
            "WHERE name = 'sessions'"
        )
    db.close()
    spec = SourceSpec(
        "events", sqlite_path=sqlite_path, paths=(sqlite_path,), format="adk-python-db"
    )
    with pytest.raises(SchemaError, match="not UTF-8") as info:
        events.load(spec, Filters())
    assert str(sqlite_path) in str(info.value) and "CRE\\xffTE" in str(info.value)
    engine = sql.open_sqlite(sqlite_path, what="test")
    try:
        with engine.connect() as conn:  # the store's own checks, outside sql.connect's guard
            with pytest.raises(SchemaError, match=r"^store: the database holds text .*xffTE"):
                adk_python.read(conn, Filters(), what="store")
            with pytest.raises(SchemaError, match=r"ADK Python store.*not UTF-8.*xffTE"):
                adk_python.is_python_store(conn)
    finally:
        engine.dispose()
