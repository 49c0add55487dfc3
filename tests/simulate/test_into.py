"""``--into``: the evidence goes into a real database; the manifest names it only by env:."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import sqlalchemy as sa
from simloaders import require_loaders

from incidentkit import open_evidence
from incidentkit.errors import SimulationError
from incidentkit.simulate import simulate
from incidentkit.simulate.shards import SHARD_FROM_SCALE

FRAMES = ("runs", "events", "calls", "responses", "state_writes", "journal")


def _count(url: str, table: str) -> int:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        return int(conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())


def _counts(folder: Path) -> dict[str, int]:
    counts: dict[str, int] = json.loads((folder / "truth.json").read_text())["counts"]
    return counts


def _check_database(url: str, folder: Path, *, python: bool) -> None:
    counts = _counts(folder)
    assert _count(url, "agent_run") == counts["runs"]
    assert _count(url, "tool_journal") == counts["journal"]
    assert _count(url, "events" if python else "adk_event") == counts["events"]
    manifest = (folder / "evidence.toml").read_text()
    assert manifest.count('url = "env:INCIDENT_DB_URL"') == 3
    assert "postgresql" not in manifest and "sqlite:" not in manifest
    for name in ("ledger.csv", "journal.jsonl", "events.jsonl", "sessions.db"):
        assert not (folder / name).exists()


def _same_frames(folder: Path, url: str, files: Path) -> None:
    require_loaders("ledger", "events", "journal")
    from_db = open_evidence(folder, environ={"INCIDENT_DB_URL": url})
    from_files = open_evidence(files)
    for frame in FRAMES:
        pd.testing.assert_frame_equal(from_db.frame(frame), from_files.frame(frame))
    assert from_db.rejects.empty


@pytest.mark.postgres
def test_into_postgres(pg_url: str, tmp_path: Path) -> None:
    folder = simulate("crash_recovery", tmp_path / "pg", into=pg_url)
    _check_database(pg_url, folder, python=False)
    _same_frames(folder, pg_url, simulate("crash_recovery", tmp_path / "files"))


@pytest.mark.postgres
def test_into_postgres_adk_python(pg_url: str, tmp_path: Path) -> None:
    folder = simulate("vanished_state", tmp_path / "pg", into=pg_url, events_format="adk-python")
    _check_database(pg_url, folder, python=True)
    assert _count(pg_url, "adk_internal_metadata") == 1
    assert _count(pg_url, "sessions") > 0
    files = simulate("vanished_state", tmp_path / "files", events_format="adk-python")
    _same_frames(folder, pg_url, files)


def test_into_sqlite(sqlite_path: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{sqlite_path}"
    folder = simulate("crash_recovery", tmp_path / "db", into=url)
    _check_database(url, folder, python=False)
    _same_frames(folder, url, simulate("crash_recovery", tmp_path / "files"))


def test_into_sqlite_adk_python(sqlite_path: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{sqlite_path}"
    folder = simulate("crash_recovery", tmp_path / "db", into=url, events_format="adk-python")
    _check_database(url, folder, python=True)
    files = simulate("crash_recovery", tmp_path / "files", events_format="adk-python")
    _same_frames(folder, url, files)


@pytest.mark.postgres
def test_into_postgres_at_scale_goes_through_the_shards(pg_url: str, tmp_path: Path) -> None:
    folder = simulate("healthy", tmp_path / "pg", into=pg_url, scale=SHARD_FROM_SCALE)
    _check_database(pg_url, folder, python=False)
    files = simulate("healthy", tmp_path / "files", scale=SHARD_FROM_SCALE)
    assert _counts(folder) == _counts(files)


@pytest.mark.postgres
def test_into_twice_is_refused(pg_url: str, tmp_path: Path) -> None:
    simulate("healthy", tmp_path / "first", into=pg_url)
    with pytest.raises(SimulationError, match="already holds rows"):
        simulate("healthy", tmp_path / "second", into=pg_url)
    assert _count(pg_url, "agent_run") == _counts(tmp_path / "first")["runs"]
    assert not (tmp_path / "second").exists()


def test_into_sqlite_twice_is_refused(sqlite_path: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{sqlite_path}"
    simulate("healthy", tmp_path / "first", into=url, events_format="adk-python")
    with pytest.raises(SimulationError, match="already holds rows"):
        simulate("healthy", tmp_path / "second", into=url, events_format="adk-python")
