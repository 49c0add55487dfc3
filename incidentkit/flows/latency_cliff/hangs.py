"""Invocations still open at ``as_of``, and what each was doing: the shape of its last event.

A hung invocation fails nothing, so no error alert fires; the diagnostics log shows a
``run.start`` with no ``run.end``, and the session's last event says where it waits (seed 003):
a function call with no response is a tool that never returned; a user message or a function
response as the last event means a model call is in flight; no event at all means the run
never reached the log.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import numpy as np
import pandas as pd

from incidentkit.flows._frames import as_columns, choose
from incidentkit.frames import BOOL, FLOAT, INT, OBJ, STR, TS, RunStatus


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
}
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

    For an unanswered call, ``tool`` and ``call_id`` name the invocation's last call that no
    response answers. ``lease_expired`` marks one whose ledger run is RUNNING with a lease
    that expired before ``as_of``: its worker is gone, so it is an orphan, not a hang.
    """
    age = (as_of - latency["started_at"]).dt.total_seconds()
    past = latency["open"] & age.gt(older_than_s)
    hung = latency.loc[past].assign(open_for_s=age[past].round(1))
    if hung.empty:
        return as_columns(pd.DataFrame(columns=list(OPEN_COLUMNS)), OPEN_COLUMNS)
    ids = hung["invocation_id"].dropna()
    mine = events.loc[events["invocation_id"].isin(ids)]
    last = mine.sort_values(["session_id", "seq"], kind="stable").drop_duplicates(
        "invocation_id", keep="last"
    )
    pending = calls.loc[
        calls["invocation_id"].isin(ids) & ~calls["call_id"].isin(responses["call_id"])
    ]
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
    out = found.assign(last_event_kind=kind, lease_expired=_lease_expired(found, runs, as_of))
    return as_columns(out.sort_values("started_at", kind="stable"), OPEN_COLUMNS)


def _lease_expired(
    found: pd.DataFrame, runs: pd.DataFrame | None, as_of: pd.Timestamp
) -> np.ndarray:
    if runs is None or runs.empty:
        return np.zeros(len(found), dtype=bool)
    dead = runs.loc[runs["status"].eq(RunStatus.RUNNING) & runs["lease_until"].lt(as_of)]
    flags: np.ndarray = found["run_id"].isin(dead["run_id"]).to_numpy(dtype=bool)
    return flags


def by_last_event(hung: pd.DataFrame, *, sample: int = SAMPLE_IDS) -> pd.DataFrame:
    """Open invocations grouped by (last event kind, tool), largest group first, each with a
    few of its invocation ids."""
    if hung.empty:
        return as_columns(pd.DataFrame(columns=list(BY_LAST_EVENT_COLUMNS)), BY_LAST_EVENT_COLUMNS)
    keyed = hung.assign(tool=hung["tool"].fillna(""))
    grouped = keyed.groupby(["last_event_kind", "tool"], sort=False)
    out = grouped.agg(
        count=("invocation_id", "size"),
        invocation_ids=("invocation_id", lambda ids: tuple(ids.dropna().head(sample))),
    ).reset_index()
    out["tool"] = out["tool"].replace("", np.nan)
    out = out.sort_values(["count", "last_event_kind"], ascending=[False, True], kind="stable")
    return as_columns(out, BY_LAST_EVENT_COLUMNS)
