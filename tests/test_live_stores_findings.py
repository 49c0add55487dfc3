"""A new user's check of the live stores: a manifest pointing at a store the kit reads live
gives the same findings as the files exported from it, through the real command.

- ClickHouse: the runaway incident's spans in the collector exporter's ``otel_traces`` (an
  embedded ClickHouse, chDB, through clickhouse-connect's ``chdb://`` backend), against the
  OTLP file they were written from;
- Redis: the ADK Python incident's sessions written by ADK's own ``RedisSessionService`` into a
  real ``redis-server``, read live and from the dump ``docs/producing-evidence.md`` makes.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from clickhouse_exporter import INSERT_COLUMNS, create_tables, otlp_rows

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.notebook, pytest.mark.slow]


def run(flow: str, manifest: Path, out: Path, environ: dict[str, str]) -> dict[str, Any]:
    """The command's findings for ``flow`` on ``manifest`` (it must succeed)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "incidentkit.cli",
            "run",
            flow,
            "--evidence",
            str(manifest),
            "--out",
            str(out),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **environ},
        check=False,
        timeout=600,
    )
    assert done.returncode in (0, 1), done.stderr  # 1: the verdict asks for action
    findings: dict[str, Any] = json.loads((out / "findings.json").read_text(encoding="utf-8"))
    return findings


def judged(findings: dict[str, Any], folder: Path) -> tuple[str, list[Any]]:
    """What a reader acts on: the verdict and every item (id, severity, count, title, rows),
    with the evidence folder's path (in the commands it suggests) left out."""
    items = [
        (item["id"], item["severity"], item["count"], item["title"], item["rows"])
        for item in findings["items"]
    ]
    text = json.dumps([findings["verdict"], items]).replace(str(folder), "EVIDENCE")
    verdict, shown = json.loads(text)
    return verdict, shown


def with_section(manifest: Path, section: str, body: str) -> None:
    """``manifest`` with its ``[section]`` replaced by ``body``."""
    text = manifest.read_text(encoding="utf-8")
    pattern = re.compile(rf"^\[{section}\]\n(?:(?!\[).*\n)*", re.MULTILINE)
    assert pattern.search(text), f"no [{section}] in {manifest}"
    manifest.write_text(pattern.sub(f"[{section}]\n{body}\n\n", text), encoding="utf-8")


@pytest.mark.xdist_group("chdb")
def test_spans_in_clickhouse_give_the_findings_of_their_otlp_file(tmp_path: Path) -> None:
    import clickhouse_connect

    files = tmp_path / "files"
    shutil.copytree(ROOT / "fixtures" / "runaway", files)
    live = tmp_path / "live"
    shutil.copytree(files, live)
    (live / "spans.otlp.jsonl").unlink()  # the findings can only come from the table
    folder = tmp_path / "chdb"
    url = f"chdb://{folder}"
    writer = clickhouse_connect.get_client(dsn=url)
    try:
        create_tables(writer, "telemetry", "otel_traces", "map")
        rows = otlp_rows(files / "spans.otlp.jsonl", "map")
        writer.insert("telemetry.otel_traces", rows, column_names=list(INSERT_COLUMNS))
    finally:
        writer.close()
    assert rows
    with_section(
        live / "evidence.toml",
        "spans",
        'url = "env:IK_TEST_SPANS_URL"\ntable = "telemetry.otel_traces"',
    )

    from_file = run("runaway", files / "evidence.toml", tmp_path / "out-file", {})
    from_table = run(
        "runaway", live / "evidence.toml", tmp_path / "out-live", {"IK_TEST_SPANS_URL": url}
    )

    assert judged(from_table, live) == judged(from_file, files)
    ids = [item[0] for item in judged(from_file, files)[1]]
    assert "runaway/source-disagreements" in ids  # the spans are one of the compared sources


def _replay_into_redis(store: Path, url: str, prefix: str) -> int:
    """Every session of ADK Python's ``store`` (a SQLite session database), event by event,
    through ADK's ``RedisSessionService``; the number of events written."""
    import redis.asyncio
    from google.adk.integrations.redis import RedisSessionService, RedisSessionServiceConfig
    from google.adk.sessions import DatabaseSessionService

    async def replay() -> int:
        source = DatabaseSessionService(f"sqlite+aiosqlite:///{store}")
        client = redis.asyncio.from_url(url, decode_responses=True)
        target = RedisSessionService(
            RedisSessionServiceConfig(key_prefix=prefix, ttl_seconds=0), redis_client=client
        )
        written = 0
        apps = ("shop", "expenses", "invoicing", "support", "travel")
        for app in apps:
            listed = await source.list_sessions(app_name=app)
            for brief in listed.sessions:
                whole = await source.get_session(
                    app_name=app, user_id=brief.user_id, session_id=brief.id
                )
                assert whole is not None
                session = await target.create_session(
                    app_name=app, user_id=whole.user_id, session_id=whole.id
                )
                for event in whole.events:
                    await target.append_event(session, event)
                    written += 1
        await client.aclose()
        await source.close()
        return written

    return asyncio.run(replay())


def _dump(url: str, prefix: str, path: Path) -> None:
    """The dump ``docs/producing-evidence.md``'s ``redis-cli`` loop writes: a line of key,
    EXPIRETIME and value per key."""
    import redis

    server = redis.Redis.from_url(url, decode_responses=True)
    with path.open("w", encoding="utf-8") as out:
        for key in sorted(server.scan_iter(match=f"{prefix}*")):
            record = {"key": key, "expiretime": server.expiretime(key), "value": server.get(key)}
            out.write(json.dumps(record) + "\n")
    server.close()


@pytest.mark.adk
@pytest.mark.xdist_group("redis_sessions")
def test_sessions_in_redis_give_the_findings_of_their_dump(redis_url: str, tmp_path: Path) -> None:
    prefix = "ik:e2e:"
    source = tmp_path / "source"
    shutil.copytree(ROOT / "fixtures" / "vanished_state-adk-python", source)
    written = _replay_into_redis(source / "sessions.db", redis_url, prefix)
    assert written > 0
    dumped, live = tmp_path / "dumped", tmp_path / "live"
    for folder in (dumped, live):
        shutil.copytree(source, folder)
        (folder / "sessions.db").unlink()
    _dump(redis_url, prefix, dumped / "redis.jsonl")
    with_section(
        dumped / "evidence.toml",
        "events",
        f'path = "redis.jsonl"\nformat = "adk-redis"\ntable = "{prefix}"',
    )
    with_section(
        live / "evidence.toml",
        "events",
        f'url = "env:IK_TEST_REDIS_URL"\nformat = "adk-redis"\ntable = "{prefix}"',
    )

    from_dump = run("overview", dumped / "evidence.toml", tmp_path / "out-dump", {})
    from_live = run(
        "overview", live / "evidence.toml", tmp_path / "out-live", {"IK_TEST_REDIS_URL": redis_url}
    )

    assert judged(from_live, live) == judged(from_dump, dumped)
    assert any(item["count"] for item in from_dump["items"])  # the card found something
