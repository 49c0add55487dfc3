"""A ``run.end`` stamped before its run's first ``run.start`` (clock skew between the workers
of a resumed run, or a reused invocation id) ends nothing that start began: the run is open
from its start, and at a moment before that start it is not there at all (Hypothesis found
the phantom hang this once gave: the end's time taken as the start of a resumed run)."""

from __future__ import annotations

import pandas as pd

from incidentkit.flows.latency_cliff import Frames, triage_latency
from incidentkit.flows.latency_cliff.latency import from_diagnostics
from incidentkit.frames import build

T0 = pd.Timestamp("2026-11-29T03:00:00Z")


def _log(*lines: tuple[str, str, float, dict[str, object]]) -> pd.DataFrame:
    rows = [
        {"kind": kind, "invocation_id": inv, "ts": T0 + pd.Timedelta(seconds=s), **fields}
        for kind, inv, s, fields in lines
    ]
    return build("diagnostics", [{"app_name": "support", **row} for row in rows])


LOG = _log(
    ("run.end", "late", 0.2, {"ms": 1, "outcome": "ok"}),
    ("run.start", "ok", 5.0, {}),
    ("run.end", "ok", 6.0, {"ms": 1000, "outcome": "ok"}),
    ("run.start", "late", 1600.0, {"session_id": "s1"}),
    ("run.start", "late", 1600.0, {"session_id": "s1"}),  # started again: a resumed run
)


def test_an_end_before_the_start_leaves_the_run_open() -> None:
    got = from_diagnostics(LOG).set_index("invocation_id")
    assert bool(got.loc["late", "open"]) and pd.isna(got.loc["late", "ended_at"])
    assert got.loc["late", "started_at"] == T0 + pd.Timedelta(seconds=1600)
    assert not bool(got.loc["ok", "open"]) and got.loc["ok", "ms"] == 1000


def test_before_its_start_the_run_is_neither_timed_nor_hung() -> None:
    report = triage_latency(Frames(diagnostics=LOG), as_of=T0 + pd.Timedelta(seconds=1277))
    assert list(report.series["invocation_id"]) == ["ok"]
    assert report.open.empty


def test_after_its_start_the_run_is_open_from_that_start() -> None:
    as_of = T0 + pd.Timedelta(seconds=1700)
    report = triage_latency(Frames(diagnostics=LOG), as_of=as_of)
    late = report.series.set_index("invocation_id").loc["late"]
    assert bool(late["open"]) and late["started_at"] == T0 + pd.Timedelta(seconds=1600)
    assert late["ms"] == 100_000  # its age at as_of, not 28 minutes from the stray end
