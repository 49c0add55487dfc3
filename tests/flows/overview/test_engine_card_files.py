"""The triage card computed by DuckDB over ``[events]`` files (``card_engine``) equals the
in-memory card line for line: the bundled incidents' JSON lines and a Parquet export of them,
ADK Python's events exported from its store as rows (JSON lines, Parquet), and event rows
beside a ledger kept in SQLite or PostgreSQL; a ledger kept as a CSV file is NOT_CHECKED with
why; ``auto`` takes DuckDB for large files only; the events are never loaded by the loader,
only the flagged invocations' rows, read through the view."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from test_engine_card import (
    COMPARED,
    ENGINE_ONLY_IN_MEMORY,
    FIXTURES,
    UNREAD,
    without_sections,
)

import incidentkit.evidence as evidence_module
from incidentkit.flows import engine_card
from incidentkit.flows.common import last_record
from incidentkit.flows.overview import steps
from incidentkit.simulate import simulate
from incidentkit.sources.registry import loader_for

SCENARIOS = ["runaway", "latency_cliff", "crash_recovery", "vanished_state", "healthy"]
LEDGER_CHECKS = ("orphans", "open-past-timeout", "latency-cliff", "quiet-errors")
pytestmark = pytest.mark.xdist_group("engine_card")


def pack_of(scenario: str, tmp_path: Path, drop: tuple[str, ...]) -> Path:
    """A copy of the bundled incident without the ``drop`` sections."""
    pack = tmp_path / scenario
    shutil.copytree(FIXTURES / scenario, pack)
    without_sections(pack, drop)
    return pack


def to_parquet(lines: Path, parquet: Path) -> None:
    """The events of JSON lines as a Parquet export of ADK Java's table (the event as text)."""
    events = [json.loads(line) for line in lines.read_text().splitlines() if line.strip()]
    table = pa.table(
        {
            "event_id": [e["id"] for e in events],
            "app_name": [e["appName"] for e in events],
            "user_id": [e["userId"] for e in events],
            "session_id": [e["sessionId"] for e in events],
            "invocation_id": [e["invocationId"] for e in events],
            "ts": pa.array(
                [pd.Timestamp(e["timestamp"], unit="ms", tz="UTC") for e in events],
                pa.timestamp("us", tz="UTC"),
            ),
            "event": [json.dumps(e) for e in events],
        }
    )
    pq.write_table(table, parquet)


def pointed_at(pack: Path, path: str) -> None:
    """The pack's ``[events]`` section names ``path`` (the format left to the file)."""
    manifest = pack / "evidence.toml"
    text = manifest.read_text()
    old = '[events]\npath = "events.jsonl"\nformat = "adk-java-json"\n'
    assert old in text
    manifest.write_text(text.replace(old, f'[events]\npath = "{path}"\n'))


def card(pack: Path, choice: str) -> tuple[pd.DataFrame, str]:
    incident, settings = steps.setup(pack, card_engine=choice)
    report = steps.triage(incident, settings)
    return report.card, report.computed


def keyed(found: pd.DataFrame) -> pd.DataFrame:
    kept = found.loc[~found["check"].isin(ENGINE_ONLY_IN_MEMORY), COMPARED].astype(object)
    kept = kept.where(kept.notna(), None)
    return kept.sort_values(["app", "check"], kind="stable").reset_index(drop=True)


def assert_same_lines(
    engine: pd.DataFrame, memory: pd.DataFrame, *, not_checked: tuple[str, ...] = ()
) -> None:
    """Line for line equal; the ``not_checked`` checks NOT_CHECKED in the engine card (and
    compared only by check and app)."""
    ours, theirs = keyed(engine), keyed(memory)
    assert ours[["app", "check"]].equals(theirs[["app", "check"]])
    skipped = ours["check"].isin(not_checked)
    assert ours.loc[skipped, "severity"].eq("NOT_CHECKED").all()
    pd.testing.assert_frame_equal(
        ours.loc[~skipped].reset_index(drop=True), theirs.loc[~skipped].reset_index(drop=True)
    )


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sections the kit's loader is asked for (by the evidence and by the engine card)."""
    asked: list[str] = []
    real = loader_for

    def spy(section: str, fmt: str | None = None) -> Callable[..., object]:
        asked.append(section)
        return real(section, fmt)

    monkeypatch.setattr(evidence_module, "loader_for", spy)
    monkeypatch.setattr(engine_card, "loader_for", spy)
    return asked


@pytest.mark.parametrize("shape", ["jsonl", "parquet"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_duckdb_over_the_event_files_gives_the_in_memory_card(
    scenario: str, shape: str, tmp_path: Path, loads: list[str]
) -> None:
    """Events alone (the ledger left out: both cards time runs from the events): the lines of
    DuckDB over the JSON lines, or over their Parquet export, are the in-memory card's; the
    orphans line is NOT_CHECKED in both (no ledger)."""
    memory_pack = pack_of(scenario, tmp_path / "memory", (*UNREAD, "ledger"))
    memory, _ = card(memory_pack, "no")
    pack = pack_of(scenario, tmp_path / "engine", (*UNREAD, "ledger"))
    shown = "events.jsonl"
    if shape == "parquet":
        to_parquet(pack / "events.jsonl", pack / "events.parquet")
        (pack / "events.jsonl").unlink()
        pointed_at(pack, "events.parquet")
        shown = "events.parquet"
    loads.clear()
    engine, computed = card(pack, "yes")
    assert "events" not in loads  # the view's rows, never the loader's frames
    assert computed == f"computed in DuckDB over {shown}"
    assert_same_lines(engine, memory, not_checked=("orphans",))
    assert memory.loc[memory["check"].eq("orphans"), "severity"].eq("NOT_CHECKED").all()
    judged = ~engine["check"].isin(ENGINE_ONLY_IN_MEMORY) & engine["severity"].ne("NOT_CHECKED")
    assert judged.any()
    assert engine.loc[judged, "detail"].str.startswith(f"computed in DuckDB over {shown}").all()


ROW_KEYS = ("event_id", "app_name", "user_id", "session_id", "invocation_id", "event")


def python_rows(pack: Path, shape: str) -> str:
    """The ADK Python store of ``pack`` (``sessions.db``: snake_case events, epoch seconds)
    exported as rows of its events table, JSON lines or Parquet; ``[events]`` names them."""
    with sqlite3.connect(pack / "sessions.db") as conn:
        rows = conn.execute(
            "SELECT id, app_name, user_id, session_id, invocation_id, event_data FROM events"
        ).fetchall()
    (pack / "sessions.db").unlink()
    name = f"events.{shape}"
    if shape == "parquet":
        columns = {key: [row[i] for row in rows] for i, key in enumerate(ROW_KEYS)}
        pq.write_table(pa.table(columns), pack / name)
    else:
        with (pack / name).open("w", encoding="utf-8") as out:
            for row in rows:
                out.write(json.dumps(dict(zip(ROW_KEYS, row, strict=True))) + "\n")
    manifest = pack / "evidence.toml"
    text = manifest.read_text()
    manifest.write_text(
        re.sub(r"\[events\]\n(?:[^\[\n].*\n)*", f'[events]\npath = "{name}"\n\n', text)
    )
    return name


@pytest.mark.parametrize("shape", ["jsonl", "parquet"])
@pytest.mark.parametrize("scenario", ["crash_recovery-adk-python", "vanished_state-adk-python"])
def test_adk_pythons_events_as_rows_give_the_in_memory_card(
    scenario: str, shape: str, tmp_path: Path
) -> None:
    """ADK Python's events (snake_case, epoch seconds) exported from its store as rows: the
    DuckDB card over them equals the in-memory card of the JSON lines."""
    memory_pack = pack_of(scenario, tmp_path / "memory", (*UNREAD, "ledger"))
    python_rows(memory_pack, "jsonl")
    memory, _ = card(memory_pack, "no")
    pack = pack_of(scenario, tmp_path / "engine", (*UNREAD, "ledger"))
    name = python_rows(pack, shape)
    engine, computed = card(pack, "yes")
    assert computed == f"computed in DuckDB over {name}"
    assert_same_lines(engine, memory, not_checked=("orphans",))
    judged = ~engine["check"].isin(ENGINE_ONLY_IN_MEMORY) & engine["severity"].ne("NOT_CHECKED")
    assert judged.any()


@pytest.mark.parametrize(
    ("scenario", "flagged"),
    [("runaway", "over-call-limit"), ("latency_cliff", "open-past-timeout")],
)
def test_the_incidents_own_line_is_flagged_over_parquet(
    scenario: str, flagged: str, tmp_path: Path
) -> None:
    pack = pack_of(scenario, tmp_path, (*UNREAD, "ledger"))
    to_parquet(pack / "events.jsonl", pack / "events.parquet")
    pointed_at(pack, "events.parquet")
    engine, _ = card(pack, "yes")
    assert engine.loc[engine["check"].eq(flagged), "severity"].isin(["CRITICAL", "WARNING"]).any()


LEDGER_DATABASES = [
    "sqlite",
    pytest.param("postgresql", marks=pytest.mark.postgres),
]
ENGINES = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}


@pytest.fixture(params=LEDGER_DATABASES)
def ledger_database(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """An empty database for the ledger (and its kind)."""
    if request.param == "sqlite":
        return "sqlite", f"sqlite:///{tmp_path / 'incident.sqlite'}"
    url: str = request.getfixturevalue("pg_url")
    return "postgresql", url


def exported_rows(url: str, target: Path) -> None:
    """``adk_event`` of the database at ``url`` as JSON lines of its rows (the event nested)."""
    keys = ("event_id", "app_name", "user_id", "session_id", "invocation_id", "event")
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        rows = conn.execute(sa.text(f"SELECT {', '.join(keys)} FROM adk_event")).all()
    engine.dispose()
    with target.open("w", encoding="utf-8") as out:
        for row in rows:
            found = dict(zip(keys, row, strict=True))
            event = found["event"]  # JSON text, or a document (jsonb)
            found["event"] = event if isinstance(event, str) else json.dumps(event)
            out.write(json.dumps(found) + "\n")


@pytest.mark.parametrize("scenario", ["crash_recovery", "latency_cliff", "vanished_state"])
def test_event_files_beside_a_ledger_in_a_database(
    scenario: str,
    ledger_database: tuple[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Events exported as rows of ADK Java's table, the ledger and journal kept in SQLite or
    PostgreSQL: every ledger check is computed (DuckDB for the events, the database for the
    ledger) and equals the in-memory card; only the overlaps, which join the two, are
    NOT_CHECKED."""
    kind, url = ledger_database
    pack = simulate(scenario, tmp_path / "pack", into=url)
    monkeypatch.setenv("INCIDENT_DB_URL", url)
    without_sections(pack, UNREAD)
    exported_rows(url, pack / "events.jsonl")
    manifest = pack / "evidence.toml"
    text = manifest.read_text()
    assert '[events]\nurl = "env:INCIDENT_DB_URL"' in text
    text = re.sub(r"\[events\]\n(?:[^\[\n].*\n)*", '[events]\npath = "events.jsonl"\n\n', text)
    manifest.write_text(text)
    incident = steps.setup(pack, card_engine="no")[0]
    for section in ("events", "ledger"):  # one MAX in DuckDB, one in the database
        top = engine_card.latest(incident.sources[section], incident.filters, incident.environ)
        expected = last_record(incident, [section])
        assert top is not None and expected is not None
        assert abs(top - expected) <= pd.Timedelta(1, "us"), section
    memory, _ = card(pack, "no")
    engine, computed = card(pack, "yes")
    assert computed == f"computed in DuckDB over events.jsonl and {ENGINES[kind]} over agent_run"
    assert_same_lines(engine, memory, not_checked=("overlapping-invocations",))
    overlaps = engine.loc[engine["check"].eq("overlapping-invocations"), "title"]
    assert overlaps.str.contains("two databases").all()
    for check in LEDGER_CHECKS:
        found = engine.loc[engine["check"].eq(check)]
        assert len(found) and found["severity"].ne("NOT_CHECKED").any(), check
    assert not engine_card.engine_chosen("auto", steps.setup(pack)[0].sources)  # small files


def test_a_ledger_file_is_not_checked_with_why(tmp_path: Path) -> None:
    """The bundled JSONL events and CSV ledger: ``yes`` computes the event checks in DuckDB
    (equal to the in-memory card) and names the ledger file where a check needs the ledger;
    ``auto`` loads the frames (a ledger file is not in the engine)."""
    pack = pack_of("runaway", tmp_path, UNREAD)
    memory, _ = card(pack, "no")
    engine, computed = card(pack, "yes")
    assert computed == "computed in DuckDB over events.jsonl"
    calls = engine.loc[engine["check"].eq("over-call-limit")]
    assert calls["severity"].eq("WARNING").all()
    pd.testing.assert_frame_equal(
        keyed(calls), keyed(memory.loc[memory["check"].eq("over-call-limit")])
    )
    for check in (*LEDGER_CHECKS, "overlapping-invocations"):
        found = engine.loc[engine["check"].eq(check)]
        assert len(found) and found["severity"].eq("NOT_CHECKED").all(), check
        assert found["title"].str.contains("ledger is kept elsewhere").all(), check
        assert found["title"].str.contains("ledger.csv").all(), check
    incident, settings = steps.setup(pack, card_engine="yes")
    assert steps.coverage(incident, settings).startswith("Coverage not measured")
    sources = steps.setup(pack)[0].sources
    assert not engine_card.engine_chosen("auto", sources)
    assert engine_card.engine_chosen("yes", sources) and not engine_card.engine_chosen(
        "no", sources
    )


def test_auto_takes_duckdb_for_event_files_of_the_threshold_and_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pack = pack_of("runaway", tmp_path, (*UNREAD, "ledger"))
    sources = steps.setup(pack)[0].sources
    size = (pack / "events.jsonl").stat().st_size
    assert engine_card.files_bytes(sources["events"]) == size
    assert engine_card.in_duckdb(sources["events"])
    assert not engine_card.in_engine(sources["events"])
    assert engine_card.in_engine(sources["events"], files=True)
    assert size < engine_card.FILES_AUTO_BYTES
    assert not engine_card.engine_chosen("auto", sources)
    monkeypatch.setattr(engine_card, "FILES_AUTO_BYTES", size)
    assert engine_card.engine_chosen("auto", sources)
    monkeypatch.setattr(engine_card, "FILES_AUTO_BYTES", size + 1)
    assert not engine_card.engine_chosen("auto", sources)


def test_files_duckdb_does_not_read_are_not_in_the_engine(tmp_path: Path) -> None:
    """A Parquet file of another shape, a session document: no DuckDB view (NOT_CHECKED
    under ``yes``, the frames under ``auto``)."""
    pack = pack_of("runaway", tmp_path, (*UNREAD, "ledger"))
    pq.write_table(pa.table({"event_id": ["e1"], "ts": [1.0]}), pack / "frame.parquet")
    spec = steps.setup(pack)[0].sources["events"]
    other = replace(spec, paths=(pack / "frame.parquet",), format=None)
    assert not engine_card.in_duckdb(other)
    session = pack / "session.json"
    session.write_text(json.dumps({"id": "s", "appName": "a", "userId": "u", "events": []}))
    assert not engine_card.in_duckdb(replace(spec, paths=(session,), format=None))
    pointed_at(pack, "frame.parquet")
    engine, _ = card(pack, "yes")
    lines = engine.loc[~engine["check"].isin(ENGINE_ONLY_IN_MEMORY)]
    assert len(lines) and lines["severity"].eq("NOT_CHECKED").all()


@pytest.mark.parametrize("shape", ["jsonl", "parquet"])
def test_the_latest_event_is_asked_of_duckdb(shape: str, tmp_path: Path) -> None:
    """``latest``: one MAX over the view, the last event the loaded frame holds (in a window,
    and for one app)."""
    pack = pack_of("crash_recovery", tmp_path, (*UNREAD, "ledger"))
    incident = steps.setup(pack, card_engine="no")[0]
    spec = incident.sources["events"]
    if shape == "parquet":
        to_parquet(pack / "events.jsonl", tmp_path / "events.parquet")
        spec = replace(spec, paths=(tmp_path / "events.parquet",), format=None)
    expected = last_record(incident, ["events"])
    assert expected is not None
    assert engine_card.latest(spec, incident.filters, None) == expected
    narrow = replace(incident.filters, app_name="invoicing")
    narrowed = incident.narrowed(narrow)
    assert engine_card.latest(spec, narrow, None) == last_record(narrowed, ["events"])
    nobody = replace(incident.filters, app_name="nobody")
    assert engine_card.latest(spec, nobody, None) is None
