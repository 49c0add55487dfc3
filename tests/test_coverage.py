from __future__ import annotations

import pandas as pd

from incidentkit.coverage import Coverage, FrameCoverage, JoinGap, join_gaps, render_text
from incidentkit.frames import conform

TS = pd.Timestamp("2026-11-29T03:00:00Z")


def frame(name: str, **columns: list[object]) -> pd.DataFrame:
    from incidentkit.frames import spec_of

    n = len(next(iter(columns.values())))
    data = {col: columns.get(col, [None] * n) for col in spec_of(name).names}
    for col, dtype in spec_of(name).columns:
        if dtype.startswith("datetime") and col not in columns:
            data[col] = [TS] * n
        if dtype in ("bool",) and col not in columns:
            data[col] = [False] * n
        if dtype in ("int64",) and col not in columns:
            data[col] = [0] * n
    return conform(name, pd.DataFrame(data))


def gaps_by_name(gaps: list[JoinGap]) -> dict[str, JoinGap]:
    return {gap.name.strip(): gap for gap in gaps}


def test_join_gaps_count_each_unmatched_row() -> None:
    runs = frame(
        "runs",
        run_id=["r1", "r2", "r3"],
        session_id=["s1", "s2", "s3"],
        invocation_id=["e-1", None, "e-9"],
    )
    events = frame(
        "events", event_id=["v1", "v2"], session_id=["s1", "s2"], invocation_id=["e-1", "e-2"]
    )
    calls = frame(
        "calls",
        call_id=["c1", "c2", "c3"],
        invocation_id=["e-1", "e-1", "e-2"],
        long_running=[False, False, True],
    )
    responses = frame("responses", call_id=["c1", "c7"], invocation_id=["e-1", "e-1"])
    spans = frame("spans", span_id=["a", "b", "c"], invocation_id=["e-1", None, "e-5"])
    journal = frame(
        "journal", key=["k1", "k2"], invocation_id=["e-1", "e-8"], function_call_id=["c1", "zz"]
    )
    gaps = gaps_by_name(
        join_gaps(
            {
                "runs": runs,
                "events": events,
                "calls": calls,
                "responses": responses,
                "spans": spans,
                "journal": journal,
            }
        )
    )
    assert (gaps["runs with no events"].count, gaps["runs with no events"].examples) == (1, ("r3",))
    assert gaps["calls with no response"].count == 2
    assert gaps["of which long-running (awaiting approval)"].examples == ("c3",)
    assert gaps["responses with no call"].examples == ("c7",)
    assert gaps["spans with no invocation id"].examples == ("b",)
    assert gaps["spans of invocations not in the events"].examples == ("c",)
    assert gaps["journal keys with no call"].examples == ("k2",)


def test_join_gaps_need_both_sides() -> None:
    runs = frame("runs", run_id=["r1"], session_id=["s1"])
    assert join_gaps({"runs": runs}) == []


def test_render_text_shows_errors_and_gaps() -> None:
    report = Coverage(
        title="INC-1",
        manifest="/x/evidence.toml",
        window=None,
        frames=(FrameCoverage("runs", "ledger", "error", 0, None, None, "boom: 'x'. fix it"),),
        rejects=(),
        joins=(JoinGap("calls with no response", 2, 5, ("c1", "c2")),),
    )
    text = render_text(report)
    assert "! ledger: boom: 'x'. fix it" in text
    assert "calls with no response" in text and "e.g. c1, c2" in text
    assert not report.complete
