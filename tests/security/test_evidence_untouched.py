"""The kit writes nothing into, or beside, the evidence it reads.

An evidence folder whose name holds ``#``, ``?``, ``%20``, spaces and non-ASCII letters (each a
character a SQLite URI or a URL would misread) is hashed file by file, and it and its parent are
listed, before and after ``inspect``, ``run`` and ``new``. The events store is an ADK Python
SQLite file: in rollback-journal mode, in WAL mode after a clean close (no ``-wal``), and in
WAL mode while a writer holds it open with unread writes in its ``-wal``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from incidentkit import open_evidence

ROOT = Path(__file__).resolve().parents[2]
PACK = ROOT / "fixtures" / "crash_recovery-adk-python"
CLI = str(Path(sys.executable).with_name("incidentkit"))
FOLDER_NAMES = ["INC#1 ?%20x", "Störung 42", "a%2Fb?c=1#frag"]


def snapshot(folder: Path) -> dict[str, object]:
    """Every file's hash under ``folder``, and the names in ``folder`` and its parent."""
    return {
        "files": {
            str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*"))
            if p.is_file()
        },
        "folder": sorted(os.listdir(folder)),
        "parent": sorted(os.listdir(folder.parent)),
    }


@pytest.fixture(params=["journal", "wal-closed", "wal-open"])
def evidence(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A copy of the ADK Python pack in a hostile folder name, its store in one journal mode."""
    name = FOLDER_NAMES[["journal", "wal-closed", "wal-open"].index(request.param)]
    folder = tmp_path / "held" / name
    shutil.copytree(PACK, folder)
    store = folder / "sessions.db"
    writer = None
    if request.param != "journal":
        with sqlite3.connect(store) as conn:
            assert conn.execute("PRAGMA journal_mode = wal").fetchone() == ("wal",)
        if request.param == "wal-open":
            writer = sqlite3.connect(store)
            writer.execute("PRAGMA wal_autocheckpoint = 0")
            writer.execute("UPDATE events SET app_name = app_name")  # a write left in the -wal
            writer.commit()
            assert (folder / "sessions.db-wal").stat().st_size > 0
    yield folder
    if writer is not None:
        writer.close()


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, *args], capture_output=True, text=True, timeout=300, check=False, cwd=cwd
    )


@pytest.mark.notebook
def test_inspect_run_and_new_leave_the_evidence_as_it_was(evidence: Path, tmp_path: Path) -> None:
    before = snapshot(evidence)
    inspected = _run("inspect", str(evidence), cwd=tmp_path)
    assert inspected.returncode == 0, inspected.stdout + inspected.stderr
    assert "events" in inspected.stdout
    assert snapshot(evidence) == before
    ran = _run(
        *("run", "orphans", "--evidence", str(evidence), "--out", "out", "--quiet"),
        *("-p", "app_name", "invoicing"),
        cwd=tmp_path,
    )
    assert ran.returncode in (0, 1), ran.stdout + ran.stderr  # a verdict was reached
    assert snapshot(evidence) == before
    made = _run("new", "INC-1", "--flow", "orphans", "--evidence", str(evidence), cwd=tmp_path)
    assert made.returncode == 0, made.stdout + made.stderr
    assert (tmp_path / "incidents" / "INC-1" / "orphans.ipynb").is_file()
    assert snapshot(evidence) == before


def test_the_api_reads_every_event_and_leaves_no_file(
    evidence: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where a WAL store is copied
    before = snapshot(evidence)
    events = open_evidence(evidence).events
    assert len(events) > 0
    assert snapshot(evidence) == before
    assert list(scratch.iterdir()) == []  # the temporary copy is gone with its engine


def test_a_wal_store_s_unread_writes_are_read(tmp_path: Path) -> None:
    """The temporary copy carries the -wal: rows only the -wal holds are loaded."""
    folder = tmp_path / "INC#wal ?x"
    shutil.copytree(PACK, folder)
    store = folder / "sessions.db"
    with sqlite3.connect(store) as conn:
        conn.execute("PRAGMA journal_mode = wal")
        total = conn.execute("SELECT count(*) FROM events").fetchone()[0]
    writer = sqlite3.connect(store)
    try:
        writer.execute("PRAGMA wal_autocheckpoint = 0")
        writer.execute("DELETE FROM events WHERE rowid IN (SELECT rowid FROM events LIMIT 3)")
        writer.commit()
        before = snapshot(folder)
        assert len(open_evidence(folder).events) == total - 3
        assert snapshot(folder) == before
    finally:
        writer.close()
