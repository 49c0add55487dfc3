"""The ``session_state`` frame: the state ADK session stores and session documents keep.

Real stores only: ADK Python's DatabaseSessionService (schema v1) on SQLite and PostgreSQL,
SqliteSessionService files, ``adk run --save_session`` and ADK Java ``Session.toJson()``
documents, all read through ``open_evidence`` and an ``evidence.toml`` in ``tmp_path``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import sqlalchemy as sa

import incidentkit as ik
from incidentkit import store
from incidentkit.evidence import Evidence
from incidentkit.frames import build, spec_of

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "fixtures"
SQLITE_SERVICE_DDL = ROOT / "tests" / "data" / "events" / "sqlite_session_service.sql"
COLUMNS = spec_of("session_state").names
ORDER = ["source", "app_name", "user_id", "session_id", "key"]
ENV = "IK_SESSION_STATE_DB"

# -- a store's logical content -----------------------------------------------------------------

T_S1 = pd.Timestamp("2026-11-29T14:05:01.250Z")
T_S2 = pd.Timestamp("2026-11-29T14:06:02.500Z")
T_S3 = pd.Timestamp("2026-11-29T14:07:03.750Z")
T_APP = pd.Timestamp("2026-11-29T13:00:00Z")
T_U1 = pd.Timestamp("2026-11-29T13:10:00.125Z")
T_U1B = pd.Timestamp("2026-11-29T13:20:00Z")


@dataclass(frozen=True)
class Content:
    """What a session service keeps: sessions, app and user states (keys unprefixed)."""

    sessions: Sequence[tuple[str, str, str, Any, pd.Timestamp]]  # app, user, id, state, time
    apps: Sequence[tuple[str, Any, pd.Timestamp]] = ()
    users: Sequence[tuple[str, str, Any, pd.Timestamp]] = ()


CONTENT = Content(
    sessions=[
        ("shop", "u1", "s1", {"cart": ["kettle", "towel"], "gift_note": None, "n": 3}, T_S1),
        ("shop", "u2", "s2", {"coupon_code": "SPRING5"}, T_S2),
        ("billing", "u1", "s3", {}, T_S3),
    ],
    apps=[("shop", {"banner": "sale", "limits": {"max": 2}}, T_APP)],
    users=[("shop", "u1", {"tier": "gold"}, T_U1), ("billing", "u1", {"tier": "silver"}, T_U1B)],
)


def expected(content: Content) -> pd.DataFrame:
    """The frame ``content`` should load as, written out row by row (sorted by ORDER)."""
    rows: list[tuple[Any, ...]] = []
    for app, user, sid, state, at in content.sessions:
        rows += [(app, user, sid, "session", k, v, "sessions.state", at) for k, v in state.items()]
    for app, user, state, at in content.users:
        rows += [
            (app, user, None, "user", "user:" + k, v, "user_states.state", at)
            for k, v in state.items()
        ]
    for app, state, at in content.apps:
        rows += [
            (app, None, None, "app", "app:" + k, v, "app_states.state", at)
            for k, v in state.items()
        ]
    records = [dict(zip(COLUMNS, row, strict=True)) for row in rows]
    return _sorted(build("session_state", records))


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(ORDER, na_position="first", kind="stable").reset_index(drop=True)


def _naive(stamp: pd.Timestamp) -> datetime:
    utc: datetime = stamp.tz_convert("UTC").to_pydatetime()
    return utc.replace(tzinfo=None)


def _event(sid: str, at: pd.Timestamp) -> dict[str, Any]:
    """A user event as DatabaseSessionService's ``event_data`` keeps it (snake_case)."""
    return {
        "id": f"ev-{sid}",
        "invocation_id": f"e-{sid}",
        "author": "user",
        "content": {"parts": [{"text": "hi"}], "role": "user"},
        "actions": {"state_delta": {}},
        "timestamp": at.timestamp(),
    }


def write_v1(url: str, content: Content) -> None:
    """A DatabaseSessionService schema-v1 store (naive UTC DATETIME; JSONB on PostgreSQL)."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        store.create_tables(engine, store.adk_python_metadata)
        store.insert_rows(
            engine, store.adk_internal_metadata, [{"key": "schema_version", "value": "1"}]
        )
        store.insert_rows(
            engine,
            store.adk_sessions,
            [
                {"app_name": a, "user_id": u, "id": s, "state": state}
                | {"create_time": _naive(at), "update_time": _naive(at)}
                for a, u, s, state, at in content.sessions
            ],
        )
        store.insert_rows(
            engine,
            store.adk_app_states,
            [{"app_name": a, "state": st, "update_time": _naive(at)} for a, st, at in content.apps],
        )
        store.insert_rows(
            engine,
            store.adk_user_states,
            [
                {"app_name": a, "user_id": u, "state": st, "update_time": _naive(at)}
                for a, u, st, at in content.users
            ],
        )
        store.insert_rows(
            engine,
            store.adk_events,
            [
                {"id": f"ev-{s}", "app_name": a, "user_id": u, "session_id": s}
                | {"invocation_id": f"e-{s}", "timestamp": _naive(at), "event_data": _event(s, at)}
                for a, u, s, _, at in content.sessions
            ],
        )
    finally:
        engine.dispose()


def write_sqlite_service(path: Path, content: Content) -> None:
    """A SqliteSessionService file (REAL epoch seconds, state as JSON text)."""
    text = json.dumps
    with sqlite3.connect(path) as db:
        db.executescript(SQLITE_SERVICE_DDL.read_text(encoding="utf-8"))
        db.executemany(
            "INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?)",
            [
                (a, u, s, text(st), at.timestamp(), at.timestamp())
                for a, u, s, st, at in content.sessions
            ],
        )
        db.executemany(
            "INSERT INTO app_states VALUES (?, ?, ?)",
            [(a, text(st), at.timestamp()) for a, st, at in content.apps],
        )
        db.executemany(
            "INSERT INTO user_states VALUES (?, ?, ?, ?)",
            [(a, u, text(st), at.timestamp()) for a, u, st, at in content.users],
        )
        db.executemany(
            "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (f"ev-{s}", a, u, s, f"e-{s}", at.timestamp(), text(_event(s, at)))
                for a, u, s, _, at in content.sessions
            ],
        )
    db.close()


def manifest(folder: Path, events: str, top: str = "") -> Path:
    """``folder/evidence.toml`` with an ``[events]`` section (``events`` is its body)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "evidence.toml"
    path.write_text(f"{top}\n[events]\n{events}\n", encoding="utf-8")
    return path


def open_sqlite(path: Path, **filters: Any) -> Evidence:
    return ik.open_evidence(
        manifest(path.parent, f'path = "{path.name}"\nformat = "adk-python-db"'), **filters
    )


def open_url(folder: Path, url: str, **filters: Any) -> Evidence:
    return ik.open_evidence(
        manifest(folder, f'url = "env:{ENV}"\nformat = "adk-python-db"'),
        environ={ENV: url},
        **filters,
    )


def state_of(ev: Evidence) -> pd.DataFrame:
    """The session_state frame, checked against the contract, sorted by ORDER."""
    frame = ev.session_state
    assert list(frame.columns) == COLUMNS
    assert {c: str(t) for c, t in frame.dtypes.items()} == dict(spec_of("session_state").columns)
    return _sorted(frame)


def rejects_of(ev: Evidence) -> list[tuple[str, str]]:
    rejects = ev.rejects_of(["events"])
    return sorted(zip(rejects["location"], rejects["reason"], strict=True))


def assert_state_equal(got: pd.DataFrame, want: pd.DataFrame) -> None:
    """Equal frames, and equal values by their JSON (1, 1.0 and True differ)."""
    pd.testing.assert_frame_equal(got, want)
    dumped = [json.dumps(v, sort_keys=True) for v in got["value"]]
    assert dumped == [json.dumps(v, sort_keys=True) for v in want["value"]]


# -- 1. the fixture store ----------------------------------------------------------------------

VANISHED_PY = FIXTURES / "vanished_state-adk-python"
SHOP_SESSION = "e3e70682-c209-4cac-a29f-6fbed82c07cd"


def _fixture_table(sql: str) -> list[tuple[Any, ...]]:
    uri = f"file:{VANISHED_PY / 'sessions.db'}?mode=ro&immutable=1"
    with sqlite3.connect(uri, uri=True) as db:
        rows = db.execute(sql).fetchall()
    db.close()
    return rows


def test_the_fixture_store_gives_the_shop_sessions_stored_state() -> None:
    ev = ik.open_evidence(VANISHED_PY)
    frame = ev.session_state
    assert list(frame.columns) == COLUMNS
    assert {c: str(t) for c, t in frame.dtypes.items()} == dict(spec_of("session_state").columns)
    assert ev.rejects_of(["events"]).empty

    [(stamp,)] = _fixture_table(f"SELECT update_time FROM sessions WHERE id = '{SHOP_SESSION}'")
    shop = frame.loc[frame["session_id"].eq(SHOP_SESSION)].reset_index(drop=True)
    assert shop["key"].tolist() == ["shipping_address", "cart", "gift_note", "coupon_code"]
    assert shop["value"].tolist() == [
        "Rua Augusta 100, 1100-053 Lisboa",
        ["kettle-blue", "towel-tea"],
        None,
        "SPRING5",
    ]
    assert shop["value"][2] is None  # the stored null, not a missing key or NaN
    assert set(shop["scope"]) == {"session"}
    assert set(shop["source"]) == {"sessions.state"}
    assert set(shop["app_name"]) == {"shop"} and set(shop["user_id"]) == {"u-shopper-7"}
    assert set(shop["updated_at"]) == {pd.Timestamp(stamp, tz="UTC")}
    assert pd.Timestamp(stamp, tz="UTC") == pd.Timestamp("2026-11-29T14:31:11.607Z")

    users = frame.loc[frame["source"].eq("user_states.state")]
    stored_users = _fixture_table("SELECT app_name, user_id, state, update_time FROM user_states")
    assert stored_users, "the fixture keeps user state"
    want_users = sorted(
        (a, u, "user:" + k, json.dumps(v), pd.Timestamp(t, tz="UTC"))
        for a, u, state, t in stored_users
        for k, v in json.loads(state).items()
    )
    got_users = sorted(
        zip(
            users["app_name"],
            users["user_id"],
            users["key"],
            users["value"].map(json.dumps),
            users["updated_at"],
            strict=True,
        )
    )
    assert got_users == want_users
    assert {a for a, *_ in want_users} == {"support"}
    assert set(users["scope"]) == {"user"} and users["session_id"].isna().all()

    # Every stored key is there once, and nothing else: sessions, users and apps.
    stored_keys = sum(
        len(json.loads(state))
        for table in ("sessions", "user_states", "app_states")
        for (state,) in _fixture_table(f"SELECT state FROM {table}")
    )
    assert len(frame) == stored_keys


# -- 2. one content, three stores --------------------------------------------------------------


@pytest.mark.postgres
def test_v1_on_sqlite_and_postgresql_and_the_sqlite_service_give_equal_frames(
    tmp_path: Path, pg_url: str
) -> None:
    v1 = tmp_path / "v1" / "sessions.db"
    v1.parent.mkdir()
    write_v1(f"sqlite:///{v1}", CONTENT)
    write_v1(pg_url, CONTENT)
    service = tmp_path / "service" / "session.db"
    service.parent.mkdir()
    write_sqlite_service(service, CONTENT)

    loaded = {
        "v1 sqlite": open_sqlite(v1),
        "v1 postgresql": open_url(tmp_path / "pg", pg_url),
        "sqlite service": open_sqlite(service),
    }
    want = expected(CONTENT)
    assert len(want) == 8
    for name, ev in loaded.items():
        assert rejects_of(ev) == [], name
        got = state_of(ev)
        assert_state_equal(got, want)
        apps = got.loc[got["scope"].eq("app")]
        assert apps["key"].tolist() == ["app:banner", "app:limits"], name
        assert apps["user_id"].isna().all() and apps["session_id"].isna().all(), name
        users = got.loc[got["scope"].eq("user")]
        assert sorted(users["key"]) == ["user:tier", "user:tier"], name
        assert users["session_id"].isna().all() and users["user_id"].notna().all(), name
    formats = {name: set(ev.events["source_format"]) for name, ev in loaded.items()}
    assert formats == {
        "v1 sqlite": {"adk-python-db-v1"},
        "v1 postgresql": {"adk-python-db-v1"},
        "sqlite service": {"adk-python-sqlite"},
    }


def test_the_sqlite_service_reads_real_epoch_seconds_as_utc(tmp_path: Path) -> None:
    path = tmp_path / "session.db"
    at = pd.Timestamp("2026-11-29T14:05:01.250Z")
    write_sqlite_service(path, Content(sessions=[("shop", "u1", "s1", {"k": "v"}, at)]))
    [stamp] = open_sqlite(path).session_state["updated_at"]
    assert stamp == at


# -- 3. session documents ----------------------------------------------------------------------

STATE = {
    "cart": ["kettle"],
    "app:banner": "sale",
    "user:tier": "gold",
    "temp:quote": 12.5,
    "gift_note": None,
}
SCOPES = {"cart": "session", "app:banner": "app", "user:tier": "user"}
SCOPES |= {"temp:quote": "temp", "gift_note": "session"}


def python_document(sid: str, state: Any, *, app: str = "shop", user: str = "u7") -> dict[str, Any]:
    """``adk run --save_session``: a Python Session by alias, event times in seconds."""
    return {
        "id": sid,
        "appName": app,
        "userId": user,
        "state": state,
        "events": [
            {
                "id": f"{sid}-user",
                "invocationId": f"e-{sid}",
                "author": "user",
                "content": {"parts": [{"text": "hi"}], "role": "user"},
                "actions": {"stateDelta": {}, "artifactDelta": {}},
                "timestamp": 1795960800.25,
            },
            {
                "id": f"{sid}-reply",
                "invocationId": f"e-{sid}",
                "author": "shop_agent",
                "content": {"parts": [{"text": "hello"}], "role": "model"},
                "actions": {"stateDelta": {"cart": ["kettle"]}, "artifactDelta": {}},
                "timestamp": 1795960801.5,
            },
        ],
        "lastUpdateTime": 1795960801.5,
    }


def java_document(sid: str, state: Any, *, app: str = "shop", user: str = "u7") -> dict[str, Any]:
    """ADK Java ``Session.toJson()``: event times in milliseconds, lastUpdateTime seconds."""
    return {
        "id": sid,
        "appName": app,
        "userId": user,
        "state": state,
        "events": [
            {
                "id": f"{sid}-user",
                "invocationId": f"e-{sid}",
                "author": "user",
                "content": {"parts": [{"text": "hi"}], "role": "user"},
                "actions": {"stateDelta": {}, "artifactDelta": {}, "requestedAuthConfigs": {}},
                "timestamp": 1795960800250,
            },
        ],
        "lastUpdateTime": 1795960800.25,
    }


def write_documents(folder: Path, name: str, doc: Any, top: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(doc, indent=2), encoding="utf-8")
    return manifest(folder, f'path = "{name}"', top)


def _rows(frame: pd.DataFrame) -> list[tuple[Any, ...]]:
    return [
        (a, u, s, scope, k, json.dumps(v), source, at)
        for a, u, s, scope, k, v, source, at in frame[COLUMNS].itertuples(index=False)
    ]


@pytest.mark.parametrize(
    ("shape", "make", "stamp", "source_format"),
    [
        ("python", python_document, "2026-11-29T14:00:01.5Z", "adk-session-json"),
        ("java", java_document, "2026-11-29T14:00:00.25Z", "adk-java-json"),
    ],
)
def test_a_session_document_gives_its_merged_state(
    tmp_path: Path, shape: str, make: Any, stamp: str, source_format: str
) -> None:
    ev = ik.open_evidence(write_documents(tmp_path, f"{shape}.session.json", make("s-1", STATE)))
    frame = ev.session_state
    assert rejects_of(ev) == []
    assert list(frame.columns) == COLUMNS
    assert {c: str(t) for c, t in frame.dtypes.items()} == dict(spec_of("session_state").columns)
    at = pd.Timestamp(stamp)
    assert _rows(frame) == [
        ("shop", "u7", "s-1", SCOPES[k], k, json.dumps(v), "session JSON state", at)
        for k, v in STATE.items()
    ]
    assert frame["value"][4] is None
    assert set(ev.events["source_format"]) == {source_format}
    assert set(ev.events["session_id"]) == {"s-1"}


@pytest.mark.parametrize("make", [python_document, java_document])
def test_a_list_of_session_documents_gives_each_sessions_state(tmp_path: Path, make: Any) -> None:
    docs = [
        make("s-1", {"cart": ["kettle"], "user:tier": "gold"}, user="u1"),
        make("s-2", {"app:banner": "sale", "temp:scratch": {"n": 1}}, app="travel", user="u2"),
    ]
    ev = ik.open_evidence(write_documents(tmp_path, "sessions.json", docs))
    frame = ev.session_state
    assert rejects_of(ev) == []
    got = {(a, u, s, k): (scope, v) for a, u, s, scope, k, v, *_ in _rows(frame)}
    assert got == {
        ("shop", "u1", "s-1", "cart"): ("session", '["kettle"]'),
        ("shop", "u1", "s-1", "user:tier"): ("user", '"gold"'),
        ("travel", "u2", "s-2", "app:banner"): ("app", '"sale"'),
        ("travel", "u2", "s-2", "temp:scratch"): ("temp", '{"n": 1}'),
    }
    assert len(frame) == 4
    assert set(frame["source"]) == {"session JSON state"}
    assert set(ev.events["session_id"]) == {"s-1", "s-2"}


@pytest.mark.parametrize("bad", [[1, 2], "state", 7, True])
def test_a_document_state_that_is_not_an_object_is_a_reject_and_its_events_load(
    tmp_path: Path, bad: Any
) -> None:
    one = ik.open_evidence(
        write_documents(tmp_path / "one", "one.session.json", python_document("s-1", bad))
    )
    assert one.session_state.empty
    assert list(one.session_state.columns) == COLUMNS
    assert rejects_of(one) == [("one.session.json.state", "state is not a JSON object")]
    assert one.events["event_id"].tolist() == ["s-1-user", "s-1-reply"]

    docs = [java_document("s-1", {"k": "v"}), java_document("s-2", bad)]
    two = ik.open_evidence(write_documents(tmp_path / "two", "two.json", docs))
    assert rejects_of(two) == [("two.json:[1].state", "state is not a JSON object")]
    assert two.session_state[["session_id", "key"]].values.tolist() == [["s-1", "k"]]
    assert sorted(two.events["event_id"]) == ["s-1-user", "s-2-user"]


# -- 4. filters --------------------------------------------------------------------------------

OUTSIDE = ("2020-01-01T00:00:00Z", "2020-01-02T00:00:00Z")  # no event, no store time in it


def _three_documents(tmp_path: Path, top: str = "") -> Path:
    docs = [
        python_document("s-1", {"a": 1, "user:u": 2}, app="shop", user="u1"),
        python_document("s-2", {"b": 3}, app="shop", user="u2"),
        python_document("s-3", {"c": 4, "app:x": 5}, app="travel", user="u1"),
    ]
    return write_documents(tmp_path, "sessions.json", docs, top)


def _keys(frame: pd.DataFrame) -> list[tuple[str, str]]:
    return sorted(zip(frame["session_id"].fillna("-"), frame["key"], strict=True))


def test_filters_keep_the_named_app_and_sessions_of_documents(tmp_path: Path) -> None:
    path = _three_documents(tmp_path)
    every = [("s-1", "a"), ("s-1", "user:u"), ("s-2", "b"), ("s-3", "app:x"), ("s-3", "c")]
    assert _keys(ik.open_evidence(path).session_state) == every
    assert _keys(ik.open_evidence(path, app_name="travel").session_state) == every[3:]
    assert _keys(ik.open_evidence(path, session_ids=["s-2", "s-3"]).session_state) == every[2:]
    both = ik.open_evidence(path, app_name="shop", session_ids=["s-2", "s-3"])
    assert _keys(both.session_state) == [("s-2", "b")]
    assert _keys(ik.open_evidence(path, session_ids=["nope"]).session_state) == []


def test_manifest_filters_apply_to_documents_and_the_window_does_not(tmp_path: Path) -> None:
    window = f'window = {{ start = "{OUTSIDE[0]}", end = "{OUTSIDE[1]}" }}'
    top = f'app_name = "shop"\nsessions = ["s-1"]\n{window}'
    ev = ik.open_evidence(_three_documents(tmp_path, top))
    assert ev.events.empty  # the window drops every event
    assert _keys(ev.session_state) == [("s-1", "a"), ("s-1", "user:u")]


def _db_keys(frame: pd.DataFrame) -> list[tuple[str, str, str, str]]:
    cols = [frame[c].fillna("-") for c in ("app_name", "user_id", "session_id", "key")]
    return sorted(zip(*cols, strict=True))


EVERY_DB_KEY = [
    ("billing", "u1", "-", "user:tier"),
    ("shop", "-", "-", "app:banner"),
    ("shop", "-", "-", "app:limits"),
    ("shop", "u1", "-", "user:tier"),
    ("shop", "u1", "s1", "cart"),
    ("shop", "u1", "s1", "gift_note"),
    ("shop", "u1", "s1", "n"),
    ("shop", "u2", "s2", "coupon_code"),
]


@pytest.fixture(params=["v1", "service"])
def store_path(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """CONTENT in a DatabaseSessionService v1 SQLite file, or a SqliteSessionService one."""
    path = tmp_path / "store" / "sessions.db"
    path.parent.mkdir()
    if request.param == "v1":
        write_v1(f"sqlite:///{path}", CONTENT)
    else:
        write_sqlite_service(path, CONTENT)
    return path


def test_filters_keep_the_named_app_and_sessions_of_a_store(store_path: Path) -> None:
    assert _db_keys(open_sqlite(store_path).session_state) == EVERY_DB_KEY
    shop = [k for k in EVERY_DB_KEY if k[0] == "shop"]
    assert _db_keys(open_sqlite(store_path, app_name="shop").session_state) == shop
    billing = open_sqlite(store_path, app_name="billing").session_state
    assert _db_keys(billing) == [("billing", "u1", "-", "user:tier")]  # s3 keeps no key
    s2 = open_sqlite(store_path, session_ids=["s2"]).session_state
    # s2's keys; u2 keeps no user state; the app's state stays; u1's does not.
    assert _db_keys(s2) == [
        ("shop", "-", "-", "app:banner"),
        ("shop", "-", "-", "app:limits"),
        ("shop", "u2", "s2", "coupon_code"),
    ]
    s1 = open_sqlite(store_path, app_name="shop", session_ids=["s1"]).session_state
    assert _db_keys(s1) == [k for k in shop if k[1] != "u2"]


def test_a_session_filter_keeps_only_that_sessions_users_state(store_path: Path) -> None:
    s1 = open_sqlite(store_path, session_ids=["s1"]).session_state
    users = s1.loc[s1["scope"].eq("user"), ["app_name", "user_id"]].values.tolist()
    assert users == [["shop", "u1"]]  # not billing/u1: s1 is a shop session


def test_the_window_does_not_drop_a_stores_state(store_path: Path) -> None:
    ev = open_sqlite(store_path, window=OUTSIDE)
    assert ev.events.empty
    assert _db_keys(ev.session_state) == EVERY_DB_KEY
    narrowed = open_sqlite(store_path, window=OUTSIDE, session_ids=["s2"])
    assert [k for *_, k in _db_keys(narrowed.session_state)] == [
        "app:banner",
        "app:limits",
        "coupon_code",
    ]


@pytest.mark.postgres
def test_filters_apply_on_postgresql(tmp_path: Path, pg_url: str) -> None:
    write_v1(pg_url, CONTENT)
    every = open_url(tmp_path / "a", pg_url, window=OUTSIDE)
    assert _db_keys(every.session_state) == EVERY_DB_KEY
    shop = open_url(tmp_path / "b", pg_url, app_name="shop", session_ids=["s2"])
    assert _db_keys(shop.session_state) == [
        ("shop", "-", "-", "app:banner"),
        ("shop", "-", "-", "app:limits"),
        ("shop", "u2", "s2", "coupon_code"),
    ]


# -- 5. unreadable state -----------------------------------------------------------------------


def _overwrite_states(path: Path, texts: Mapping[tuple[str, str], str]) -> None:
    """Store ``texts`` as the state of rows (table, where-clause) of a SQLite store."""
    with sqlite3.connect(path) as db:
        for (table, where), text in texts.items():
            changed = db.execute(f"UPDATE {table} SET state = ? WHERE {where}", (text,)).rowcount
            assert changed == 1, (table, where)
    db.close()


def test_unreadable_stored_state_is_a_reject_naming_the_row(store_path: Path) -> None:
    _overwrite_states(
        store_path,
        {
            ("sessions", "id = 's1'"): '{"cart": [',
            ("user_states", "app_name = 'shop' AND user_id = 'u1'"): "[1, 2]",
            ("app_states", "app_name = 'shop'"): "not json",
        },
    )
    ev = open_sqlite(store_path)
    rejects = rejects_of(ev)
    assert [where for where, _ in rejects] == [
        "app_states:shop.state",
        "sessions:shop/u1/s1.state",
        "user_states:shop/u1.state",
    ]
    reasons = dict(rejects)
    assert reasons["user_states:shop/u1.state"] == "unreadable state: state is not a JSON object"
    assert reasons["sessions:shop/u1/s1.state"].startswith("unreadable state: malformed JSON")
    assert reasons["app_states:shop.state"].startswith("unreadable state: malformed JSON")
    raw = ev.rejects_of(["events"]).set_index("location")["raw"]
    assert raw["sessions:shop/u1/s1.state"] == '{"cart": ['
    assert _db_keys(ev.session_state) == [
        ("billing", "u1", "-", "user:tier"),
        ("shop", "u2", "s2", "coupon_code"),
    ]
    assert sorted(ev.events["session_id"]) == ["s1", "s2", "s3"]  # the events all load


@pytest.mark.postgres
def test_a_jsonb_state_that_is_not_an_object_is_a_reject(tmp_path: Path, pg_url: str) -> None:
    content = Content(
        sessions=[
            ("shop", "u1", "s1", [1, 2], T_S1),
            ("shop", "u2", "s2", '{"looks": "like an object"}', T_S2),  # a JSON string
            ("shop", "u3", "s3", {"ok": True}, T_S3),
        ],
        apps=[("shop", 5, T_APP)],
        users=[("shop", "u3", {"tier": "gold"}, T_U1)],
    )
    write_v1(pg_url, content)
    engine = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:  # a JSON null (the column is NOT NULL)
        conn.execute(sa.text("UPDATE user_states SET state = 'null'::jsonb"))
    engine.dispose()
    ev = open_url(tmp_path, pg_url)
    assert rejects_of(ev) == [
        ("app_states:shop.state", "unreadable state: state is not a JSON object"),
        ("sessions:shop/u1/s1.state", "unreadable state: state is not a JSON object"),
        ("sessions:shop/u2/s2.state", "unreadable state: state is not a JSON object"),
        ("user_states:shop/u3.state", "unreadable state: state is not a JSON object"),
    ]
    assert _db_keys(ev.session_state) == [("shop", "u3", "s3", "ok")]
    assert sorted(ev.events["session_id"]) == ["s1", "s2", "s3"]


# -- 6. sources that keep no state -------------------------------------------------------------


def test_java_json_lines_give_an_empty_session_state_frame() -> None:
    ev = ik.open_evidence(FIXTURES / "vanished_state")
    assert not ev.events.empty
    assert not ev.state_writes.empty  # the deltas are there; a stored state is not
    frame = ev.session_state
    assert frame.empty
    assert list(frame.columns) == COLUMNS
    assert {c: str(t) for c, t in frame.dtypes.items()} == dict(spec_of("session_state").columns)


def test_a_java_event_table_gives_an_empty_session_state_frame(tmp_path: Path) -> None:
    path = tmp_path / "java.sqlite"
    engine = sa.create_engine(f"sqlite:///{path}", poolclass=sa.pool.NullPool)
    store.create_tables(engine, store.kit_metadata)
    event = java_document("s-1", {})["events"][0]
    store.insert_rows(
        engine,
        store.adk_event,
        [
            {"event_id": event["id"], "app_name": "shop", "user_id": "u7", "session_id": "s-1"}
            | {"invocation_id": event["invocationId"], "event": event}
            | {"ts": datetime(2026, 11, 29, 16, 0, 0, 250000, tzinfo=UTC)}
        ],
    )
    engine.dispose()
    ev = ik.open_evidence(manifest(tmp_path, f'path = "{path.name}"\nformat = "sql"'))
    assert ev.events["event_id"].tolist() == ["s-1-user"]
    frame = ev.session_state
    assert frame.empty and list(frame.columns) == COLUMNS
    assert {c: str(t) for c, t in frame.dtypes.items()} == dict(spec_of("session_state").columns)


def test_an_event_time_past_2262_is_a_reject_not_a_crash(tmp_path: Path) -> None:
    doc = python_document("s-1", {"k": "v"})
    doc["events"][1]["timestamp"] = 9_300_000_000.0  # 2264-09-14, as epoch seconds
    ev = ik.open_evidence(write_documents(tmp_path, "late.session.json", doc))
    assert ev.events["event_id"].tolist() == ["s-1-user"]
    [(where, reason)] = rejects_of(ev)
    assert where == "late.session.json:events[1]" and "out of range" in reason
    assert ev.session_state["key"].tolist() == ["k"]
