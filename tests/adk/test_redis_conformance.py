"""Conformance with the real google-adk on Redis: ADK Python's own ``RedisSessionService``
stores the scenario (mirrored by the same run into ``SqliteSessionService``,
:mod:`.mirrored_store`) in a real ``redis-server`` (a throwaway one per module, from
``scripts/testdb.py redis-up``). The kit reads it live, and from dumps of its keys; it must
load, with no reject, exactly the frames it loads from the SQLite store, send the server only
read-only commands, and change no key, value or expiry.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import incidentkit
from incidentkit.evidence import Evidence

from .mirrored_store import build_mirrored
from .test_conformance import _missing_extra
from .test_mongodb_conformance import assert_same_frames

pytestmark = [pytest.mark.adk, pytest.mark.xdist_group("redis_conformance")]  # one server, one run
PREFIX = "ik:conformance:"
TTL = 3600


@pytest.fixture(scope="module")
def stored(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """The scenario stored by RedisSessionService; the world and its folder (``adk.db`` holds
    the SQLite mirror)."""
    missing = _missing_extra()
    if missing is None and importlib.util.find_spec("redis") is None:
        missing = "the Redis conformance test needs redis-py: pip install -e '.[adk]'"
    if missing:
        pytest.fail(missing, pytrace=False)
    import redis.asyncio
    from google.adk.integrations.redis import RedisSessionService, RedisSessionServiceConfig

    client = redis.asyncio.from_url(redis_url, decode_responses=True)
    config = RedisSessionServiceConfig(key_prefix=PREFIX, ttl_seconds=TTL)
    service = RedisSessionService(config, redis_client=client)
    folder = tmp_path_factory.mktemp("adk-redis")
    return build_mirrored(service, folder, closing=client.aclose), folder


def _open(folder: Path, events: str, url: str = "", **filters: Any) -> Evidence:
    (folder / "evidence.toml").write_text(
        f"allow_outside = true\n\n[events]\n{events}\n", encoding="utf-8"
    )
    return incidentkit.open_evidence(folder, environ={"IK_REDIS": url}, **filters)


def _live(folder: Path, url: str, **filters: Any) -> Evidence:
    return _open(
        folder, f'format = "adk-redis"\nurl = "env:IK_REDIS"\ntable = "{PREFIX}"', url, **filters
    )


def _sqlite(folder: Path, **filters: Any) -> Evidence:
    return _open(folder, f"path = {json.dumps(str(folder / 'adk.db'))}", **filters)


def _server(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url, decode_responses=True)


def _keys(url: str) -> dict[str, tuple[str, int]]:
    """Every key with its value and EXPIRETIME (absolute: a rewrite would move it)."""
    server = _server(url)
    try:
        return {k: (server.get(k), server.expiretime(k)) for k in server.scan_iter(f"{PREFIX}*")}
    finally:
        server.close()


def _calls(url: str) -> dict[str, int]:
    server = _server(url)
    try:
        stats = server.info("commandstats")
    finally:
        server.close()
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def test_a_live_read_loads_the_frames_of_the_same_run_in_sqlite(
    stored: tuple[Any, Path], redis_url: str, tmp_path: Path
) -> None:
    world, folder = stored
    got = _live(tmp_path, redis_url)
    assert_same_frames(got, _sqlite(folder), "adk-redis")
    assert set(got.events["event_id"]) == {event.id for event in world.events}
    for session in world.sessions:  # the stored state is what get_session merges
        rows = got.session_state
        mine = rows[rows["session_id"].isna() | rows["session_id"].eq(session.id)]
        assert dict(zip(mine["key"], mine["value"], strict=True)) == session.state
    assert set(got.session_state["source"]) == {"session state", "app_state key", "user_state key"}


def test_the_read_sends_only_read_only_commands_and_changes_nothing(
    stored: tuple[Any, Path], redis_url: str, tmp_path: Path
) -> None:
    _, folder = stored
    keys, before = _keys(redis_url), _calls(redis_url)
    sessions = sorted(_sqlite(folder).events["session_id"].unique())
    _live(tmp_path, redis_url).load_all()
    _live(tmp_path, redis_url, session_ids=[sessions[0]]).load_all()
    after = _calls(redis_url)
    assert _keys(redis_url) == keys and len(keys) == 4  # 2 sessions, the app's and user's state
    sent = {name for name, calls in after.items() if calls > before.get(name, 0)}
    server = _server(redis_url)
    try:
        info = server.command()
    finally:
        server.close()
    writes = {name for name in sent if "write" in info.get(name, {}).get("flags", ["write"])}
    assert not writes, f"the kit sent write commands: {writes}"
    # the two reads above, and this test's own EXPIRETIME/SCAN/INFO/COMMAND calls
    assert (
        {"scan", "get", "pttl"}
        <= sent
        <= {"scan", "get", "pttl", "hello", "info", "command", "expiretime", "client"}
    )


def test_the_load_says_when_the_evidence_expires(
    stored: tuple[Any, Path], redis_url: str, tmp_path: Path
) -> None:
    got = _live(tmp_path, redis_url)
    warned = got.warnings[got.warnings["reason"].str.contains("expire")]
    assert len(warned) == 1
    reason = warned["reason"].iloc[0]
    assert "incidentkit snapshot" in reason and "2 Redis session keys" in reason
    server = _server(redis_url)
    sessions = [k for k in _keys(redis_url) if ":app_state:" not in k and ":user_state:" not in k]
    expiries = {k: server.pexpiretime(k) / 1000 for k in sessions}  # milliseconds
    server.close()
    earliest = min(expiries.values())
    assert expiries[warned["location"].iloc[0]] - earliest < 0.05  # that key, or one as early
    said = pd.Timestamp(re.search(r"vanish at (\S+ \S+) UTC", reason)[1], tz="UTC")  # type: ignore[index]
    assert abs(said.timestamp() - earliest) <= 2


def test_filters_read_the_sessions_they_name_and_their_users_state(
    stored: tuple[Any, Path], redis_url: str, tmp_path: Path
) -> None:
    world, folder = stored
    second = world.sessions[1]
    before = _calls(redis_url)
    got = _live(tmp_path, redis_url, session_ids=[second.id])
    got.load_all()
    gets = _calls(redis_url)["get"] - before.get("get", 0)
    assert gets == 3  # the session and its app's state found by the scan, its user's by name
    assert set(got.events["event_id"]) == {event.id for event in second.events}
    assert_same_frames(got, _sqlite(folder, session_ids=[second.id]), "adk-redis")
    assert _live(tmp_path, redis_url, app_name="another_app").events.empty


def _dump_with_redis_cli(url: str, path: Path) -> None:
    """The dump loop of docs/producing-evidence.md, run as written there."""
    socket = url.removeprefix("unix://")
    script = (
        f"redis-cli -s {socket} --scan --pattern '{PREFIX}*' | while IFS= read -r key; do\n"
        '  printf \'{"key":%s,"expiretime":%s,"value":%s}\\n\' \\\n'
        f'    "$(redis-cli -s {socket} --json ECHO "$key")" \\\n'
        f'    "$(redis-cli -s {socket} EXPIRETIME "$key")" \\\n'
        f'    "$(redis-cli -s {socket} --json GET "$key")"\n'
        f"done > {path}\n"
    )
    subprocess.run(["bash", "-c", script], check=True)


def test_a_dump_of_the_keys_loads_the_same_frames(
    stored: tuple[Any, Path], redis_url: str, tmp_path: Path
) -> None:
    _, folder = stored
    if shutil.which("redis-cli") is None or not redis_url.startswith("unix://"):
        pytest.skip("the redis-cli dump loop needs redis-cli and the throwaway server's socket")
    _dump_with_redis_cli(redis_url, tmp_path / "redis-dump.jsonl")
    got = _open(tmp_path, f'format = "adk-redis"\npath = "redis-dump.jsonl"\ntable = "{PREFIX}"')
    assert_same_frames(got, _sqlite(folder), "adk-redis")
    detected = _open(tmp_path, f'path = "redis-dump.jsonl"\ntable = "{PREFIX}"')
    assert_same_frames(detected, _sqlite(folder), "adk-redis")
    assert not got.warnings["reason"].str.contains("expire").any()  # a dump keeps the evidence
