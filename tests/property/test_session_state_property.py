"""Properties of the ``session_state`` frame: whatever JSON object a session keeps as its state,
the frame holds exactly its keys with their values; anything else is a reject, never a crash.

Each example writes a real evidence folder (``evidence.toml`` + a session document, or a
SqliteSessionService file built with ``sqlite3``) under pytest's ``tmp_path`` and opens it with
``incidentkit.open_evidence``. Loading may raise an :class:`IncidentkitError` only where a case
says so; any other exception fails the property as it is.
"""

from __future__ import annotations

import json
import math
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import incidentkit as ik
from incidentkit.errors import IncidentkitError
from incidentkit.frames import spec_of

ROOT = Path(__file__).resolve().parent.parent.parent
SQLITE_SERVICE_DDL = ROOT / "tests" / "data" / "events" / "sqlite_session_service.sql"
COLUMNS = spec_of("session_state").names
DTYPES = dict(spec_of("session_state").columns)

PROPERTY = settings(
    max_examples=60,
    deadline=None,
    database=None,  # nothing written beside the project
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink),
    report_multiple_bugs=False,
)

# -- strategies --------------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
PREFIXES = ["", "", "app:", "user:", "temp:", "App:", "app", "user:app:", " temp:"]
state_keys = st.builds(lambda p, t: p + t, st.sampled_from(PREFIXES), st.text(max_size=10))
states = st.dictionaries(state_keys, json_values, max_size=6)
non_objects = json_values.filter(lambda v: not isinstance(v, dict))
identities = st.text(min_size=1, max_size=8)
# Epoch milliseconds from 1973 to 2255: a Java event's time is then read as milliseconds and a
# Python one's as seconds. (Later times crash the event reader: see test_session_state.py,
# test_an_event_time_past_2262_is_a_reject_not_a_crash.)
milliseconds = st.integers(min_value=100_000_000_000, max_value=9_000_000_000_000)

# -- oracles and helpers -----------------------------------------------------------------------


def scope_of(key: str) -> str:
    for prefix, scope in (("app:", "app"), ("user:", "user"), ("temp:", "temp")):
        if key.startswith(prefix):
            return scope
    return "session"


def canonical(value: Any) -> str:
    """A value by its JSON: 1, 1.0, True and "1" all differ."""
    return json.dumps(value, sort_keys=True)


def decoded_object(text: str) -> dict[str, Any] | None:
    """``text`` as a JSON object the way a store's reader should see it, else None."""

    def refuse(name: str) -> Any:
        raise ValueError(name)

    try:
        value = json.loads(text, parse_constant=refuse)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def fresh(tmp_path: Path) -> Path:
    """A new folder for one example (tmp_path is shared by all of a test's examples)."""
    folder = tmp_path / uuid.uuid4().hex
    folder.mkdir()
    return folder


def manifest(folder: Path, name: str, fmt: str | None = None) -> Path:
    path = folder / "evidence.toml"
    line = f'format = "{fmt}"\n' if fmt else ""
    path.write_text(f'[events]\npath = "{name}"\n{line}', encoding="utf-8")
    return path


Loaded = tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]


def load(path: Path) -> Loaded | IncidentkitError:
    """(session_state, rejects, events), or the kit's own error; anything else propagates."""
    try:
        ev = ik.open_evidence(path)
        return ev.session_state, ev.rejects_of(["events"]), ev.events
    except IncidentkitError as err:
        return err


def loaded(path: Path) -> Loaded:
    out = load(path)
    assert not isinstance(out, IncidentkitError), f"{type(out).__name__}: {out}"
    frame = out[0]
    assert list(frame.columns) == COLUMNS
    assert {c: str(t) for c, t in frame.dtypes.items()} == DTYPES
    return out


def document(*, shape: str, sid: str, app: str, user: str, state: Any, ms: int) -> dict[str, Any]:
    """A Python session by alias (event time in seconds) or a Java ``Session.toJson()``
    (milliseconds); ``lastUpdateTime`` is epoch seconds in both."""
    event: dict[str, Any] = {
        "id": f"{sid}-ev",
        "invocationId": f"e-{sid}",
        "author": "user",
        "content": {"parts": [{"text": "hi"}], "role": "user"},
        "actions": {"stateDelta": {}},
        "timestamp": ms / 1000 if shape == "python" else ms,
    }
    return {
        "id": sid,
        "appName": app,
        "userId": user,
        "state": state,
        "events": [event],
        "lastUpdateTime": ms / 1000,
    }


def write_document(folder: Path, doc: Any, *, ascii_only: bool) -> Path:
    (folder / "session.json").write_text(json.dumps(doc, ensure_ascii=ascii_only), encoding="utf-8")
    return manifest(folder, "session.json")


def write_service(
    folder: Path, *, app: str, user: str, sid: str, texts: tuple[str, str, str], at: float
) -> Path:
    """A SqliteSessionService file whose sessions, app_states and user_states rows keep
    ``texts`` as their state."""
    session_text, app_text, user_text = texts
    event = {"id": "ev-1", "invocation_id": "e-1", "author": "user", "timestamp": at}
    with sqlite3.connect(folder / "session.db") as db:
        db.executescript(SQLITE_SERVICE_DDL.read_text(encoding="utf-8"))
        db.execute(
            "INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?)", (app, user, sid, session_text, at, at)
        )
        db.execute("INSERT INTO app_states VALUES (?, ?, ?)", (app, app_text, at))
        db.execute("INSERT INTO user_states VALUES (?, ?, ?, ?)", (app, user, user_text, at))
        db.execute(
            "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)",
            ("ev-1", app, user, sid, "e-1", at, json.dumps(event)),
        )
    db.close()
    return manifest(folder, "session.db", "adk-python-db")


def assert_close(stamps: pd.Series, ms: int) -> None:
    """Every stamp is ``ms`` (epoch seconds as a double lose a few nanoseconds)."""
    want = pd.Timestamp(ms, unit="ms", tz="UTC")
    assert all(abs(stamp - want) < pd.Timedelta(microseconds=1) for stamp in stamps), (
        list(stamps),
        want,
    )


# -- properties --------------------------------------------------------------------------------


@pytest.mark.slow
@PROPERTY
@given(
    docs=st.lists(st.tuples(identities, identities, states, milliseconds), min_size=1, max_size=2),
    shape=st.sampled_from(["python", "java"]),
    as_list=st.booleans(),
    ascii_only=st.booleans(),
)
def test_a_documents_state_loads_key_for_key(
    tmp_path: Path,
    docs: list[tuple[str, str, dict[str, Any], int]],
    shape: str,
    as_list: bool,
    ascii_only: bool,
) -> None:
    made = [
        document(shape=shape, sid=f"s-{i}", app=app, user=user, state=state, ms=ms)
        for i, (app, user, state, ms) in enumerate(docs)
    ]
    body = made if as_list or len(made) > 1 else made[0]
    frame, rejects, events = loaded(write_document(fresh(tmp_path), body, ascii_only=ascii_only))
    assert rejects.empty, rejects.to_dict("records")
    assert len(events) == len(docs)
    assert len(frame) == sum(len(state) for _, _, state, _ in docs)
    for i, (app, user, state, ms) in enumerate(docs):
        rows = frame.loc[frame["session_id"].eq(f"s-{i}")]
        assert rows["key"].tolist() == list(state)
        assert rows["value"].map(canonical).tolist() == [canonical(v) for v in state.values()]
        assert rows["scope"].tolist() == [scope_of(k) for k in state]
        assert set(rows["app_name"]) <= {app} and set(rows["user_id"]) <= {user}
        assert set(rows["source"]) <= {"session JSON state"}
        assert_close(rows["updated_at"], ms)


@pytest.mark.slow
@PROPERTY
@given(
    state=states,
    app=identities,
    user=identities,
    sid=identities,
    ms=milliseconds,
    ascii_only=st.booleans(),
)
def test_a_sqlite_service_stores_state_loads_key_for_key(
    tmp_path: Path, state: dict[str, Any], app: str, user: str, sid: str, ms: int, ascii_only: bool
) -> None:
    text = json.dumps(state, ensure_ascii=ascii_only)
    path = write_service(
        fresh(tmp_path), app=app, user=user, sid=sid, texts=(text,) * 3, at=ms / 1000
    )
    frame, rejects, events = loaded(path)
    assert rejects.empty, rejects.to_dict("records")
    assert events["event_id"].tolist() == ["ev-1"]
    assert len(frame) == 3 * len(state)
    for source, scope, prefix, who, session in (
        ("sessions.state", "session", "", user, sid),
        ("app_states.state", "app", "app:", None, None),
        ("user_states.state", "user", "user:", user, None),
    ):
        rows = frame.loc[frame["source"].eq(source)]
        assert rows["key"].tolist() == [prefix + k for k in state], source
        assert rows["value"].map(canonical).tolist() == [canonical(v) for v in state.values()]
        assert set(rows["scope"]) <= {scope}
        assert set(rows["app_name"]) <= {app}
        for column, want in (("user_id", who), ("session_id", session)):
            # Compared as Python text: pandas' str dtype finds "\x00" unequal to itself.
            ids = rows[column]
            assert ids.tolist() == [want] * len(ids) if want else ids.isna().all(), column
        assert_close(rows["updated_at"], ms)


@pytest.mark.slow
@PROPERTY
@given(bad=non_objects, shape=st.sampled_from(["python", "java"]), ms=milliseconds)
def test_a_document_state_that_is_no_object_is_a_reject(
    tmp_path: Path, bad: Any, shape: str, ms: int
) -> None:
    # JSON null is left out: the reader takes "state": null for a document without a state.
    if bad is None:
        return
    good = document(shape=shape, sid="s-0", app="a", user="u", state={"k": 1}, ms=ms)
    wrong = document(shape=shape, sid="s-1", app="a", user="u", state=bad, ms=ms)
    frame, rejects, events = loaded(write_document(fresh(tmp_path), [good, wrong], ascii_only=True))
    assert rejects[["location", "reason"]].values.tolist() == [
        ["session.json:[1].state", "state is not a JSON object"]
    ]
    assert sorted(events["event_id"]) == ["s-0-ev", "s-1-ev"]
    assert frame[["session_id", "key"]].values.tolist() == [["s-0", "k"]]


stored_texts = (
    st.text(max_size=20)
    | json_values.map(json.dumps)
    | states.map(json.dumps)
    | st.sampled_from(["NaN", '{"a": NaN}', "[1, 2", "{}", "null", '{"a": 1} x', "9" * 5000])
)


@pytest.mark.slow
@PROPERTY
@given(texts=st.tuples(stored_texts, stored_texts, stored_texts), ms=milliseconds)
def test_any_stored_state_text_loads_or_is_a_reject(
    tmp_path: Path, texts: tuple[str, str, str], ms: int
) -> None:
    path = write_service(fresh(tmp_path), app="a", user="u", sid="s", texts=texts, at=ms / 1000)
    frame, rejects, events = loaded(path)
    assert events["event_id"].tolist() == ["ev-1"]  # the events never suffer for the state
    locations = []
    for text, source, where, prefix in zip(
        texts,
        ("sessions.state", "app_states.state", "user_states.state"),
        ("sessions:a/u/s.state", "app_states:a.state", "user_states:a/u.state"),
        ("", "app:", "user:"),
        strict=True,
    ):
        rows = frame.loc[frame["source"].eq(source)]
        state = decoded_object(text)
        if state is None:
            locations.append(where)
            assert rows.empty, (text, rows.to_dict("records"))
        else:
            assert rows["key"].tolist() == [prefix + k for k in state]
            got = rows["value"].tolist()
            assert [canonical(v) for v in got] == [canonical(v) for v in state.values()]
            assert not any(isinstance(v, float) and not math.isfinite(v) for v in got)
    assert sorted(rejects["location"]) == sorted(locations)
    assert rejects["reason"].str.startswith("unreadable state: ").all()
