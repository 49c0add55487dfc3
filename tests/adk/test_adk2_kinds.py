"""Event kinds and marker relations on the stores real google-adk 2.x writes.

``adk2_world`` runs compaction, rewind, resume, a retried tool timeout and a ``max_llm_calls``
runaway through ADK into SQLite stores and records what ADK did; here the kit's events frame
of each store must say the same: every compaction is a compaction covering the events ADK
summarised, the rewind undoes the invocations ADK dropped, checkpoints and content-less
errors are named, and no marker is an invocation of its own or a final response. Each world
is built once for the module; the same frames come out of PostgreSQL and out of a snapshot.
"""

from __future__ import annotations

import collections
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import sqlalchemy as sa

import incidentkit as ik
from incidentkit import store
from incidentkit.manifest import Filters, SourceSpec, Window
from incidentkit.snapshot import take
from incidentkit.sources import events

pytestmark = [pytest.mark.adk, pytest.mark.xdist_group("adk2_worlds")]  # one worker builds them

MARKERS = ("compaction", "rewind", "checkpoint")


def _events(world: Any, **filters: Any) -> pd.DataFrame:
    evidence = ik.open_evidence(world.store.manifest, **filters)
    assert evidence.rejects.empty, evidence.rejects.to_dict("records")
    return evidence.frame("events")


def _at(seconds: float) -> pd.Timestamp:
    """A stored float time as the frames hold it (to the microsecond ADK's clock gives)."""
    return pd.Timestamp(seconds, unit="s", tz="UTC").as_unit("ns").round("us")


def _no_marker_is_an_invocation_or_an_answer(frame: pd.DataFrame, invocations: set[str]) -> None:
    markers = frame["kind"].isin(MARKERS)
    assert not frame.loc[markers, "final_response"].any()
    assert set(frame.loc[~markers, "invocation_id"]) == invocations


# --- compaction -------------------------------------------------------------------------------


def test_every_compaction_is_a_compaction_over_the_span_it_summarised(compaction: Any) -> None:
    frame = _events(compaction).set_index("event_id")
    found = frame.index[frame["kind"].eq("compaction")]
    assert list(found) == [c.event_id for c in compaction.compactions]
    assert set(frame["kind"]) == {"turn", "compaction"}
    for truth in compaction.compactions:
        row = frame.loc[truth.event_id]
        assert row["compaction_start"] == _at(truth.start_timestamp)
        assert row["compaction_end"] == _at(truth.end_timestamp)
        covered = frame.loc[list(truth.covered_events), "ts"]  # raw events stay stored
        assert (covered.min(), covered.max()) == (row["compaction_start"], row["compaction_end"])
    assert frame.loc[frame["kind"].ne("compaction"), "compaction_start"].isna().all()
    _no_marker_is_an_invocation_or_an_answer(frame, set(compaction.invocations))


def test_each_event_names_the_latest_compaction_that_summarised_it(compaction: Any) -> None:
    frame = _events(compaction).set_index("event_id")
    latest: dict[str, str] = {}
    for truth in compaction.compactions:  # in the order ADK appended them
        latest |= dict.fromkeys(truth.covered_events, truth.event_id)
    assert dict(frame["compacted_by"].dropna()) == latest
    assert frame["rewound_by"].isna().all()


# --- rewind -----------------------------------------------------------------------------------


def test_the_rewind_marks_the_invocations_adk_dropped(rewind: Any) -> None:
    frame = _events(rewind)
    for truth in rewind.rewinds:
        session = frame[frame["session_id"] == truth.session_id].set_index("event_id")
        (rewind_id,) = session.index[session["kind"].eq("rewind")]
        assert session.loc[rewind_id, "rewind_before"] == truth.before
        undone = session["invocation_id"].isin(truth.undone)
        assert set(session.index[undone]) == set(session.index[session["rewound_by"].notna()])
        assert session.loc[undone, "rewound_by"].eq(rewind_id).all()
        assert pd.isna(session.loc[rewind_id, "rewound_by"])  # the rewind itself stands
        _no_marker_is_an_invocation_or_an_answer(
            session.reset_index(), set(rewind.invocations[truth.session_id])
        )
    assert set(frame["kind"]) == {"turn", "rewind"}
    assert frame["rewind_before"].notna().sum() == len(rewind.rewinds)


# --- resume, timeout, runaway -----------------------------------------------------------------


def test_checkpoints_are_the_content_less_agent_events_adk_yielded(resume: Any) -> None:
    frame = _events(resume)
    checkpoints = frame[frame["kind"].eq("checkpoint")]
    assert collections.Counter(checkpoints["invocation_id"]) == collections.Counter(
        resume.checkpoints
    )
    stored = {r["id"]: r["event_data"] for r in resume.store.events()}
    for event_id in checkpoints["event_id"]:
        data = stored[event_id]
        assert "content" not in data
        assert data["actions"].get("end_of_agent") or data["actions"].get("agent_state")
    assert set(frame["kind"]) == {"turn", "checkpoint"}
    _no_marker_is_an_invocation_or_an_answer(frame, {resume.resumed, resume.approval})


def test_the_timeout_is_an_error_event_of_the_retried_invocation(timeout: Any) -> None:
    frame = _events(timeout)
    (error,) = frame[frame["kind"].eq("error")].itertuples()
    assert (error.invocation_id, error.error_code) == (timeout.retried, timeout.raised[0])
    assert set(frame["kind"]) == {"turn", "error"}
    assert frame[["compacted_by", "rewound_by", "rewind_before"]].isna().all(axis=None)


def test_the_limit_hit_is_an_error_event_and_nothing_else_is(runaway: Any) -> None:
    frame = _events(runaway)
    errors = frame[frame["kind"].eq("error")]
    assert list(errors["invocation_id"]) == [runaway.runaway.invocation_id]
    assert set(errors["error_code"]) == {"LlmCallsLimitExceededError"}
    assert set(frame["kind"]) == {"turn", "error"}


# --- the same frames from PostgreSQL and from a snapshot ---------------------------------------


def _copy_to(url: str, world: Any) -> None:
    """The world's ``events`` rows written into a fresh schema-v1 store at ``url``."""
    rows = world.store.events()
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    store.create_tables(engine, store.adk_python_metadata)
    store.insert_rows(
        engine, store.adk_internal_metadata, [{"key": "schema_version", "value": "1"}]
    )
    now = datetime(2026, 1, 1)
    keys = dict.fromkeys((r["app_name"], r["user_id"], r["session_id"]) for r in rows)
    store.insert_rows(
        engine,
        store.adk_sessions,
        [
            {"app_name": a, "user_id": u, "id": s, "state": {}, "create_time": now}
            | {"update_time": now}
            for a, u, s in keys
        ],
    )
    stamp = datetime.fromtimestamp
    store.insert_rows(
        engine,
        store.adk_events,
        [
            {k: r[k] for k in ("id", "app_name", "user_id", "session_id", "invocation_id")}
            | {"event_data": r["event_data"]}
            | {"timestamp": stamp(r["event_data"]["timestamp"], tz=UTC).replace(tzinfo=None)}
            for r in rows
        ],
    )
    engine.dispose()


@pytest.mark.postgres
@pytest.mark.parametrize("name", ["compaction", "rewind"])
def test_postgresql_gives_the_same_kinds(
    name: str, request: pytest.FixtureRequest, pg_url: str
) -> None:
    world = request.getfixturevalue(name)
    _copy_to(pg_url, world)
    spec = SourceSpec("events", url_ref="env:IK_EVENTS", format="adk-python-db")
    loaded = events.load(spec, Filters(), environ={"IK_EVENTS": pg_url})
    assert loaded.rejects.empty
    pd.testing.assert_frame_equal(loaded.frames["events"], _events(world))


@pytest.fixture(scope="module")
def snapshots() -> dict[str, Path]:
    """Each world's snapshot, taken once for the module."""
    return {}


@pytest.mark.parametrize("cut", ["start", "end"])
@pytest.mark.parametrize("name", ["compaction", "rewind"])
def test_a_windowed_snapshot_relates_what_it_keeps_as_the_store_does(
    name: str,
    cut: str,
    request: pytest.FixtureRequest,
    snapshots: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A window that starts inside a compaction's span (or the rewound invocation), or ends
    before the marker: the snapshot, cut to it, says what a read of the store cut to it says
    (a marker left out relates nothing; one kept covers what is kept)."""
    world = request.getfixturevalue(name)
    if name not in snapshots:
        snapshots[name] = take(world.store.manifest, tmp_path_factory.mktemp(name) / "s").folder
    frame = _events(world)
    marker = frame[frame["kind"].eq(name)].iloc[-1 if name == "compaction" else 0]
    related = "compacted_by" if name == "compaction" else "rewound_by"
    start, end = frame["ts"].min(), frame["ts"].max() + pd.Timedelta(seconds=1)
    if cut == "start" and name == "compaction":
        start = marker["compaction_start"] + pd.Timedelta(microseconds=1)
    elif cut == "start":
        undone = frame[frame["invocation_id"].eq(marker["rewind_before"])]
        start = undone["ts"].iloc[1]  # the undone invocation's message is left out
    else:
        end = marker["ts"]  # the marker itself is left out
    want = _events(world, window=Window(start, end))
    got = ik.open_evidence(snapshots[name], window=Window(start, end)).frame("events")
    pd.testing.assert_frame_equal(got, want)
    assert 0 < len(want) < len(frame)
    by_marker = want[related].eq(marker["event_id"])
    assert by_marker.any() if cut == "start" else not by_marker.any()
