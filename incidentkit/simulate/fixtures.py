"""The committed fixture packs: which scenarios, formats and broken variants, and how to rebuild.

``python -m incidentkit.simulate.fixtures [ROOT]`` (or ``scripts/make_fixtures``) rewrites
``fixtures/``; same code, same bytes (the ADK Python ``sessions.db`` files are equal table by
table; SQLite's file header may differ between SQLite versions).
"""

from __future__ import annotations

import shutil
import sqlite3
import sys
from pathlib import Path

from incidentkit.simulate import broken
from incidentkit.simulate.driver import simulate

SEED = 0
PACKS: tuple[tuple[str, str, str], ...] = (
    ("healthy", "healthy", "adk-java"),
    ("latency_cliff", "latency_cliff", "adk-java"),
    ("runaway", "runaway", "adk-java"),
    ("vanished_state", "vanished_state", "adk-java"),
    ("crash_recovery", "crash_recovery", "adk-java"),
    ("slow_death", "slow_death", "adk-java"),
    ("crash_recovery-adk-python", "crash_recovery", "adk-python"),
    ("vanished_state-adk-python", "vanished_state", "adk-python"),
    ("crash_recovery-vertex-ai", "crash_recovery", "vertex-ai"),
    ("vanished_state-firestore", "vanished_state", "firestore"),
)
"""(folder, scenario, events format) of every committed pack."""


def build_all(root: Path) -> list[Path]:
    """Write every fixture pack and broken variant under ``root``."""
    made = []
    for folder, scenario, events_format in PACKS:
        target = root / folder
        shutil.rmtree(target, ignore_errors=True)
        made.append(simulate(scenario, target, seed=SEED, events_format=events_format))
    made += broken.make(root / "broken", seed=SEED)
    return made


def comparable(path: Path) -> bytes:
    """A file's content for comparing packs: bytes, or an SQL dump for SQLite files."""
    if path.suffix != ".db":
        return path.read_bytes()
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return "\n".join(conn.iterdump()).encode()
    finally:
        conn.close()


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parents[2] / "fixtures"
    for folder in build_all(root):
        size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        print(f"{folder}  {size / 1024:,.0f} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
