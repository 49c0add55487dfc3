"""scripts/testdb.py: how the test command finds PostgreSQL, and how it says it cannot."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "testdb.py"


def run(env_url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "INCIDENTKIT_TEST_DATABASE_URL": env_url}
    return subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, check=False
    )


def test_a_configured_server_that_answers_is_exported(pg_admin_url: str) -> None:
    done = run(pg_admin_url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"export INCIDENTKIT_TEST_DATABASE_URL='{pg_admin_url}'"


def test_a_configured_server_that_does_not_answer_fails_on_stderr() -> None:
    done = run("postgresql+psycopg://postgres@127.0.0.1:1/postgres")
    assert done.returncode == 1
    assert done.stdout == ""  # nothing for the shell to eval
    assert "INCIDENTKIT_TEST_DATABASE_URL" in done.stderr and "127.0.0.1:1" in done.stderr
