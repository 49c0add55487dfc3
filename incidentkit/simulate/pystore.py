"""ADK Python's session store as ``DatabaseSessionService`` (schema v1) leaves it.

Events stream to a spill file while the pack is written; at the end the sessions (state =
session-scoped keys), app and user states (prefixes stripped) and then the events are inserted,
in that order because ``events`` references ``sessions``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from incidentkit import store
from incidentkit.simulate.model import Event, naive_utc


@dataclass
class PythonStore:
    """ADK Python's sessions, app_states and user_states as the session service leaves them."""

    sessions: dict[tuple[str, str, str], list[Any]] = field(default_factory=dict)
    apps: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    users: dict[tuple[str, str], tuple[int, dict[str, Any]]] = field(default_factory=dict)

    def apply(self, e: Event, delta: dict[str, Any]) -> None:
        row = self.sessions.setdefault((e.app, e.user, e.session), [e.ts, e.ts, {}])
        row[1] = e.ts
        for name, value in delta.items():
            if name.startswith("app:"):
                state = self.apps.get(e.app, (0, {}))[1]
                state[name[4:]] = value
                self.apps[e.app] = (e.ts, state)
            elif name.startswith("user:"):
                state = self.users.get((e.app, e.user), (0, {}))[1]
                state[name[5:]] = value
                self.users[(e.app, e.user)] = (e.ts, state)
            else:
                row[2][name] = value

    def merge(self, other: PythonStore) -> None:
        self.sessions.update(other.sessions)  # shards own disjoint sessions
        for app, (ts, state) in other.apps.items():
            mine = self.apps.get(app)
            self.apps[app] = (ts, state) if mine is None or ts >= mine[0] else mine
        for key, (ts, state) in other.users.items():
            mine_u = self.users.get(key)
            self.users[key] = (ts, state) if mine_u is None or ts >= mine_u[0] else mine_u


def write_python_store(engine: Engine | None, target: Path, py: PythonStore, spill: Path) -> None:
    """Insert the store into ``engine`` (or a new SQLite file ``target``), then drop ``spill``."""
    own = engine is None
    if engine is None:
        target.unlink(missing_ok=True)
        engine = sa.create_engine(f"sqlite:///{target}", poolclass=sa.pool.NullPool)
        store.create_tables(engine, store.adk_python_metadata)
    store.insert_rows(
        engine, store.adk_internal_metadata, [{"key": "schema_version", "value": "1"}]
    )
    store.insert_rows(engine, store.adk_sessions, _session_rows(py))
    store.insert_rows(
        engine,
        store.adk_app_states,
        [
            {"app_name": app, "state": state, "update_time": naive_utc(ts)}
            for app, (ts, state) in sorted(py.apps.items())
        ],
    )
    store.insert_rows(
        engine,
        store.adk_user_states,
        [
            {"app_name": app, "user_id": user, "state": state, "update_time": naive_utc(ts)}
            for (app, user), (ts, state) in sorted(py.users.items())
        ],
    )
    store.insert_rows(engine, store.adk_events, _read_spill(spill))
    spill.unlink()
    if own:
        engine.dispose()


def _session_rows(py: PythonStore) -> Iterator[dict[str, Any]]:
    for (app, user, sid), (create, update, state) in sorted(py.sessions.items()):
        yield {
            "app_name": app,
            "user_id": user,
            "id": sid,
            "state": state,
            "create_time": naive_utc(create),
            "update_time": naive_utc(update),
        }


def _read_spill(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            row["timestamp"] = naive_utc(row.pop("ts"))
            yield row
