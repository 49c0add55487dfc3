"""Invocations still open at ``as_of``, what each was doing (the shape of its last event), and
whether its worker died (an orphan, not a hang).

A hung invocation fails nothing, so no error alert fires; the diagnostics log shows a
``run.start`` with no ``run.end``, and the session's last event says where it waits:
a function call with no response is a tool that never returned; a user message or a function
response as the last event means a model call is in flight; no event at all means the run
never reached the log. An invocation of a worker that died looks the same in those logs;
the ledger tells them apart (a row whose lease expired belongs to a dead worker).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import numpy as np
import pandas as pd

from incidentkit.flows._frames import as_columns, choose, empty_view
from incidentkit.flows.latency_cliff.latency import waiting_calls
from incidentkit.frames import BOOL, FLOAT, INT, OBJ, STR, TS, RunStatus


class Orphaned(enum.StrEnum):
    """Why an open invocation is the orphan of a dead worker, not a hang."""

    LEASE_EXPIRED = "lease_expired"
    """Its ledger run is RUNNING and the lease ran out before as_of: nobody renews it."""
    REDRIVEN = "redriven"
    """Its ledger run was claimed again (attempts > 0) and runs another invocation since: a
    sweeper took it over once its lease had run out."""
    SESSION_SILENT = "session_silent"
    """No ledger: its session has shown no event for longer than the client timeout while
    other sessions of the app went on (presumed; a ledger would prove it)."""


class LastEvent(enum.StrEnum):
    """The shape of an open invocation's last stored event."""

    UNANSWERED_FUNCTION_CALL = "unanswered_function_call"
    MODEL_CALL_IN_FLIGHT = "model_call_in_flight"
    NO_EVENTS = "no_events"


OPEN_COLUMNS: Mapping[str, str] = {
    "invocation_id": STR,
    "run_id": STR,
    "session_id": STR,
    "started_at": TS,
    "open_for_s": FLOAT,
    "last_event_kind": STR,
    "tool": STR,
    "call_id": STR,
    "last_event_at": TS,
    "lease_expired": BOOL,
    "source": STR,
    "orphaned": BOOL,
    "orphan_reason": STR,
    "owner": STR,
}
"""``orphaned``: the invocation's worker died (``orphan_reason``, an :class:`Orphaned`;
``owner`` the ledger's worker): an orphan for the orphans flow, not a hang."""
MATCH_SLACK = pd.Timedelta(seconds=5)
"""How long after its invocation's first record a ledger run may start and still be its run
(the row is written before ``runAsync``; clocks differ a little)."""
BY_LAST_EVENT_COLUMNS: Mapping[str, str] = {
    "last_event_kind": STR,
    "tool": STR,
    "count": INT,
    "invocation_ids": OBJ,
}
SAMPLE_IDS = 5
"""How many invocation ids each last-event group lists."""


def open_invocations(
    latency: pd.DataFrame,
    events: pd.DataFrame,
    calls: pd.DataFrame,
    responses: pd.DataFrame,
    *,
    as_of: pd.Timestamp,
    older_than_s: float,
    runs: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The open rows of ``latency`` started more than ``older_than_s`` before ``as_of``, each
    with the shape of its last stored event (:class:`LastEvent`), oldest first.

    For an unanswered call, ``tool`` and ``call_id`` name the invocation's last call that still
    waits (:func:`.latency.waiting_calls`: no response, no later error event). ``orphaned``
    marks one whose worker died (:class:`Orphaned`): with a ledger, its run (its own, else its
    session's latest run started by then) is RUNNING with a lease that expired before
    ``as_of`` (``lease_expired``), or was claimed again and runs another invocation since;
    with no ledger, its session has been silent for longer than the client timeout while
    other sessions of the app went on. An orphan is for the orphans flow, not a hang.
    """
    age = (as_of - latency["started_at"]).dt.total_seconds()
    past = latency["open"] & age.gt(older_than_s)
    hung = latency.loc[past].assign(open_for_s=age[past].round(1))
    if hung.empty:
        return empty_view(OPEN_COLUMNS)
    ids = hung["invocation_id"].dropna()
    mine = events.loc[events["invocation_id"].isin(ids)]
    last = mine.sort_values(["session_id", "seq"], kind="stable").drop_duplicates(
        "invocation_id", keep="last"
    )
    pending = calls.loc[calls["invocation_id"].isin(ids) & waiting_calls(events, calls, responses)]
    pending = pending.sort_values(["session_id", "seq"], kind="stable").drop_duplicates(
        "invocation_id", keep="last"
    )
    found = hung.reset_index(drop=True).merge(
        pending[["invocation_id", "name", "call_id"]].rename(columns={"name": "tool"}),
        on="invocation_id",
        how="left",
    )
    found = found.merge(
        last[["invocation_id", "ts"]].rename(columns={"ts": "last_event_at"}),
        on="invocation_id",
        how="left",
    )
    kind = choose(
        [found["tool"].notna(), found["last_event_at"].notna()],
        [LastEvent.UNANSWERED_FUNCTION_CALL.value, LastEvent.MODEL_CALL_IN_FLIGHT.value],
        LastEvent.NO_EVENTS.value,
        found.index,
    )
    found = found.assign(last_event_kind=kind)
    if runs is not None and len(runs):
        found = _by_ledger(found, runs, as_of)
    else:
        found = _by_silence(found, events, as_of, older_than_s)
    return as_columns(found.sort_values("started_at", kind="stable"), OPEN_COLUMNS)


def _by_ledger(found: pd.DataFrame, runs: pd.DataFrame, as_of: pd.Timestamp) -> pd.DataFrame:
    """``found`` with each invocation's ledger run (its own, else its session's latest run
    started by its start) and whether that run shows its worker died: a RUNNING run whose
    lease ran out before ``as_of``, or a run claimed again that runs another invocation."""
    cols = ["run_id", "invocation_id", "status", "lease_until", "attempts", "owner"]
    by_run = runs.dropna(subset=["run_id"]).drop_duplicates("run_id", keep="last")
    mine = found[["run_id"]].merge(by_run[cols], on="run_id", how="left")
    own = runs.dropna(subset=["invocation_id"]).drop_duplicates("invocation_id", keep="last")
    by_inv = found[["invocation_id"]].merge(own[cols], on="invocation_id", how="left")
    mine = mine.where(mine["status"].notna(), by_inv)  # the run attached, else the one naming it
    stamp = pd.DatetimeTZDtype("ns", "UTC")  # merge_asof wants one resolution on both sides
    left = found[["session_id"]].assign(at=(found["started_at"] + MATCH_SLACK).astype(stamp))
    left = left.dropna(subset=["session_id", "at"]).sort_values("at", kind="stable")
    right = runs.dropna(subset=["session_id", "started_at"])
    right = right.assign(started_at=right["started_at"].astype(stamp)).sort_values("started_at")
    near = pd.merge_asof(
        left,
        right[["session_id", "started_at", *cols]].rename(
            columns={"started_at": "run_start", "invocation_id": "run_invocation"}
        ),
        left_on="at",
        right_on="run_start",
        by="session_id",
        direction="backward",
    ).set_axis(left.index)
    near = near.reindex(found.index)
    by_id = mine["run_id"].notna().to_numpy()
    run = pd.DataFrame(
        {
            c: np.where(by_id, mine[c].to_numpy(dtype=object), near[c].to_numpy(dtype=object))
            for c in ("run_id", "status", "lease_until", "attempts", "owner")
        },
        index=found.index,
    )
    own_name = mine["invocation_id"].fillna(found["invocation_id"]).to_numpy(dtype=object)
    named = pd.Series(
        np.where(by_id, own_name, near["run_invocation"].to_numpy(dtype=object)),
        index=found.index,
        dtype=object,
    )
    its_own = named.isna() | named.eq(found["invocation_id"])
    lease = pd.to_datetime(run["lease_until"], utc=True)
    expired = (run["status"].eq(RunStatus.RUNNING) & lease.lt(as_of) & its_own).astype(bool)
    attempts = pd.to_numeric(run["attempts"], errors="coerce").fillna(0)
    redriven = (~its_own & run["run_id"].notna() & attempts.gt(0)).astype(bool)
    reason = choose(
        [expired, redriven],
        [Orphaned.LEASE_EXPIRED.value, Orphaned.REDRIVEN.value],
        None,
        found.index,
    )
    return found.assign(
        run_id=found["run_id"].fillna(run["run_id"].where(its_own | redriven)),
        lease_expired=expired,
        orphaned=expired | redriven,
        orphan_reason=reason,
        owner=run["owner"].where(expired),  # a re-driven run names its new owner
    )


def _by_silence(
    found: pd.DataFrame, events: pd.DataFrame, as_of: pd.Timestamp, timeout_s: float
) -> pd.DataFrame:
    """``found`` with the orphans of a dead worker as the events alone show them (no ledger):
    the session silent for longer than the client timeout while another session of the app
    logged an event after that, unless the tool it waits on hangs other invocations at other
    times too (a dependency that stalls, not a worker that died)."""
    timeout = pd.Timedelta(seconds=timeout_s)
    logged = events.dropna(subset=["session_id", "ts"])
    if logged["session_id"].nunique() < 2:  # no event log, or no other session to go on
        return found.assign(lease_expired=False, orphaned=False, orphan_reason=None, owner=None)
    last = logged.groupby("session_id")["ts"].max()
    start = found["started_at"]
    since = pd.to_datetime(found["session_id"].map(last), utc=True).astype(start.dtype)
    since = since.where(since.gt(start), start)  # silent since its last event, or its start
    ranked = last.sort_values(ascending=False)  # two sessions or more (checked above)
    times = ranked.to_numpy()
    is_top = found["session_id"].eq(str(ranked.index[0])).to_numpy()
    others = pd.Series(  # the latest event of another session than the row's
        pd.to_datetime(np.where(is_top, times[1], times[0]), utc=True), index=found.index
    )
    silent = (as_of - since).gt(timeout) & others.gt(since + timeout)
    stalls = found.loc[silent & found["tool"].notna()].assign(since=since)
    stalled = pd.Series(False, index=found.index)
    if len(stalls):  # a tool that hangs invocations at times further apart than the timeout
        by_tool = stalls.groupby("tool")["since"]
        spread = (by_tool.max() - by_tool.min()).dt.total_seconds()
        stalled = found["tool"].map(spread).gt(timeout_s).fillna(False).astype(bool)
    orphaned = (silent & ~stalled).astype(bool)
    return found.assign(
        lease_expired=False,
        orphaned=orphaned,
        orphan_reason=pd.Series(Orphaned.SESSION_SILENT.value, index=found.index).where(orphaned),
        owner=None,
    )


def alive(hung: pd.DataFrame, which: pd.Series) -> pd.DataFrame:
    """``hung`` with the presumed orphans (:attr:`Orphaned.SESSION_SILENT`) that ``which``
    marks counted as hangs again: the evidence shows their worker alive (stuck threads tied to
    their tool, healthy runs queued behind them)."""
    revived = hung["orphan_reason"].eq(Orphaned.SESSION_SILENT) & which.reindex(
        hung.index, fill_value=False
    ).astype(bool)
    if not revived.any():
        return hung
    return hung.assign(
        orphaned=hung["orphaned"] & ~revived,
        orphan_reason=hung["orphan_reason"].mask(revived),
    )


def by_last_event(hung: pd.DataFrame, *, sample: int = SAMPLE_IDS) -> pd.DataFrame:
    """Open invocations grouped by (last event kind, tool), largest group first, each with a
    few of its invocation ids."""
    if hung.empty:
        return empty_view(BY_LAST_EVENT_COLUMNS)
    keyed = hung.assign(tool=hung["tool"].fillna(""))
    grouped = keyed.groupby(["last_event_kind", "tool"], sort=False)
    out = grouped.agg(
        count=("invocation_id", "size"),
        invocation_ids=("invocation_id", lambda ids: tuple(ids.dropna().head(sample))),
    ).reset_index()
    out["tool"] = out["tool"].replace("", np.nan)
    out = out.sort_values(["count", "last_event_kind"], ascending=[False, True], kind="stable")
    return as_columns(out, BY_LAST_EVENT_COLUMNS)
