"""The baseline aggregates computed in each engine equal the pandas computation over the
kit's frames of the same events: the simulated runaway incident written into SQLite,
PostgreSQL and MariaDB (ADK Java's table, ADK Python's store), and its JSONL and a Parquet
export read by DuckDB."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from incidentkit import baselines
from incidentkit.errors import ParameterError
from incidentkit.evidence import Evidence, open_evidence
from incidentkit.flows.latency_cliff import latency
from incidentkit.flows.latency_cliff.baseline import summarised
from incidentkit.flows.runaway import counts, limits
from incidentkit.manifest import Filters, SourceSpec, Window
from incidentkit.simulate import simulate

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
RUNAWAY = FIXTURES / "runaway"
APP = "support"
WINDOW = Window.parse("2026-11-29T16:05:00Z", "2026-11-29T16:35:00Z")
FILTERS = Filters(window=WINDOW, app_name=APP)
BUCKET = pd.Timedelta("5min")


def _pandas_histogram(evidence: Evidence, marked: list[str]) -> pd.DataFrame:
    """What the flow counts from the loaded events (``counts.from_events``), as a histogram."""
    events, responses = evidence.events, evidence.responses
    by_events = counts.from_events(events, responses)
    refused = events.loc[
        limits.names_limit_error(events["error_code"])
        | limits.names_limit_error(events["error_message"]),
        "invocation_id",
    ]
    frame = by_events.assign(
        hit_limit=by_events["invocation_id"].isin(refused),
        marked=by_events["invocation_id"].isin(marked),
    )
    keys = ["model_calls", "ended", "hit_limit", "marked"]
    out = frame.groupby(keys).size().rename("invocations").reset_index()
    return out.astype({"model_calls": "int64", "invocations": "int64"})


def _pandas_buckets(runs: pd.DataFrame) -> pd.DataFrame:
    bucket = runs["started_at"].dt.floor(BUCKET)
    grouped = runs.groupby(bucket)
    out = pd.DataFrame({"runs": grouped.size(), "errors": grouped["error"].sum()})
    out.index.name = "bucket"
    out = out.reset_index().astype({"runs": "int64", "errors": "int64"})
    return out.astype({"bucket": "datetime64[ns, UTC]"})


def _summary_matches(found: dict[str, float], frame: pd.DataFrame) -> None:
    expected = summarised(frame, start=WINDOW.start, end=WINDOW.end, label="", source="")
    assert (found["runs"], found["ended"], found["errors"]) == (
        expected.runs,
        expected.ended,
        expected.errors,
    )
    for name in ("p50_ms", "p95_ms", "p99_ms"):
        assert found[name] == pytest.approx(getattr(expected, name), abs=1e-3), name


def assert_engine_matches_pandas(spec: SourceSpec, evidence: Evidence, where: str) -> None:
    """Histogram, latency summary and error buckets of the events: engine == pandas."""
    narrowed = evidence.narrowed(FILTERS)
    marked = sorted(narrowed.events["invocation_id"].dropna().unique())[:5]
    found = baselines.call_histogram(spec, FILTERS, marked=marked)
    assert where in found.where
    expected = _pandas_histogram(narrowed, marked)
    pd.testing.assert_frame_equal(found.value, expected)
    assert found.value["invocations"].sum() > 30 and found.value["marked"].any()
    by_events = latency.from_events(narrowed.events, narrowed.calls, narrowed.responses)
    _summary_matches(baselines.latency_summary(spec, FILTERS).value, by_events)
    buckets = baselines.error_buckets(spec, FILTERS, BUCKET).value
    pd.testing.assert_frame_equal(buckets, _pandas_buckets(by_events))


@pytest.fixture
def pack_in_db(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Evidence:
    """The runaway pack with its ledger and ADK Java events in the database of ``db_url``."""
    pack = simulate("runaway", tmp_path / "pack", into=db_url)
    monkeypatch.setenv("INCIDENT_DB_URL", db_url)
    return open_evidence(pack)


def test_the_java_event_table_gives_the_pandas_numbers(pack_in_db: Evidence) -> None:
    spec = pack_in_db.sources["events"]
    assert_engine_matches_pandas(spec, pack_in_db, " over adk_event")
    engine = baselines.call_histogram(spec, FILTERS).where.split(" ")[0]
    assert engine in ("SQLite", "PostgreSQL", "MariaDB", "MySQL")


def test_the_ledger_gives_the_pandas_latency(pack_in_db: Evidence) -> None:
    spec = pack_in_db.sources["ledger"]
    runs = latency.from_ledger(pack_in_db.narrowed(FILTERS).runs)
    found = baselines.latency_summary(spec, FILTERS)
    assert "over agent_run" in found.where
    _summary_matches(found.value, runs)
    buckets = baselines.error_buckets(spec, FILTERS, BUCKET).value
    started = runs.loc[runs["started_at"].ge(WINDOW.start) & runs["started_at"].lt(WINDOW.end)]
    pd.testing.assert_frame_equal(buckets, _pandas_buckets(started))
    assert buckets["errors"].sum() > 0  # the pack's failed runs are counted


@pytest.mark.parametrize("into", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_adk_pythons_store_gives_the_pandas_numbers(
    into: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    url = None if into == "sqlite" else str(request.getfixturevalue("pg_url"))
    pack = simulate("runaway", tmp_path / "pack", events_format="adk-python", into=url)
    if url is not None:
        monkeypatch.setenv("INCIDENT_DB_URL", url)
    evidence = open_evidence(pack)
    spec = evidence.sources["events"]
    found = baselines.call_histogram(spec, FILTERS)
    assert found.value["hit_limit"].any()  # ADK Python stores the limit error event
    shown = "SQLite over events" if url is None else "PostgreSQL over events"
    assert_engine_matches_pandas(spec, evidence, shown)


def test_duckdb_reads_the_event_lines(tmp_path: Path) -> None:
    evidence = open_evidence(RUNAWAY)
    assert_engine_matches_pandas(evidence.sources["events"], evidence, "DuckDB over events.jsonl")


def test_duckdb_reads_a_parquet_export_of_the_events_table(tmp_path: Path) -> None:
    """A Parquet file of events-table rows (the event as JSON text) counts as the lines do."""
    lines = [json.loads(line) for line in (RUNAWAY / "events.jsonl").read_text().splitlines()]
    table = pa.table(
        {
            "event_id": [e["id"] for e in lines],
            "app_name": [e["appName"] for e in lines],
            "user_id": [e["userId"] for e in lines],
            "session_id": [e["sessionId"] for e in lines],
            "invocation_id": [e["invocationId"] for e in lines],
            "event": [json.dumps(e) for e in lines],
        }
    )
    pq.write_table(table, tmp_path / "events.parquet")
    spec = replace(open_evidence(RUNAWAY).sources["events"], paths=(tmp_path / "events.parquet",))
    assert baselines.pushable(spec)
    from_lines = baselines.call_histogram(open_evidence(RUNAWAY).sources["events"], FILTERS)
    from_parquet = baselines.call_histogram(spec, FILTERS)
    assert from_parquet.where == "DuckDB over events.parquet"
    pd.testing.assert_frame_equal(from_parquet.value, from_lines.value)
    lines_latency = baselines.latency_summary(open_evidence(RUNAWAY).sources["events"], FILTERS)
    assert baselines.latency_summary(spec, FILTERS).value == lines_latency.value


def test_a_source_the_engine_cannot_read_is_refused_and_named(tmp_path: Path) -> None:
    ledger = open_evidence(RUNAWAY).sources["ledger"]  # a CSV export: loaded, not pushed
    assert not baselines.pushable(ledger)
    with pytest.raises(ParameterError, match=r"the \[ledger\] source cannot compute"):
        baselines.latency_summary(ledger, FILTERS)
    session = tmp_path / "session.json"
    session.write_text(json.dumps({"id": "s", "appName": "a", "userId": "u", "events": []}))
    spec = replace(open_evidence(RUNAWAY).sources["events"], paths=(session,))
    assert not baselines.pushable(spec)  # a session document: the loader reads it
    assert np.isnan(
        baselines.latency_summary(
            open_evidence(RUNAWAY).sources["events"], replace(FILTERS, app_name="nobody")
        ).value["p95_ms"]
    )


def test_duckdb_writes_nothing_beside_the_files_or_in_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    evidence_dir = tmp_path / "evidence"
    evidence_dir.mkdir()
    (evidence_dir / "events.jsonl").write_bytes((RUNAWAY / "events.jsonl").read_bytes())
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    spec = replace(open_evidence(RUNAWAY).sources["events"], paths=(evidence_dir / "events.jsonl",))
    before = sorted(p.name for p in evidence_dir.iterdir())
    assert baselines.call_histogram(spec, FILTERS).value["invocations"].sum() > 30
    baselines.latency_summary(spec, FILTERS)
    assert sorted(p.name for p in evidence_dir.iterdir()) == before
    assert list(work.iterdir()) == []


def test_parquet_of_another_shape_is_loaded_not_pushed(tmp_path: Path) -> None:
    pq.write_table(pa.table({"event_id": ["e1"], "ts": [1.0]}), tmp_path / "frame.parquet")
    spec = replace(open_evidence(RUNAWAY).sources["events"], paths=(tmp_path / "frame.parquet",))
    assert not baselines.pushable(spec)
