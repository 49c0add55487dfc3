"""Progress of long loads: a bar per source with its records and rate, drawn only when a load
is slow, never in quiet runs (``--quiet``, notebook kernels of ``incidentkit run``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from incidentkit import progress, store
from incidentkit.cli import main
from incidentkit.evidence import open_evidence

EVENTS = 25_000


@pytest.fixture()
def pack(tmp_path: Path) -> Path:
    """An events file of :data:`EVENTS` lines (one session, one invocation per 4 events)."""
    lines = []
    for i in range(EVENTS):
        event = {
            "id": f"ev-{i}",
            "invocationId": f"e-{i // 4}",
            "author": "user" if i % 4 == 0 else "agent",
            "timestamp": 1_750_000_000_000 + i,
            "appName": "app",
            "userId": "u",
            "sessionId": "s",
            "content": {"role": "user", "parts": [{"text": "hi"}]},
        }
        lines.append(json.dumps(event))
    (tmp_path / "events.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "evidence.toml").write_text('[events]\npath = "events.jsonl"\n')
    return tmp_path


class Stderr:
    """Standard error as the bars write it (read once per call)."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys

    def getvalue(self) -> str:
        return self.capsys.readouterr().err


@pytest.fixture()
def stderr(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Stderr:
    """Bars drawn at once (no delay), not silenced by the environment."""
    monkeypatch.delenv(progress.QUIET_ENV, raising=False)
    monkeypatch.setattr(progress, "DELAY", 0.0)
    return Stderr(capsys)


def test_a_load_shows_its_source_records_and_rate(pack: Path, stderr: Stderr) -> None:
    assert len(open_evidence(pack).events) == EVENTS
    shown = stderr.getvalue()
    assert "events: " in shown and "records/s" in shown
    assert f"{EVENTS / 1000:.0f}.0k records" in shown  # the total, every line counted once


def test_a_fast_load_draws_nothing(
    pack: Path, monkeypatch: pytest.MonkeyPatch, stderr: Stderr
) -> None:
    monkeypatch.setattr(progress, "DELAY", 3600.0)
    open_evidence(pack).load_all()
    assert stderr.getvalue() == ""


def test_quiet_draws_nothing(pack: Path, monkeypatch: pytest.MonkeyPatch, stderr: Stderr) -> None:
    with progress.quiet():
        open_evidence(pack).load_all()
    monkeypatch.setenv(progress.QUIET_ENV, "1")
    open_evidence(pack).load_all()
    assert stderr.getvalue() == ""


def test_the_cli_shows_progress_unless_quiet(pack: Path, stderr: Stderr) -> None:
    assert main(["inspect", str(pack)]) == 0
    assert "records/s" in stderr.getvalue()
    assert main(["inspect", str(pack), "--quiet"]) == 0
    assert stderr.getvalue() == ""


def test_advance_outside_a_load_draws_nothing(stderr: Stderr) -> None:
    progress.advance(10)
    with progress.loading("ledger"):
        progress.advance(3)
    progress.advance(10)
    shown = stderr.getvalue()
    assert "ledger: 3.00 records" in shown  # the 10s before and after counted nowhere
    assert "13.0" not in shown and "23.0" not in shown


@pytest.mark.postgres
def test_a_database_load_shows_its_rows(pg_url: str, tmp_path: Path, stderr: Stderr) -> None:
    """Rows of a PostgreSQL table count as they stream in (the reader thread's frames are
    counted in the loading thread, where the bar is)."""
    engine = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
    store.create_tables(engine, store.kit_metadata)
    rows = [
        {
            "event_id": f"ev-{i}",
            "app_name": "app",
            "user_id": "u",
            "session_id": "s",
            "invocation_id": f"e-{i // 4}",
            "ts": datetime.fromtimestamp(1_750_000_000 + i, UTC),
            "event": {
                "id": f"ev-{i}",
                "invocationId": f"e-{i // 4}",
                "author": "user",
                "timestamp": (1_750_000_000 + i) * 1000,
            },
        }
        for i in range(EVENTS)
    ]
    store.insert_rows(engine, store.adk_event, rows)
    engine.dispose()
    (tmp_path / "evidence.toml").write_text('[events]\nurl = "env:IK_PROGRESS_DB"\n')
    evidence = open_evidence(tmp_path, environ={"IK_PROGRESS_DB": pg_url})
    assert len(evidence.events) == EVENTS
    assert f"events: {EVENTS / 1000:.1f}k records" in stderr.getvalue()
