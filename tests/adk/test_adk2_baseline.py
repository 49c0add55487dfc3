"""The baseline engines count ADK 2.x stores as the flows do: on the compaction, rewind, resume
and retried-timeout stores real google-adk wrote, the model calls per invocation that SQLite
computes over ADK's ``events`` table, and DuckDB over a JSON-lines export of it, equal what
the runaway flow counts from the loaded frames and what ADK recorded making; no marker is an
invocation and no checkpoint keeps one from ending."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from incidentkit import baselines
from incidentkit.evidence import open_evidence
from incidentkit.flows._markers import without_marker_invocations
from incidentkit.flows.runaway import counts
from incidentkit.manifest import Filters

pytestmark = [pytest.mark.adk, pytest.mark.xdist_group("adk2_worlds")]  # one worker builds them

WORLDS = ("compaction", "rewind", "resume", "timeout")


def _export(folder: Path, out: Path) -> Path:
    """The store's ``events`` table as JSON lines, one row per event, the event nested."""
    with sqlite3.connect(folder / "adk.db") as conn:
        rows = conn.execute(
            "SELECT app_name, user_id, session_id, invocation_id, event_data FROM events"
        ).fetchall()
    lines = [
        json.dumps(
            {
                "app_name": app,
                "user_id": user,
                "session_id": session,
                "invocation_id": invocation,
                "event": json.loads(data),
            }
        )
        for app, user, session, invocation, data in rows
    ]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def _histogram(frame: pd.DataFrame) -> dict[int, int]:
    found = frame.groupby("model_calls")["invocations"].sum()
    return {int(k): int(v) for k, v in found.items()}


@pytest.mark.slow
@pytest.mark.parametrize("name", WORLDS)
def test_the_engines_count_model_calls_as_adk_made_them(
    adk2: Callable[[str], Any], name: str, tmp_path: Path
) -> None:
    world = adk2(name)
    evidence = open_evidence(world.store.folder)
    events = evidence.events
    kit = without_marker_invocations(counts.from_events(events, evidence.responses), events)
    want = dict(sorted(kit["model_calls"].value_counts().items()))
    spec = evidence.sources["events"]
    in_sqlite = baselines.call_histogram(spec, Filters())
    assert "SQLite over events" in in_sqlite.where
    assert _histogram(in_sqlite.value) == want
    assert (in_sqlite.value["ended"]).all(), "every invocation ADK ran here ended"
    export = _export(world.store.folder, tmp_path / "events-export.jsonl")
    files = replace(spec, paths=(export,), sqlite_path=None, format=None)
    in_duckdb = baselines.call_histogram(files, Filters())
    assert "DuckDB" in in_duckdb.where
    assert _histogram(in_duckdb.value) == want
    for spec_of_engine in (spec, files):  # a marker is no run, a checkpoint ends none
        summary = baselines.latency_summary(spec_of_engine, Filters()).value
        assert (summary["runs"], summary["ended"]) == (len(kit), len(kit)), spec_of_engine
        runs = baselines.error_buckets(spec_of_engine, Filters(), pd.Timedelta("1D")).value
        assert runs["runs"].sum() == len(kit)
    recorded = getattr(world, "model_calls", None)
    if recorded is not None:  # what ADK counted making, per invocation
        made = pd.Series(dict(recorded)).value_counts()
        assert want == {int(k): int(v) for k, v in sorted(made.items())}
