"""A sweeper's classifier for every run at once: find its invocation in the log, then its class.

Merges and group-bys over the whole log; no per-run query and no loop over events.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

import numpy as np
import pandas as pd

from incidentkit.flows._frames import as_columns, choose, per_group, rows_in, tuples
from incidentkit.flows._markers import is_marker
from incidentkit.frames import STR, require_columns, spec_of


class OrphanClass(enum.StrEnum):
    """What the log says about a run (a sweeper's classes, plus UNKNOWN)."""

    NOT_STARTED = "NOT_STARTED"
    MODEL_INFLIGHT = "MODEL_INFLIGHT"
    TOOL_UNANSWERED = "TOOL_UNANSWERED"
    PAUSED = "PAUSED"
    ACTUALLY_DONE = "ACTUALLY_DONE"
    UNKNOWN = "UNKNOWN"


class Log(NamedTuple):
    """The events frame prepared once for every lookup (see :func:`read_log`)."""

    events: pd.DataFrame
    """Positional copy of the events' invocation_id, seq, ts, author, final_response,
    error_code, plus ``sk`` (session code), ``lr_n`` (how many long-running call ids the
    event carries) and ``marker`` (a compaction, rewind or checkpoint: no turn)."""
    sessions: pd.DataFrame
    """app_name, user_id, session_id and ``sk`` of each session."""
    invocations: pd.DataFrame
    """One row per (sk, invocation_id) with turns: n_events (its turns), any_lr and its last
    turn's seq, ts, author, final flag, error code, lr_n and long-running ids. Markers are
    left out: a resumable app closes every agent with a checkpoint after its answer
    (``events/event_actions.py`` ``end_of_agent``), and a marker's own invocation is no run."""


def read_log(events: pd.DataFrame) -> Log:
    """Session codes for ``events``, the sessions, and every invocation with its tail."""
    skeys = ["app_name", "user_id", "session_id"]
    sk = events.groupby(skeys, dropna=False, sort=False).ngroup().to_numpy(dtype=np.int64)
    cols = ["invocation_id", "seq", "ts", "author", "final_response", "error_code"]
    ev = events[cols].reset_index(drop=True)
    ev["sk"] = sk
    sizes = pd.to_numeric(events["long_running_tool_ids"].str.len(), errors="coerce")
    ev["lr_n"] = sizes.fillna(0).to_numpy(dtype=np.int64)
    ev["marker"] = is_marker(events).to_numpy(dtype=bool)
    sessions = events[skeys].reset_index(drop=True).assign(sk=sk).drop_duplicates("sk")

    valid = ev[ev["invocation_id"].notna() & ~ev["marker"]]
    agg = (
        valid.groupby(["sk", "invocation_id"], sort=False)
        .agg(n_events=("seq", "size"), any_lr=("lr_n", "max"), last=("seq", "idxmax"))
        .reset_index()
    )
    tail = ev.loc[agg["last"].to_numpy()]
    agg["any_lr"] = agg["any_lr"] > 0
    agg["last_seq"] = tail["seq"].to_numpy()
    agg["last_ts"] = tail["ts"].reset_index(drop=True)
    agg["last_author"] = tail["author"].reset_index(drop=True)
    agg["last_final"] = tail["final_response"].to_numpy(dtype=bool)
    agg["last_error"] = tail["error_code"].reset_index(drop=True).astype(STR)
    agg["last_lr_n"] = tail["lr_n"].to_numpy()
    lr_ids = events["long_running_tool_ids"].to_numpy(dtype=object)
    agg["long_running_ids"] = lr_ids[agg["last"].to_numpy(dtype=np.int64)]
    return Log(ev, sessions, agg.drop(columns="last"))


def locate(runs: pd.DataFrame, log: Log) -> pd.DataFrame:
    """Ledger rows (``row``: position) with their session code ``sk`` (-1: no events) and
    invocation id: the ledger's, else recovered from the user event."""
    cols = ["run_id", "app_name", "user_id", "session_id", "invocation_id", "request"]
    cols += ["status", "owner", "lease_until", "attempts", "started_at"]
    out = runs[cols].reset_index(drop=True)
    out.insert(0, "row", np.arange(len(out)))
    # Events without app/user (e.g. a bare JSONL event dump) match any run of that session id.
    sessions = log.sessions
    cand = out.loc[out["session_id"].notna(), ["row", "app_name", "user_id", "session_id"]].merge(
        sessions[sessions["session_id"].notna()].rename(
            columns={"app_name": "ev_app", "user_id": "ev_user"}
        ),
        on="session_id",
    )
    fits = (cand["ev_app"].isna() | (cand["ev_app"] == cand["app_name"])) & (
        cand["ev_user"].isna() | (cand["ev_user"] == cand["user_id"])
    )
    cand = cand[fits]
    exact = cand["ev_app"].notna().astype(int) + cand["ev_user"].notna().astype(int)
    best = cand.assign(exact=exact).sort_values(["row", "exact"], ascending=[True, False])
    best_sk = best.drop_duplicates("row").set_index("row")["sk"]
    out["sk"] = out["row"].map(best_sk).fillna(-1).astype(np.int64)

    # runAsync does not emit the user event, so the ledger may lack the invocation id: take
    # the first stored user event of the session at or after the run's start (a compaction or
    # a rewind, authored "user" too, is no user's message).
    need = out.loc[
        out["invocation_id"].isna() & (out["sk"] >= 0) & out["started_at"].notna(),
        ["row", "sk", "started_at"],
    ]
    ev = log.events
    users = ev.loc[ev["author"].eq("user") & ~ev["marker"], ["sk", "seq", "ts", "invocation_id"]]
    hits = need.merge(users, on="sk")
    hits = hits[hits["ts"] >= hits["started_at"]].sort_values(["row", "seq"])
    hits = hits.drop_duplicates("row")[["row", "seq", "ts", "invocation_id"]].rename(
        columns={"seq": "recovered_seq", "ts": "recovered_ts", "invocation_id": "recovered"}
    )
    out = out.merge(hits, on="row", how="left")
    from_ledger = out["invocation_id"].notna()
    out["invocation_id"] = out["invocation_id"].where(from_ledger, out["recovered"]).astype(STR)
    out["invocation_source"] = choose(
        [from_ledger, out["recovered"].notna()], ["ledger", "user_event"], None, out.index
    )
    return out.drop(columns="recovered")


def answered(calls: pd.DataFrame, responses: pd.DataFrame) -> np.ndarray:
    """Positional flags: which calls a response of their session and invocation answers.

    A missing call id matches a missing one, as a sweeper's ``fc.id().orElse("")`` does.
    """
    on = ["session_id", "invocation_id", "cid"]
    asked = calls[["session_id", "invocation_id"]].assign(cid=calls["call_id"].fillna(""))
    replied = responses[["session_id", "invocation_id"]].assign(cid=responses["call_id"].fillna(""))
    return rows_in(asked, replied, on)


def unanswered(located: pd.DataFrame, calls: pd.DataFrame, is_answered: np.ndarray) -> pd.DataFrame:
    """Calls of each located run's invocation that no response answers (``is_answered``), with
    the run's ``row`` and the call's position ``cidx``, by run and seq."""
    keys = located.loc[
        located["invocation_id"].notna() & located["session_id"].notna(),
        ["row", "session_id", "invocation_id"],
    ]
    cols = ["session_id", "invocation_id", "call_id", "name", "args", "seq", "ts", "long_running"]
    mine = calls[cols].reset_index(drop=True)
    mine["cidx"] = np.arange(len(mine))
    open_ = mine[~is_answered].merge(keys, on=["session_id", "invocation_id"])
    return open_.sort_values(["row", "seq", "cidx"]).reset_index(drop=True)


def answers(final: pd.Series, error_code: pd.Series) -> pd.Series:
    """Which events answer the user: a final response (ADK's rule) that carries no error code.

    ADK counts an error event as final (Python stores one, with no content, when a tool or the
    model raises; Java copies a model error onto its event): the invocation ends there, but
    nobody was answered, so a run whose last event is an error is not done.
    """
    return final.eq(True) & error_code.isna()


def classify(
    located: pd.DataFrame, unanswered: pd.DataFrame, terminal: tuple[str, ...]
) -> pd.DataFrame:
    """A sweeper's classify(), in its order, for every located run (joined to its invocation).

    ACTUALLY_DONE asks for the terminal agent's answer (:func:`answers`), not any final event.
    """
    out = located.copy()
    inv_missing = out["invocation_id"].isna()
    final = answers(out["last_final"], out["last_error"]) & out["last_author"].isin(terminal)
    checks = [
        (out["sk"] < 0, OrphanClass.NOT_STARTED),
        (inv_missing & out["started_at"].isna(), OrphanClass.UNKNOWN),
        (inv_missing, OrphanClass.NOT_STARTED),
        (out["n_events"].fillna(0) == 0, OrphanClass.UNKNOWN),
        (out["last_lr_n"].fillna(0) > 0, OrphanClass.PAUSED),
        (final, OrphanClass.ACTUALLY_DONE),
        (out["row"].isin(unanswered["row"]), OrphanClass.TOOL_UNANSWERED),
    ]
    out["orphan_class"] = np.select(
        [cond.to_numpy(dtype=bool) for cond, _ in checks],
        [cls.value for _, cls in checks],
        OrphanClass.MODEL_INFLIGHT.value,
    )
    ids = per_group(unanswered["call_id"], unanswered["row"])
    out["unanswered_calls"] = tuples(out["row"].map(ids))
    out["any_lr"] = out["any_lr"].eq(True)
    return out


def run_invocations(runs: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """Each run's invocation id: the ledger's, or else its user event's (as a sweeper recovers it).

    Returns run_id, session_id, invocation_id and invocation_source ("ledger", "user_event",
    or missing when neither names one), in ledger order.
    """
    require_columns(runs, spec_of("runs").names, what="the runs frame")
    require_columns(events, spec_of("events").names, what="the events frame")
    located = locate(runs, read_log(events))
    cols = {"run_id": STR, "session_id": STR, "invocation_id": STR, "invocation_source": STR}
    return as_columns(located, cols)


def event_kinds(
    events: pd.DataFrame,
    calls: pd.DataFrame | None = None,
    responses: pd.DataFrame | None = None,
) -> pd.Series:
    """What each event is: user, call, response, error, final or text (aligned to ``events``).

    Without ``calls``/``responses`` an event carrying them is reported as text or final.
    """
    ids = events["event_id"]

    def carries(parts: pd.DataFrame | None) -> np.ndarray:
        if parts is None:
            return np.zeros(len(events), dtype=bool)
        flags: np.ndarray = (ids.notna() & ids.isin(parts["event_id"].dropna())).to_numpy(bool)
        return flags

    kinds = np.select(
        [
            (events["author"] == "user").to_numpy(dtype=bool),
            carries(calls),
            carries(responses),
            events["error_code"].notna().to_numpy(dtype=bool),
            events["final_response"].to_numpy(dtype=bool),
        ],
        ["user", "call", "response", "error", "final"],
        "text",
    )
    return pd.Series(kinds, index=events.index, dtype=STR)
