"""Invocations of one session that ran at the same time: the double-submit / retrying-client
signal. Both start from the same session snapshot; the later write of a key wins silently
(or a database service rejects the stale one).

Marker events (a compaction, a rewind, a checkpoint) are no part of any range: ADK appends a
compaction after the invocation that triggered it, under an id of its own, and it may be
stamped while the next invocation runs; that is no race.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from incidentkit.flows._markers import turns

RANGE_COLUMNS = ["session_id", "invocation_id", "start", "end", "source"]
OVERLAP_COLUMNS = [
    *("session_id", "invocation_a", "invocation_b"),
    *("a_start", "a_end", "b_start", "b_end", "source"),
]
FIX = (
    "Serialize invocations per session at the API layer (a per-session lock or queue in front "
    "of the runner, across every replica), and make the client idempotent: disable resubmit "
    "while a turn runs and dedupe retries by a request id."
)


def invocation_ranges(events: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Each invocation's time range: from its first event (else its ledger run's start) to
    the later of its last event and its ledger run's last update. ``source`` says which
    evidence gave them (``events``, ``ledger`` or ``events+ledger``).

    A ledger run that paused for a long-running tool and resumed carries the resumed
    invocation's id but the first one's start, so its start stands in only for an invocation
    that stored no event (one a session service rejected, say). Marker events are left out,
    so a marker's own invocation id has no range."""
    logged = (
        turns(events)
        .dropna(subset=["invocation_id", "ts"])
        .groupby(["session_id", "invocation_id"], sort=False)["ts"]
        .agg(min_e="min", max_e="max")
    )
    ledger = (
        runs.dropna(subset=["invocation_id", "started_at"])
        .groupby(["session_id", "invocation_id"], sort=False)
        .agg(min_l=("started_at", "min"), max_l=("updated_at", "max"))
    )
    joined = logged.join(ledger, how="outer")
    start = joined["min_e"].fillna(joined["min_l"])
    end = joined[["max_e", "max_l"]].max(axis=1)
    has_e, has_l = joined["min_e"].notna(), joined["min_l"].notna()
    source = np.where(has_e & has_l, "events+ledger", np.where(has_e, "events", "ledger"))
    out = pd.DataFrame({"start": start, "end": end, "source": source}, index=joined.index)
    out = out.reset_index().sort_values(["session_id", "start"], kind="stable")
    return out[RANGE_COLUMNS].reset_index(drop=True).astype({"source": "str"})


def overlapping(ranges: pd.DataFrame) -> pd.DataFrame:
    """Pairs of invocations of one session whose ranges overlap (:data:`OVERLAP_COLUMNS`),
    ``a`` the one that started first.

    Sorted by session and start, an invocation overlaps an earlier one exactly when it starts
    before the latest end among those before it; only those are paired (overlaps are rare).
    """
    frame = ranges.dropna(subset=["start"]).sort_values(["session_id", "start"], kind="stable")
    frame = frame.reset_index(drop=True)
    frame["end"] = frame["end"].fillna(frame["start"])
    starts = frame["start"].to_numpy(dtype="datetime64[ns]").view("int64")
    ends = frame["end"].to_numpy(dtype="datetime64[ns]").view("int64")
    session_of = frame["session_id"].to_numpy(dtype=object)
    sessions = frame["session_id"]
    latest = frame.groupby(sessions, sort=False)["end"].cummax()
    prev_end = latest.groupby(sessions, sort=False).shift()
    hit = frame["start"].lt(prev_end).to_numpy()
    pairs = []
    for b in np.flatnonzero(hit):
        a = b - 1
        while a >= 0 and session_of[a] == session_of[b]:
            if ends[a] > starts[b]:
                pairs.append((a, b))
            a -= 1
    if not pairs:
        return pd.DataFrame({col: pd.Series(dtype=object) for col in OVERLAP_COLUMNS})
    a_rows = frame.loc[[a for a, _ in pairs]].reset_index(drop=True)
    b_rows = frame.loc[[b for _, b in pairs]].reset_index(drop=True)
    both = np.where(a_rows["source"].eq(b_rows["source"]), a_rows["source"], "mixed")
    return pd.DataFrame(
        {
            "session_id": a_rows["session_id"],
            "invocation_a": a_rows["invocation_id"],
            "invocation_b": b_rows["invocation_id"],
            "a_start": a_rows["start"],
            "a_end": a_rows["end"],
            "b_start": b_rows["start"],
            "b_end": b_rows["end"],
            "source": both,
        }
    ).sort_values(["session_id", "a_start", "b_start"], kind="stable", ignore_index=True)
