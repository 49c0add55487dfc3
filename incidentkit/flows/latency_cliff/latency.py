"""Latency per invocation from each source that can tell it, and percentiles per time bucket.

Four sources can time an invocation, best first (:data:`SOURCES`): the diagnostics plugin's
``run.start``/``run.end ms=`` lines, the ``invocation`` span, the ledger (``started_at`` to a
terminal row's ``updated_at``) and the event log (first to last event). Each gives the same
frame (:data:`LATENCY_COLUMNS`); :func:`cross_check` compares the best with the others.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from incidentkit.flows._frames import as_columns, empty_view
from incidentkit.flows._markers import turns, without_marker_invocations
from incidentkit.frames import BOOL, FLOAT, INT, STR, TS, RunStatus, SpanKind

SOURCES = ("diagnostics", "spans", "ledger", "events")
"""The latency sources, best first."""

SOURCE_LABELS: Mapping[str, str] = {
    "diagnostics": "diagnostics run.start/run.end ms",
    "spans": "invocation spans",
    "ledger": "ledger started_at -> updated_at",
    "events": "event log, first -> last event",
}

LATENCY_COLUMNS: Mapping[str, str] = {
    "invocation_id": STR,
    "run_id": STR,
    "session_id": STR,
    "started_at": TS,
    "ended_at": TS,
    "ms": FLOAT,
    "error": BOOL,
    "open": BOOL,
    "source": STR,
}
"""One row per invocation: ``ms`` is NaN and ``open`` true while it has not ended."""

_TERMINAL = (RunStatus.DONE, RunStatus.FAILED, RunStatus.PARKED)
_FAILED = (RunStatus.FAILED, RunStatus.PARKED)


def empty_latency() -> pd.DataFrame:
    """A latency frame with no invocation."""
    return empty_view(LATENCY_COLUMNS)


def _frame(data: Mapping[str, object], source: str) -> pd.DataFrame:
    frame = pd.DataFrame(data)
    frame["source"] = source
    for name in LATENCY_COLUMNS:
        if name not in frame:
            frame[name] = np.nan
    return as_columns(frame.sort_values("started_at", kind="stable"), LATENCY_COLUMNS)


def from_diagnostics(diagnostics: pd.DataFrame) -> pd.DataFrame:
    """Each ``run.start`` with its ``run.end`` (``ms=`` as logged, else the time between).

    A run with a ``run.error`` line, or a ``run.end outcome=error``, failed. A ``run.end``
    whose ``run.start`` is not in the log is left out: its start, and so its app, is unknown;
    one stamped before its run's first ``run.start`` ends no run that start began (the run is
    open as far as the log shows).
    """
    kind = diagnostics["kind"]
    starts = diagnostics.loc[kind.eq("run.start") & diagnostics["invocation_id"].notna()]
    starts = starts.drop_duplicates("invocation_id", keep="first")
    if starts.empty:
        return empty_latency()
    ends = diagnostics.loc[kind.eq("run.end") & diagnostics["invocation_id"].notna()]
    ends = ends.drop_duplicates("invocation_id", keep="last")
    failed = diagnostics.loc[kind.eq("run.error"), "invocation_id"].dropna().unique()
    paired = starts[["invocation_id", "session_id", "ts"]].merge(
        ends[["invocation_id", "ts", "ms", "outcome"]],
        on="invocation_id",
        how="left",
        suffixes=("", "_end"),
    )
    before = paired["ts_end"].lt(paired["ts"])  # an end logged before the start it would end
    if before.any():
        paired.loc[before, ["ts_end", "ms", "outcome"]] = None
    ids, ended_at = paired["invocation_id"], paired["ts_end"]
    logged = pd.to_numeric(paired["ms"], errors="coerce").astype(FLOAT)
    between = (ended_at - paired["ts"]).dt.total_seconds() * 1000
    outcome = paired["outcome"]
    return _frame(
        {
            "invocation_id": ids,
            "session_id": paired["session_id"],
            "started_at": paired["ts"],
            "ended_at": ended_at,
            "ms": logged.where(logged >= 0).fillna(between),
            "error": outcome.eq("error").to_numpy(dtype=bool) | ids.isin(failed).to_numpy(),
            "open": ended_at.isna(),
        },
        "diagnostics",
    )


def from_spans(spans: pd.DataFrame) -> pd.DataFrame:
    """Each ``invocation`` span: its duration, and whether its status is ERROR.

    An invocation still running has no exported span, so this source shows no open run.
    """
    roots = spans.loc[spans["kind"].eq(SpanKind.INVOCATION) & spans["invocation_id"].notna()]
    roots = roots.sort_values("start", kind="stable").drop_duplicates("invocation_id")
    if roots.empty:
        return empty_latency()
    return _frame(
        {
            "invocation_id": roots["invocation_id"],
            "session_id": roots["session_id"],
            "started_at": roots["start"],
            "ended_at": roots["end"],
            "ms": roots["duration_ms"],
            "error": roots["status"].eq("ERROR").to_numpy(dtype=bool),
            "open": roots["end"].isna(),
        },
        "spans",
    )


def from_ledger(runs: pd.DataFrame) -> pd.DataFrame:
    """Each ledger run: ``started_at`` to ``updated_at`` once terminal; RUNNING rows are open.

    PAUSED runs wait for a person, not for the agent: they are left out.
    """
    kept = runs.loc[runs["status"].ne(RunStatus.PAUSED) & runs["started_at"].notna()]
    if kept.empty:
        return empty_latency()
    terminal = kept["status"].isin(_TERMINAL)
    ended_at = kept["updated_at"].where(terminal)
    return _frame(
        {
            "invocation_id": kept["invocation_id"],
            "run_id": kept["run_id"],
            "session_id": kept["session_id"],
            "started_at": kept["started_at"],
            "ended_at": ended_at,
            "ms": (ended_at - kept["started_at"]).dt.total_seconds() * 1000,
            "error": kept["status"].isin(_FAILED).to_numpy(dtype=bool),
            "open": kept["status"].eq(RunStatus.RUNNING).to_numpy(dtype=bool),
        },
        "ledger",
    )


def answered_by_error(events: pd.DataFrame, calls: pd.DataFrame) -> pd.Series:
    """Whether each call of ``calls`` is followed by an error event of its invocation (a later
    ``seq`` of its session): the tool raised and ADK stored the error instead of a response
    (``workflow/_node_runner.py``: a node's exception becomes an event with ``error_code``, and
    a ``RetryConfig`` runs the node again with a new call). Such a call waits on nothing."""
    errors = events.loc[events["error_code"].notna() & events["invocation_id"].notna()]
    if errors.empty or calls.empty:
        return pd.Series(False, index=calls.index, dtype=bool)
    last = errors.groupby(["session_id", "invocation_id"], dropna=False)["seq"].max()
    keys = pd.MultiIndex.from_frame(calls[["session_id", "invocation_id"]])
    after = pd.Series(last.reindex(keys).to_numpy(), index=calls.index)
    return calls["seq"].lt(after).fillna(False).astype(bool)


def waiting_calls(events: pd.DataFrame, calls: pd.DataFrame, responses: pd.DataFrame) -> pd.Series:
    """Whether each call of ``calls`` still waits: no response answers it and no later error
    event of its invocation ended it (:func:`answered_by_error`)."""
    return ~calls["call_id"].isin(responses["call_id"]) & ~answered_by_error(events, calls)


def from_events(events: pd.DataFrame, calls: pd.DataFrame, responses: pd.DataFrame) -> pd.DataFrame:
    """Each invocation of the event log: first to last turn (markers are no part of its time).

    It has ended when its last turn (markers aside: a resumable app closes every agent with a
    content-less checkpoint, ``events/event_actions.py`` ``end_of_agent``) is a final response
    and none of its calls waits (:func:`waiting_calls`; a long-running call, the run paused on
    it, does not); an event with an error code marks it failed. A marker's own invocation (a
    compaction, a rewind) is no run.
    """
    inv = without_marker_invocations(events.loc[events["invocation_id"].notna()], events)
    if inv.empty:
        return empty_latency()
    inv = inv.sort_values(["session_id", "seq"], kind="stable")
    grouped = inv.groupby("invocation_id", sort=False)
    first = grouped.first()
    said = turns(inv).groupby("invocation_id", sort=False)
    last = said["final_response"].last()
    started = said["ts"].min().reindex(first.index)
    finished = said["ts"].max().reindex(first.index)
    errors = inv["error_code"].notna().groupby(inv["invocation_id"], sort=False).any()
    waiting = waiting_calls(events, calls, responses)
    if "long_running" in calls:  # a long-running call pauses the run by design (ADK's rule)
        waiting &= ~calls["long_running"].astype(bool)
    unanswered = calls.loc[waiting, "invocation_id"]
    final = last.reindex(first.index, fill_value=False).astype(bool)
    ended = final & ~first.index.isin(unanswered.dropna())
    ended_at = finished.where(ended)
    return _frame(
        {
            "invocation_id": first.index.to_series(),
            "session_id": first["session_id"],
            "started_at": started,
            "ended_at": ended_at,
            "ms": (ended_at - started).dt.total_seconds() * 1000,
            "error": errors.reindex(first.index, fill_value=False).to_numpy(dtype=bool),
            "open": ended_at.isna(),
        },
        "events",
    )


def attach_runs(latency: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """``latency`` with ``run_id`` filled from the ledger row of each invocation."""
    if runs.empty or latency.empty:
        return latency
    by_invocation = runs.dropna(subset=["invocation_id"]).drop_duplicates("invocation_id")
    found = latency["invocation_id"].map(by_invocation.set_index("invocation_id")["run_id"])
    return latency.assign(run_id=latency["run_id"].fillna(found))


DISAGREEMENT_COLUMNS: Mapping[str, str] = {
    "invocation_id": STR,
    "source": STR,
    "other_source": STR,
    "started_at": TS,
    "ms": FLOAT,
    "other_ms": FLOAT,
    "open": BOOL,
    "other_open": BOOL,
    "detail": STR,
}


def cross_check(
    best: pd.DataFrame,
    others: Mapping[str, pd.DataFrame],
    *,
    tolerance_ms: float = 2000.0,
    tolerance_share: float = 0.2,
) -> pd.DataFrame:
    """Invocations where another source disagrees with the best one.

    Two sources disagree on an invocation both hold when one has it open and the other ended
    (a run.start with no run.end beside a stored final response: the worker died after the
    answer; a RUNNING ledger row beside a run.end: a lost ledger update), or when their
    latencies differ by more than ``tolerance_ms`` and ``tolerance_share`` of the larger.
    Three differences are expected, not disagreements: an invocation one source lacks (spans
    are sampled; a running invocation exports none), a ledger run longer than the invocation
    (a paused or re-driven run spans several), and an invocation that ended in an error but
    has no final event.
    """
    parts = []
    for name, other in others.items():
        both = best.merge(
            other[["invocation_id", "ms", "open", "error"]].dropna(subset=["invocation_id"]),
            on="invocation_id",
            suffixes=("", "_o"),
        )
        if both.empty:
            continue
        delta = both["ms"] - both["ms_o"]
        gap = delta.where(delta > 0, 0) if name == "ledger" else delta.abs()
        widest = both[["ms", "ms_o"]].max(axis=1)
        far = gap.gt(tolerance_ms) & gap.gt(tolerance_share * widest)
        failed = (both["open"] & both["error_o"].astype(bool)) | (
            both["open_o"].astype(bool) & both["error"]
        )
        state = both["open"].ne(both["open_o"])
        if name == "events":
            state &= ~failed
        bad = both.loc[far | state]
        if bad.empty:
            continue
        detail = np.where(
            state[far | state],
            np.where(bad["open"], "open in ", "ended in ")
            + bad["source"]
            + ", "
            + np.where(bad["open_o"], "open in ", "ended in ")
            + name,
            bad["source"]
            + " says "
            + _ms_text(bad["ms"])
            + " ms, "
            + name
            + " "
            + _ms_text(bad["ms_o"])
            + " ms",
        )
        parts.append(
            pd.DataFrame(
                {
                    "invocation_id": bad["invocation_id"],
                    "source": bad["source"],
                    "other_source": name,
                    "started_at": bad["started_at"],
                    "ms": bad["ms"],
                    "other_ms": bad["ms_o"],
                    "open": bad["open"],
                    "other_open": bad["open_o"].astype(bool),
                    "detail": detail,
                }
            )
        )
    if not parts:
        return empty_view(DISAGREEMENT_COLUMNS)
    out = pd.concat(parts, ignore_index=True).sort_values(["started_at", "other_source"])
    return as_columns(out, DISAGREEMENT_COLUMNS)


def _ms_text(ms: pd.Series) -> pd.Series:
    """Milliseconds as whole-number text; ``?`` where unknown."""
    text: pd.Series = ms.round().astype("Int64").astype(str).replace("<NA>", "?")
    return text


BUCKET_COLUMNS: Mapping[str, str] = {
    "bucket": TS,
    "runs": INT,
    "ended": INT,
    "open": INT,
    "errors": INT,
    "p50_ms": FLOAT,
    "p95_ms": FLOAT,
    "p99_ms": FLOAT,
}


def per_bucket(latency: pd.DataFrame, bucket: pd.Timedelta) -> pd.DataFrame:
    """Per UTC bucket of start time: runs started, ended, still open, errors, and the p50, p95
    and p99 of the ended runs' latency (NaN when none ended). Empty buckets are listed too."""
    if latency.empty:
        return empty_view(BUCKET_COLUMNS)
    keys = latency["started_at"].dt.floor(bucket)
    grouped = latency.groupby(keys)
    counts = pd.DataFrame(
        {
            "runs": grouped.size(),
            "open": grouped["open"].sum(),
            "errors": grouped["error"].sum(),
        }
    )
    done = latency.loc[~latency["open"] & latency["ms"].notna()]
    by_bucket = done["ms"].groupby(keys[done.index])
    quantiles = pd.DataFrame(
        {f"p{round(q * 100)}_ms": by_bucket.quantile(q) for q in (0.5, 0.95, 0.99)}
    )
    ended = done.groupby(keys[done.index]).size().rename("ended")
    table = counts.join(ended).join(quantiles)
    full = pd.date_range(table.index.min(), table.index.max(), freq=bucket)
    table = table.reindex(full).rename_axis("bucket").reset_index()
    for name in ("runs", "ended", "open", "errors"):
        table[name] = table[name].fillna(0)
    return as_columns(table, BUCKET_COLUMNS)
