"""ADK Python's ``RedisSessionService`` store (``adk-redis``), read live from a real
``redis-server`` (a throwaway one per module, from ``scripts/testdb.py redis-up``) and from
dumps: keys the service did not write are rejects naming the key, filters narrow the keys read,
URLs are refused as every URL of a manifest is. tests/adk/test_redis_conformance.py checks the
frames of a real ADK agent run, the read-only commands and the expiry warning."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import incidentkit
from incidentkit.errors import ManifestError, SourceError
from incidentkit.evidence import Evidence

pytestmark = [pytest.mark.adk, pytest.mark.xdist_group("redis_sessions")]  # one server
PREFIX = "ik:unit:"


def _server(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url, decode_responses=True)


def _store(url: str, prefix: str, app: str, session_id: str, text: str) -> None:
    """One session of ``app`` with a user turn, written by ADK's RedisSessionService."""
    import redis.asyncio
    from google.adk.events import Event, EventActions
    from google.adk.integrations.redis import RedisSessionService, RedisSessionServiceConfig
    from google.genai import types

    async def write() -> None:
        client = redis.asyncio.from_url(url, decode_responses=True)
        config = RedisSessionServiceConfig(key_prefix=prefix, ttl_seconds=600)
        service = RedisSessionService(config, redis_client=client)
        session = await service.create_session(
            app_name=app, user_id="u-1", session_id=session_id, state={"app:region": "eu"}
        )
        event = Event(
            author="user",
            invocation_id=f"e-{session_id}",
            content=types.Content(role="user", parts=[types.Part(text=text)]),
            actions=EventActions(state_delta={"ticket": text, "user:tier": "gold"}),
        )
        await service.append_event(session, event)
        await client.aclose()

    asyncio.run(write())


def _open(folder: Path, events: str, url: str = "", **filters: Any) -> Evidence:
    (folder / "evidence.toml").write_text(f"[events]\n{events}\n", encoding="utf-8")
    return incidentkit.open_evidence(folder, environ={"IK_REDIS": url}, **filters)


def _live(folder: Path, url: str, prefix: str = PREFIX, **filters: Any) -> Evidence:
    events = f'format = "adk-redis"\nurl = "env:IK_REDIS"\ntable = "{prefix}"'
    return _open(folder, events, url, **filters)


def test_keys_the_service_did_not_write_are_rejects_naming_the_key(
    redis_url: str, tmp_path: Path
) -> None:
    prefix = "ik:odd:"
    _store(redis_url, prefix, "support", "s-1", "hello")
    server = _server(redis_url)
    good = server.get(f"{prefix}support:u-1:s-1")
    server.hset(f"{prefix}support:u-1:hash", "field", "value")
    server.set(f"{prefix}support:u-1:broken", "{oops")
    server.set(f"{prefix}support:u-1:moved", good)  # the document spells another key
    server.set("elsewhere:support:u-1:s-9", good)  # outside the prefix: never read
    server.close()
    evidence = _live(tmp_path, redis_url, prefix)
    assert list(evidence.events["text"]) == ["hello"]
    reasons = dict(zip(evidence.rejects["location"], evidence.rejects["reason"], strict=True))
    assert set(reasons) == {
        f"{prefix}support:u-1:hash",
        f"{prefix}support:u-1:broken",
        f"{prefix}support:u-1:moved",
    }
    assert "holds a hash, not a string" in reasons[f"{prefix}support:u-1:hash"]
    assert "not a session document" in reasons[f"{prefix}support:u-1:broken"]
    assert f"names another key ({prefix}support:u-1:s-1)" in reasons[f"{prefix}support:u-1:moved"]


def test_an_app_filter_reads_only_that_apps_keys(redis_url: str, tmp_path: Path) -> None:
    prefix = "ik:apps:"
    _store(redis_url, prefix, "support", "s-1", "hello")
    _store(redis_url, prefix, "billing", "s-2", "invoice")
    server = _server(redis_url)
    before = server.info("commandstats")["cmdstat_get"]["calls"]
    evidence = _live(tmp_path, redis_url, prefix, app_name="billing")
    assert list(evidence.events["text"]) == ["invoice"]
    state = evidence.session_state
    assert set(state["app_name"]) == {"billing"}
    assert sorted(state["key"]) == ["app:region", "ticket", "user:tier"]
    gets = server.info("commandstats")["cmdstat_get"]["calls"] - before
    server.close()
    assert gets == 3  # billing's session, user state and app state: none of support's keys


def test_the_key_prefix_is_the_manifests_table(redis_url: str, tmp_path: Path) -> None:
    prefix = "ik:own:"
    _store(redis_url, prefix, "support", "s-1", "hello")
    assert list(_live(tmp_path, redis_url, prefix).events["text"]) == ["hello"]
    assert "hello" not in set(_live(tmp_path, redis_url, "adk:session:").events["text"])


def test_a_redis_url_is_read_only_with_the_format(tmp_path: Path) -> None:
    evidence = _open(tmp_path, 'url = "env:IK_REDIS"', "redis://127.0.0.1:1/0")
    with pytest.raises(SourceError, match='write format = "adk-redis"'):
        evidence.load_all()


def test_a_server_that_does_not_answer_is_an_error_that_hides_the_password(
    tmp_path: Path,
) -> None:
    url = "redis://reader:s3cret-Pa55word@127.0.0.1:1/0"
    evidence = _open(tmp_path, 'format = "adk-redis"\nurl = "env:IK_REDIS"', url)
    with pytest.raises(SourceError) as raised:
        evidence.load_all()
    said = str(raised.value)
    assert "cannot read the Redis session store" in said and "env:IK_REDIS" in said
    assert "s3cret-Pa55word" not in said


@pytest.mark.parametrize(
    "url",
    ["redis://:pw-in-git@cache:6379/0", "rediss://reader:pw@cache/1", "unix:///r.sock?password=x"],
)
def test_a_literal_password_in_the_manifest_is_refused(tmp_path: Path, url: str) -> None:
    (tmp_path / "evidence.toml").write_text(
        f'[events]\nformat = "adk-redis"\nurl = "{url}"\n', encoding="utf-8"
    )
    with pytest.raises(ManifestError, match="literal password"):
        incidentkit.open_evidence(tmp_path)


def test_a_dump_reads_its_records_and_rejects_the_rest_at_their_line(
    redis_url: str, tmp_path: Path
) -> None:
    prefix = "ik:dump:"
    _store(redis_url, prefix, "support", "s-1", "hello")
    server = _server(redis_url)
    records = [
        {"key": k, "value": server.get(k), "expiretime": server.expiretime(k)}
        for k in sorted(server.scan_iter(f"{prefix}*"))
    ]
    server.close()
    records += [
        {"key": f"{prefix}support:u-1:h", "type": "hash", "value": None},
        {"key": f"{prefix}support:u-1:gone", "value": None, "expiretime": -2},
        {"key": "other:x", "value": "{}"},
        ["not", "a", "record"],
    ]
    (tmp_path / "dump.json").write_text(json.dumps(records, indent=1), encoding="utf-8")
    evidence = _open(tmp_path, f'format = "adk-redis"\npath = "dump.json"\ntable = "{prefix}"')
    assert list(evidence.events["text"]) == ["hello"]
    assert sorted(evidence.session_state["key"]) == ["app:region", "ticket", "user:tier"]
    reasons = dict(zip(evidence.rejects["location"], evidence.rejects["reason"], strict=True))
    assert set(reasons) == {"dump.json:[3]", "dump.json:[5]", "dump.json:[6]"}
    assert "holds a hash" in reasons["dump.json:[3]"]
    assert f"does not start with the key prefix {prefix}" in reasons["dump.json:[5]"]
    assert "not a Redis dump record" in reasons["dump.json:[6]"]
    assert evidence.warnings["reason"].str.contains("1 keys of the dump have no value").any()
