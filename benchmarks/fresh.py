"""What the benchmarks that compare cases in fresh processes share: runs and scratch databases.

A script imports this as ``fresh`` (it sits beside them, on ``sys.path`` when one runs).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url

ADMIN_URL = os.environ.get("INCIDENTKIT_TEST_DATABASE_URL") or (
    "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def best_of(
    command: Callable[[str], list[str]], cases: Iterable[str], repeat: int
) -> dict[str, dict[str, Any]]:
    """Run ``command(case)`` for each case, ``repeat`` times alternated so a busy moment of a
    shared machine hits them all; each prints a JSON line with ``seconds`` and ``peak_mb``.
    Returns each case's last line, with its best time and its highest peak."""
    results: dict[str, dict[str, Any]] = {}
    cases = list(cases)
    for _ in range(repeat):
        for case in cases:
            out = subprocess.run(command(case), check=True, capture_output=True, text=True)
            found = json.loads(out.stdout.strip().splitlines()[-1])
            best = results.setdefault(case, found)
            best["seconds"] = min(best["seconds"], found["seconds"])
            best["peak_mb"] = max(best["peak_mb"], found["peak_mb"])
    return results


def copy_out(url: str, query: str) -> bytes:
    """``query``'s rows as raw psycopg ``COPY ... TO STDOUT (FORMAT csv, HEADER)`` hands them
    over, kept in memory: the baseline a reader of that database is measured against."""
    import psycopg

    conninfo = make_url(url).set(drivername="postgresql").render_as_string(False)
    buffer = io.BytesIO()
    statement = f"COPY ({query}) TO STDOUT (FORMAT csv, HEADER)"
    with psycopg.connect(conninfo) as conn, conn.cursor() as cursor, cursor.copy(statement) as copy:
        for block in copy:
            buffer.write(block)
    return buffer.getvalue()


@contextmanager
def scratch_database(prefix: str = "ik_bench") -> Iterator[str]:
    """The URL of a new PostgreSQL database on :data:`ADMIN_URL`'s server, dropped after."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
