"""ADK Python's ``RedisSessionService`` store, read live (read-only) or from a JSON dump, into
ADK event records.

The layout (``google.adk.integrations.redis``, ADK 2.x: ``RedisSessionService``,
``RedisSessionServiceConfig``): every key starts with ``key_prefix`` (``adk:session:`` by
default; ``table`` in ``[events]`` names another) and holds a string of JSON.

- ``<prefix><app>:<user>:<session>``: the session, ``Session.model_dump_json()``: ``id``,
  ``app_name``, ``user_id``, ``state`` (the session's own keys), ``events`` (each whole, in
  snake_case, times in epoch seconds) and ``last_update_time``;
- ``<prefix>app_state:<app>`` and ``<prefix>user_state:<app>:<user>``: the app's and the user's
  state, their keys stored without ``app:``/``user:``.

Every write sets the key's TTL (``ttl_seconds``: 7 days by default, 0 for none), so a session
is gone a TTL after its last write: a live read warns when the earliest session key read
expires. What a key holds, not its name, says what it is (an app named ``app_state`` makes
session keys that look like state keys); a session whose key is not the one its document
spells is a reject, as ``list_sessions`` skips it.

A live read sends only the read-only commands of :data:`READ_ONLY` (``SCAN``, ``GET``,
``PTTL``, ``TYPE``): :class:`_ReadOnly`, the one way the reader reaches the server, has no
other. The
filters narrow what is scanned where the key layout allows: an app filter scans that app's
keys only; a session filter reads only the sessions whose key ends in their id, and then only
their users' state. The time window cannot narrow keys (times live inside the documents).

A dump (``format = "adk-redis"`` with ``path``/``paths``) is JSON lines (or a JSON array) of
``{"key": ..., "value": ..., "expiretime": ...}``: the key, its string value (``null`` for a
key gone before it was read), and ``EXPIRETIME`` (epoch seconds; -1 for none), as the
``redis-cli`` loop in docs/producing-evidence.md writes it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import msgspec
import pandas as pd

from incidentkit.errors import ManifestError, SourceError
from incidentkit.frames import StateScope
from incidentkit.manifest import Filters, SourceSpec
from incidentkit.redact import scrub_text
from incidentkit.sources.events import stored_state
from incidentkit.sources.events.adk_events import Batch, Origin
from incidentkit.sources.json_text import JSON_ERRORS, json_failure, loads
from incidentkit.sources.loaded import RejectSink

if TYPE_CHECKING:
    import redis

FORMAT = "adk-redis"
ORIGIN = Origin(FORMAT, "s", python=True)
DEFAULT_PREFIX = "adk:session:"
APP_STATE = "app_state:"
USER_STATE = "user_state:"
SCHEMES = ("redis", "rediss", "unix")
"""URL schemes redis-py reads (``unix://`` is a socket path)."""
READ_ONLY = ("SCAN", "GET", "PTTL", "TYPE")
"""Every command a live read sends (:class:`_ReadOnly` has a method for each, and no other)."""
_SCAN_COUNT = 1000
_PIPELINE = 500
"""Keys read per round trip (a GET and a PTTL each)."""
WHAT = "events"


def is_redis_url(url: str) -> bool:
    """Whether ``url`` names a Redis server (``redis://``, ``rediss://``, ``unix://``)."""
    return url.partition("://")[0].lower() in SCHEMES and "://" in url


def key_prefix(spec: SourceSpec) -> str:
    """The key prefix of the store: ``table`` in ``[events]``, else ADK's default."""
    if spec.columns:
        raise ManifestError(
            "[events] columns do not apply to a Redis session store",
            value=dict(spec.columns),
            fix=f'remove them; table = "<key_prefix>" names the prefix ({DEFAULT_PREFIX} when '
            "absent)",
        )
    return spec.table or DEFAULT_PREFIX


class _Session(msgspec.Struct, gc=False):
    """A session document as ``RedisSessionService`` stores it; events kept as their JSON."""

    id: str
    app_name: str
    user_id: str
    events: list[msgspec.Raw]
    state: dict[str, Any] = msgspec.field(default_factory=dict)
    last_update_time: float | None = None


_SESSION = msgspec.json.Decoder(_Session)


@dataclass
class Store:
    """What the keys read so far hold: events of the sessions not yet handed over, the state
    rows, the (app, user) pairs of the sessions, and the earliest expiry of a session key."""

    prefix: str
    values: list[Any] = field(default_factory=list)
    meta: dict[str, list[Any]] = field(
        default_factory=lambda: {k: [] for k in ("location", "app_name", "user_id", "session_id")}
    )
    states: list[pd.DataFrame] = field(default_factory=list)
    pairs: set[tuple[str, str]] = field(default_factory=set)
    state_keys: set[str] = field(default_factory=set)
    expiring: list[tuple[pd.Timestamp, str]] = field(default_factory=list)
    vanished: int = 0

    def take(
        self, key: str, value: Any, location: str, sink: RejectSink, expires: pd.Timestamp | None
    ) -> None:
        """File one key's value: a session's events and state, or an app's or user's state;
        anything else is a reject at ``location``."""
        rest = key.removeprefix(self.prefix)
        if not key.startswith(self.prefix):
            sink.add(
                location,
                f"the key does not start with the key prefix {self.prefix} (give table = "
                '"<key_prefix>" in [events] for a store configured with another)',
                key,
            )
            return
        if isinstance(value, bytes):
            try:
                value = value.decode("utf-8")
            except UnicodeDecodeError:
                sink.add(location, "the value is not UTF-8 text", repr(value[:200]))
                return
        if isinstance(value, str):
            try:
                session = _SESSION.decode(value)
            except msgspec.DecodeError as err:
                self._other(key, rest, value, location, sink, str(err))
                return
            self._session(key, session, location, sink, expires)
        elif isinstance(value, dict):  # a dump that kept the value as an object
            self._other(key, rest, value, location, sink, "not a session document")
        else:
            sink.add(location, "the value is neither JSON text nor an object", str(value)[:500])

    def _session(
        self,
        key: str,
        session: _Session,
        location: str,
        sink: RejectSink,
        expires: pd.Timestamp | None,
    ) -> None:
        spelled = f"{self.prefix}{session.app_name}:{session.user_id}:{session.id}"
        if key != spelled:
            sink.add(
                location,
                f"the session document names another key ({spelled}): RedisSessionService "
                "does not read it there",
                key,
            )
            return
        self.pairs.add((session.app_name, session.user_id))
        if expires is not None:
            self.expiring.append((expires, key))
        for i, raw in enumerate(session.events):
            self.values.append(bytes(raw).decode("utf-8"))
            self.meta["location"].append(f"{location}.events[{i}]")
            self.meta["app_name"].append(session.app_name)
            self.meta["user_id"].append(session.user_id)
            self.meta["session_id"].append(session.id)
        self.states.append(
            stored_state.rows(
                session.state,
                app_name=session.app_name,
                user_id=session.user_id,
                session_id=session.id,
                scope=None,
                updated_at=session.last_update_time,
                source="session state",
                location=location,
                sink=sink,
            )
        )

    def _other(
        self, key: str, rest: str, value: Any, location: str, sink: RejectSink, why: str
    ) -> None:
        """A value that is no session document: an app's or a user's state, or a reject."""
        scope = (
            StateScope.APP
            if rest.startswith(APP_STATE)
            else StateScope.USER
            if rest.startswith(USER_STATE)
            else None
        )
        if scope is None:
            sink.add(
                location, f"not a session document of RedisSessionService: {why}", _shown(value)
            )
            return
        if isinstance(value, str):
            try:
                value = loads(value)
            except JSON_ERRORS as err:
                sink.add(location, f"unreadable state: {json_failure(err)}", value[:500])
                return
        self.state_keys.add(key)
        if scope is StateScope.APP:
            app, user = rest.removeprefix(APP_STATE), ""
        else:
            app, user = self._split_user(rest.removeprefix(USER_STATE))
        self.states.append(
            stored_state.scoped_rows(
                value,
                scope,
                app_name=app,
                user_id=user,
                source=f"{rest.split(':', 1)[0]} key",
                location=location,
                sink=sink,
            )
        )

    def _split_user(self, rest: str) -> tuple[str, str]:
        """``<app>:<user>`` of a user-state key: a session's pair it spells, else split at the
        first ``:``."""
        for app, user in self.pairs:
            if rest == f"{app}:{user}":
                return app, user
        app, _, user = rest.partition(":")
        return app, user

    def batch(self) -> Batch | None:
        """The events taken since the last batch (None when there are none)."""
        if not self.values:
            return None
        batch = Batch(
            pd.Series(self.values, dtype=object), pd.DataFrame(self.meta, dtype=object), ORIGIN
        )
        self.values = []
        self.meta = {k: [] for k in self.meta}
        return batch

    def expiry_warning(self, sink: RejectSink, now: pd.Timestamp) -> None:
        """Say when the earliest session key read expires, and what to do before then."""
        if not self.expiring:
            return
        when, key = min(self.expiring)
        left = when - now
        hours = max(left.total_seconds(), 0) / 3600
        sink.warn(
            key,
            f"{len(self.expiring)} Redis session keys read expire (TTL): the evidence starts "
            f"to vanish at {when:%Y-%m-%d %H:%M:%S} UTC, in {hours:.1f} h (this key first). "
            "Run incidentkit snapshot --out <folder> now to keep the frames (docs/snapshots.md)",
        )


def _shown(value: Any) -> str:
    return (value if isinstance(value, str) else str(value))[:500]


# -- a dump ------------------------------------------------------------------------------------


def is_dump(records: list[Any]) -> bool:
    """Whether the first records are a Redis dump: objects with a text ``key`` and a
    ``value``, and no ``_id`` (a MongoDB document)."""
    sample = [r for r in records[:20] if isinstance(r, dict)]
    return bool(sample) and all(
        isinstance(r.get("key"), str) and "value" in r and "_id" not in r for r in sample
    )


def read_dump(
    records: list[Any], locations: list[str], store: Store, sink: RejectSink
) -> Batch | None:
    """File one chunk of a dump's records; the events of its sessions as one batch."""
    for record, location in zip(records, locations, strict=True):
        if not isinstance(record, dict) or not isinstance(record.get("key"), str):
            sink.add(
                location,
                'not a Redis dump record ({"key", "value", "expiretime"})',
                str(record)[:500],
            )
            continue
        kind = record.get("type", "string")
        if kind != "string":
            sink.add(
                location,
                f"the key holds a {kind}, not a string: RedisSessionService writes strings only",
                record["key"],
            )
            continue
        if record.get("value") is None:
            store.vanished += 1
            continue
        store.take(record["key"], record["value"], location, sink, None)
    return store.batch()


# -- a live server -----------------------------------------------------------------------------


class _ReadOnly:
    """A redis-py client seen through the read-only commands of :data:`READ_ONLY`: the only
    calls a live read makes."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client

    def scan(self, pattern: str) -> Iterator[bytes]:
        """Every key ``SCAN MATCH pattern`` finds (a key may come twice: SCAN's own rule)."""
        cursor = 0
        while True:
            answer = cast(tuple[int, list[bytes]], self._client.scan(cursor, pattern, _SCAN_COUNT))
            cursor, keys = answer
            yield from keys
            if int(cursor) == 0:
                return

    def values(self, keys: list[bytes]) -> list[Any]:
        """``GET`` and ``PTTL`` of each key, in one round trip (a pipeline, no MULTI); an error
        answer (a key of another type) comes back as its exception."""
        pipe = self._client.pipeline(transaction=False)
        for key in keys:
            pipe.get(key)
            pipe.pttl(key)
        return list(pipe.execute(raise_on_error=False))

    def types(self, keys: list[bytes]) -> list[Any]:
        """``TYPE`` of each key, in one round trip."""
        pipe = self._client.pipeline(transaction=False)
        for key in keys:
            pipe.type(key)
        return list(pipe.execute(raise_on_error=False))


def escape_glob(text: str) -> str:
    """``text`` matching only itself in a ``SCAN MATCH`` pattern (as ADK escapes it)."""
    return "".join("\\" + c if c in "\\*?[]" else c for c in text)


def scans(prefix: str, filters: Filters) -> list[str]:
    """The ``SCAN MATCH`` patterns that find the keys ``filters`` may need."""
    p = escape_glob(prefix)
    if filters.app_name is None:
        return [f"{p}*"]
    app = escape_glob(filters.app_name)
    if filters.session_ids:  # their users' state is read by name once the sessions are
        return [f"{p}{app}:*"]
    return [f"{p}{app}:*", f"{p}{USER_STATE}{app}:*"]


def wanted(key: str, prefix: str, filters: Filters) -> bool:
    """Whether a scanned key is worth reading under a session filter: a session key ending in
    one of the ids, or an app's state (users' state is read for the sessions found)."""
    if not filters.session_ids:
        return True
    rest = key.removeprefix(prefix)
    if rest.startswith(APP_STATE):
        return True
    return any(rest.endswith(":" + session) for session in filters.session_ids)


def read_live(
    spec: SourceSpec,
    filters: Filters,
    environ: Mapping[str, str] | None,
    sink: RejectSink,
    states: list[pd.DataFrame],
) -> Iterator[Batch]:
    """The events of a live store, a batch per round trip of keys, as the normaliser draws
    them; the stored state goes to ``states`` once every key is read."""
    import redis

    prefix = key_prefix(spec)
    shown = spec.location()
    url = spec.url(environ)
    failed = _failure(shown)
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=10, socket_timeout=60)
    except (ValueError, TypeError, redis.RedisError) as err:
        raise failed(err, "not a Redis URL redis-py reads") from err
    store = Store(prefix)
    reader = _ReadOnly(client)
    try:
        seen: set[bytes] = set()
        pending: list[bytes] = []
        for pattern in scans(prefix, filters):
            for key in reader.scan(pattern):
                if key in seen or not wanted(_text(key), prefix, filters):
                    continue
                seen.add(key)
                pending.append(key)
                if len(pending) >= _PIPELINE:
                    yield from _read_keys(reader, pending, store, sink)
                    pending = []
        yield from _read_keys(reader, pending, store, sink)
        named = [f"{prefix}{APP_STATE}{filters.app_name}"] if filters.app_name is not None else []
        if filters.session_ids:  # the users of the sessions found, now that they are known
            named += [f"{prefix}{USER_STATE}{app}:{user}" for app, user in sorted(store.pairs)]
        unread = [key for key in dict.fromkeys(k.encode() for k in named) if key not in seen]
        yield from _read_keys(reader, unread, store, sink, state_only=True)
    except redis.RedisError as err:
        raise failed(err, "the read failed") from err
    finally:
        client.close()
    store.expiry_warning(sink, pd.Timestamp.now(tz="UTC"))
    if store.vanished:
        sink.warn(
            shown,
            f"{store.vanished} keys expired or were deleted between the scan and their read",
        )
    states.append(stored_state.combined(store.states, filters))


def _read_keys(
    reader: _ReadOnly,
    keys: list[bytes],
    store: Store,
    sink: RejectSink,
    *,
    state_only: bool = False,
) -> Iterator[Batch]:
    """Read ``keys`` (GET and PTTL each, in one round trip) into ``store``; their events as
    one batch. ``state_only``: keys named for their state, where an absent one is no loss."""
    if not keys:
        return
    now = pd.Timestamp.now(tz="UTC")
    answers = reader.values(keys)
    wrong = []
    for i, key in enumerate(keys):
        text = _text(key)
        value, ttl = answers[2 * i], answers[2 * i + 1]
        if isinstance(value, Exception):
            wrong.append((key, text, value))
            continue
        if value is None:
            store.vanished += 0 if state_only else 1
            continue
        expires = (
            now + pd.Timedelta(milliseconds=int(ttl)) if isinstance(ttl, int) and ttl >= 0 else None
        )
        store.take(text, value, text, sink, expires)
    if wrong:
        types = reader.types([key for key, _, _ in wrong])
        for (_, text, err), kind in zip(wrong, types, strict=True):
            said = _text(kind) if isinstance(kind, bytes | str) else "value"
            sink.add(
                text,
                f"the key holds a {said}, not a string: RedisSessionService writes strings only",
                scrub_text(str(err))[:200],
            )
    batch = store.batch()
    if batch is not None:
        yield batch


def _text(value: Any) -> str:
    """A key or a type name as text (a key that is not UTF-8 shown with its bytes escaped)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="backslashreplace")
    return str(value)


def _failure(shown: str) -> Callable[[Exception, str], SourceError]:
    def failed(err: Exception, what: str) -> SourceError:
        return SourceError(
            f"{WHAT} {shown}: cannot read the Redis session store ({what}: "
            f"{type(err).__name__}: {scrub_text(str(err))[:300]})",
            value=shown,
            fix="check that the variable holds redis://[user[:password]@]host:port/db (or "
            "rediss://, unix:///path.sock?db=N) of a server that answers, or read a dump of the "
            "store instead (docs/producing-evidence.md)",
        )

    return failed
