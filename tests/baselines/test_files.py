"""DuckDB's view over each shape of event files the kit reads gives the numbers of the kit's
own event lines (themselves equal to pandas', ``test_queries.py``), and DuckDB, opened through
SQLAlchemy, reads the evidence files and nothing else."""

from __future__ import annotations

import json
import sqlite3
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from incidentkit import baselines
from incidentkit.baselines import files
from incidentkit.errors import SourceError
from incidentkit.evidence import open_evidence
from incidentkit.manifest import Filters, SourceSpec, Window
from incidentkit.simulate import simulate

RUNAWAY = Path(__file__).resolve().parents[2] / "fixtures" / "runaway"
WINDOW = Window.parse("2026-11-29T16:05:00Z", "2026-11-29T16:35:00Z")
FILTERS = Filters(window=WINDOW, app_name="support")
BUCKET = pd.Timedelta("5min")
SESSION_KEYS = ("appName", "userId", "sessionId")


def _lines() -> list[dict[str, Any]]:
    text = (RUNAWAY / "events.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _spec(path: Path, **changes: Any) -> SourceSpec:
    return replace(open_evidence(RUNAWAY).sources["events"], paths=(path,), **changes)


def _write_lines(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _row(event: dict[str, Any], nested: object) -> dict[str, Any]:
    """An events-table row (ADK Java's columns) holding ``nested`` as its event."""
    return {
        "event_id": event["id"],
        "app_name": event["appName"],
        "user_id": event["userId"],
        "session_id": event["sessionId"],
        "invocation_id": event["invocationId"],
        "event": nested,
    }


def _numbers(spec: SourceSpec, marked: list[str]) -> tuple[pd.DataFrame, dict[str, float], Any]:
    return (
        baselines.call_histogram(spec, FILTERS, marked=marked).value,
        baselines.latency_summary(spec, FILTERS).value,
        baselines.error_buckets(spec, FILTERS, BUCKET).value,
    )


def _same(found: tuple[pd.DataFrame, dict[str, float], Any], expected: Any) -> None:
    pd.testing.assert_frame_equal(found[0], expected[0])
    assert found[1] == pytest.approx(expected[1], abs=1e-6)
    pd.testing.assert_frame_equal(found[2], expected[2])


def _shapes(tmp_path: Path) -> dict[str, SourceSpec]:
    lines = _lines()
    bare = [{k: v for k, v in e.items() if k not in SESSION_KEYS} for e in lines]
    parquet = tmp_path / "rows.parquet"
    rows = [_row(e, json.dumps(e)) for e in lines]
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    renamed = tmp_path / "renamed.parquet"
    pq.write_table(
        pa.Table.from_pylist([{**r, "event": None, "payload's": r["event"]} for r in rows]),
        renamed,
    )
    return {
        "events with their session": _spec(RUNAWAY / "events.jsonl"),
        "bare events, app from the manifest": _spec(
            _write_lines(tmp_path / "bare.jsonl", bare), identity={"app_name": "support"}
        ),
        "rows, event an object": _spec(
            _write_lines(tmp_path / "objects.jsonl", [_row(e, e) for e in lines])
        ),
        "rows, event JSON text": _spec(_write_lines(tmp_path / "texts.jsonl", rows)),
        "Parquet rows": _spec(parquet),
        "Parquet rows, event in another column": _spec(renamed, event_column="payload's"),
    }


def test_every_shape_of_event_files_gives_the_same_numbers(tmp_path: Path) -> None:
    shapes = _shapes(tmp_path)
    reference = shapes.pop("events with their session")
    marked = sorted({e["invocationId"] for e in _lines()})[:5]
    expected = _numbers(reference, marked)
    assert expected[0]["invocations"].sum() > 30 and expected[0]["marked"].any()
    for name, spec in shapes.items():
        assert baselines.pushable(spec), name
        _same(_numbers(spec, marked), expected)


def test_adk_python_store_rows_as_json_lines_give_the_stores_numbers(tmp_path: Path) -> None:
    """ADK Python's events (snake_case, epoch seconds, ``event_data`` text) exported from its
    store read as the store does (``test_queries.py``: the store gives the pandas numbers)."""
    pack = simulate("runaway", tmp_path / "pack", events_format="adk-python")
    store = open_evidence(pack).sources["events"]
    with sqlite3.connect(pack / "sessions.db") as db:
        db.row_factory = sqlite3.Row
        rows = [dict(r) for r in db.execute("SELECT * FROM events ORDER BY timestamp")]
    lines = _write_lines(tmp_path / "events.jsonl", rows)
    spec = replace(store, paths=(lines,), format=None, event_column="event_data")
    assert baselines.pushable(spec)
    with files.event_view(spec, what="test") as (_conn, events):
        assert events.python and events.keys["error_code"] == ("error_code",)
    found = baselines.call_histogram(spec, FILTERS)
    assert found.value["hit_limit"].any()  # ADK Python stores the limit error event
    _same(_numbers(spec, []), _numbers(store, []))


def test_the_view_is_adk_javas_table(tmp_path: Path) -> None:
    with files.event_view(_spec(RUNAWAY / "events.jsonl"), what="test") as (conn, events):
        table = sa.table(files.VIEW, *(sa.column(c) for c in events.info.columns))
        first = conn.execute(sa.select(table).limit(1)).one()._asdict()
        count = conn.execute(sa.select(sa.func.count()).select_from(table)).scalar()
    line = _lines()[0]
    assert list(first) == [
        "event_id",
        "app_name",
        "user_id",
        "session_id",
        "invocation_id",
        "ts",
        "event",
    ]
    assert (first["event_id"], first["app_name"], first["invocation_id"]) == (
        line["id"],
        line["appName"],
        line["invocationId"],
    )
    assert json.loads(first["event"]) == line
    assert first["ts"] == pd.Timestamp(line["timestamp"], unit="ms").to_pydatetime()
    assert count == len(_lines())


@settings(max_examples=25, deadline=None)
@given(
    st.one_of(
        st.integers(min_value=100_000_000_000, max_value=4_000_000_000_000),
        st.floats(min_value=0, max_value=4_000_000_000, allow_nan=False),  # until 2096
    )
)
def test_event_times_read_to_the_microsecond(stamp: float) -> None:
    """Epoch milliseconds (ADK Java) and seconds (ADK Python) both become the instant."""
    from incidentkit.baselines import dialects

    with tempfile.TemporaryDirectory() as folder:
        path = _write_lines(Path(folder) / "e.jsonl", [{**_lines()[0], "timestamp": stamp}])
        with files.event_view(_spec(path), what="test") as (conn, events):
            ts = events.column("ts")
            seconds = conn.execute(
                sa.select(dialects.epoch_seconds(conn, ts, events.storage))
            ).scalar()
    expected = stamp / 1000 if stamp >= files.MS_THRESHOLD else stamp
    assert seconds == pytest.approx(expected, abs=1e-6)


def test_duckdb_opens_only_the_evidence_and_its_own_spill_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    own_tmp = tmp_path / "tmp"
    own_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(own_tmp))
    other = _write_lines(tmp_path / "other.jsonl", _lines()[:3])
    spec = _spec(RUNAWAY / "events.jsonl")
    with files.event_view(spec, what="test") as (conn, _events):
        spills = list(own_tmp.iterdir())
        assert [p.name[:19] for p in spills] == ["incidentkit-duckdb-"]
        for statement in (
            f"SELECT count(*) FROM read_ndjson_objects('{other}')",
            f"COPY (SELECT 1) TO '{tmp_path / 'written.csv'}'",
            "SET enable_external_access = true",
            "INSTALL httpfs",
        ):
            with pytest.raises(sa.exc.DBAPIError):
                conn.exec_driver_sql(statement)
    assert list(own_tmp.iterdir()) == []  # the spill folder is gone
    assert not (tmp_path / "written.csv").exists()


def test_unreadable_files_are_the_kits_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 not parquet")
    with pytest.raises(SourceError, match="DuckDB could not read the files") as caught:
        files.call_histogram(_spec(broken), FILTERS)  # pushable() says no: forced here
    assert caught.value.value  # DuckDB's own first line
    struct = tmp_path / "struct.parquet"
    pq.write_table(pa.table({"app_name": ["a"], "event": [{"author": "a"}]}), struct)
    assert not baselines.pushable(_spec(struct))  # a struct's null fields would read as keys
    with pytest.raises(SourceError, match="no event column of JSON text"):
        files.call_histogram(_spec(struct), FILTERS)
