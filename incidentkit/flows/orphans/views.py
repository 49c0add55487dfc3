"""The orphan report's side views: crash loops to park (with their dead-letter records),
duplicate effects, live leases, ledger statuses the log contradicts, and per-worker counts.

Each view returns its frame with exactly its ``*_COLUMNS``, in order, even when empty. A row
that names a run carries that run's ``action_kind`` (missing for a terminal run: nothing to do
but correct the ledger).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from incidentkit.flows._frames import as_columns, plain_records, tuples
from incidentkit.flows._text import fill, fill_first, int_text, join_text
from incidentkit.flows.orphans.classes import Log, OrphanClass, event_kinds
from incidentkit.frames import FLOAT, INT, OBJ, STR, TS, JournalStatus, RunStatus

CRASH_LOOP_COLUMNS: Mapping[str, str] = {
    "run_id": STR,
    "session_id": STR,
    "invocation_id": STR,
    "owner": STR,
    "attempts": INT,
    "attempts_cap": INT,
    "orphan_class": STR,
    "action": STR,
    "dead_letter": OBJ,
    "action_kind": STR,
}
DUPLICATE_COLUMNS: Mapping[str, str] = {
    "business_key": STR,
    "tool": STR,
    "effects": INT,
    "basis": STR,
    "call_ids": OBJ,
    "invocation_ids": OBJ,
    "journal_keys": OBJ,
    "detail": STR,
}
LIVE_COLUMNS: Mapping[str, str] = {
    "run_id": STR,
    "session_id": STR,
    "invocation_id": STR,
    "owner": STR,
    "lease_until": TS,
    "remaining_s": FLOAT,
    "attempts": INT,
    "orphan_class": STR,
    "action_kind": STR,
    "action": STR,
}
DISAGREEMENT_COLUMNS: Mapping[str, str] = {
    "run_id": STR,
    "session_id": STR,
    "invocation_id": STR,
    "ledger_status": STR,
    "orphan_class": STR,
    "detail": STR,
    "action_kind": STR,
}
OWNER_COLUMNS: Mapping[str, str] = {
    "owner": STR,
    "runs": INT,
    "live_leases": INT,
    "orphans": INT,
    "recovered_unfinished": INT,
    "crash_loops": INT,
}
LAST_EVENTS = 3
"""How many of a run's last events a dead-letter record keeps."""
_DEAD_LETTER_FIELDS = ["run_id", "app_name", "user_id", "session_id", "invocation_id", "request"]
_DEAD_LETTER_FIELDS += ["owner", "attempts", "orphan_class", "reason"]


def crash_loops(
    crash: pd.DataFrame,
    log: Log,
    events: pd.DataFrame,
    calls: pd.DataFrame,
    responses: pd.DataFrame,
    at: pd.Timestamp,
    cap: int,
) -> pd.DataFrame:
    """Runs to park, each with the dead-letter record to copy (request, class, last turns:
    markers are left out).

    ``crash`` holds classified runs (with ``row``, ``sk`` and their reason); ``log`` is the
    :func:`~incidentkit.flows.orphans.classes.read_log` of ``events``.
    """
    keys = crash[["row", "sk", "invocation_id"]].rename(columns={"invocation_id": "inv"})
    logged = log.events[["sk", "invocation_id", "seq", "marker"]].reset_index(names="eidx")
    tail = keys.merge(logged.loc[~logged["marker"]], on="sk")
    tail = tail[tail["inv"].isna() | (tail["invocation_id"] == tail["inv"])]
    tail = tail.sort_values(["row", "seq"]).groupby("row").tail(LAST_EVENTS)
    picked = events.iloc[tail["eidx"].to_numpy(dtype=np.int64)]
    kinds = event_kinds(
        picked,
        calls[calls["event_id"].isin(picked["event_id"])],
        responses[responses["event_id"].isin(picked["event_id"])],
    )
    last = pd.DataFrame(
        {
            "seq": picked["seq"].to_numpy(),
            "ts": picked["ts"].to_numpy(),
            "author": picked["author"].to_numpy(dtype=object),
            "kind": kinds.to_numpy(dtype=object),
            "text": picked["text"].str.slice(0, 200).to_numpy(dtype=object),
        }
    )
    # ``tail`` is sorted by run row: each run's events are one slice of the records.
    records, rows = plain_records(last), tail["row"].to_numpy(dtype=np.int64)
    bounds = np.append(np.flatnonzero(np.diff(rows, prepend=-1) != 0), len(rows))
    by_row = {int(rows[s]): records[s:e] for s, e in itertools.pairwise(bounds.tolist())}
    out = crash.assign(attempts_cap=cap)
    extra: dict[str, Any] = {"attempts_cap": cap, "parked_at": at}
    letters = [
        {**record, **extra, "last_events": by_row.get(row, [])}
        for record, row in zip(
            plain_records(crash[_DEAD_LETTER_FIELDS]), crash["row"].tolist(), strict=True
        )
    ]
    out["dead_letter"] = pd.Series(letters, index=out.index, dtype=object)
    return as_columns(out.sort_values("run_id"), CRASH_LOOP_COLUMNS)


def live_leases(live: pd.DataFrame, at: pd.Timestamp) -> pd.DataFrame:
    """Runs whose worker still holds the lease, soonest expiry first, with seconds left."""
    remaining = (live["lease_until"] - at).dt.total_seconds()
    return as_columns(live.assign(remaining_s=remaining).sort_values("lease_until"), LIVE_COLUMNS)


def duplicate_effects(
    calls: pd.DataFrame,
    is_answered: np.ndarray,
    keys: np.ndarray,
    journal: pd.DataFrame,
) -> pd.DataFrame:
    """Business keys applied more than once: by journal proof (several DONE entries), or by
    answered calls with no journal entry under the key."""
    c = calls[["session_id", "invocation_id", "call_id", "name"]].reset_index(drop=True)
    c["business_key"] = pd.Series(keys, dtype=object).astype(STR)
    c["answered"] = is_answered
    c = c[c["business_key"].notna()]
    tool_of = c.drop_duplicates("business_key").set_index("business_key")["name"]
    key_of_call = c[c["call_id"].notna()].drop_duplicates("call_id").set_index("call_id")
    # A business-key journal holds one entry per key; several entries for one business key
    # mean it is keyed by call id, so each re-drive ran the tool again. An INTENT beside a
    # DONE is an effect too: W4 (the send happened, journal.done was lost).
    j = journal.loc[
        journal["status"].isin([JournalStatus.DONE, JournalStatus.INTENT]),
        ["key", "invocation_id", "function_call_id", "status"],
    ]
    j = j.assign(
        # astype: with no call ids (a Firestore export) the map is all-NaN floats
        business_key=j["function_call_id"]
        .map(key_of_call["business_key"])
        .astype(object)
        .fillna(j["key"]),
        done=j["status"] == JournalStatus.DONE,
    )
    j = j[j["business_key"].duplicated(keep=False)]  # so every group has two or more
    j = j[j.groupby("business_key")["done"].transform("any")]
    by_journal = j.groupby("business_key").agg(
        effects=("key", "size"),
        call_ids=("function_call_id", tuple),
        invocation_ids=("invocation_id", tuple),
        journal_keys=("key", tuple),
    )
    by_journal = by_journal.assign(basis="journal")

    answered = c[c["answered"]].assign(cid=c["call_id"].fillna(""))
    answered = answered[~answered["business_key"].isin(journal["key"].dropna())]
    answered = answered[~answered["business_key"].isin(by_journal.index)]
    answered = answered.drop_duplicates(["session_id", "invocation_id", "cid"])
    answered = answered[answered["business_key"].duplicated(keep=False)]
    by_calls = answered.groupby("business_key").agg(
        effects=("cid", "size"),
        call_ids=("call_id", tuple),
        invocation_ids=("invocation_id", tuple),
    )
    by_calls = by_calls.assign(basis="calls")
    by_calls["journal_keys"] = tuples(pd.Series(np.nan, index=by_calls.index))
    out = pd.concat([by_journal, by_calls]).reset_index(names="business_key")
    out["tool"] = out["business_key"].map(tool_of)
    fields = {"tool": out["tool"], "key": out["business_key"], "n": int_text(out["effects"])}
    journal_words = (
        "the journal holds {n} entries (DONE or INTENT) for business key {key} under different "
        "keys: it is keyed by function call id, so each re-drive ran {tool} again"
    )
    calls_words = (
        "{n} answered calls of {tool} carry business key {key} and the journal has no entry "
        "under it, so {tool} most likely ran {n} times"
    )
    out["detail"] = fill_first(
        out.index, [(out["basis"] == "journal", journal_words)], fields, calls_words
    )
    return as_columns(out.sort_values("business_key"), DUPLICATE_COLUMNS)


def status_disagreements(runs_x: pd.DataFrame) -> pd.DataFrame:
    """Ledger rows (any status) whose status the log contradicts, one row per contradiction.

    A last event with an error code is no answer (:func:`~.classes.answers`) but it does end
    the invocation: a FAILED run that ends in one agrees with its log, and so does a DONE one
    (ADK Java completes a run whose model returned an error)."""
    status, cls = runs_x["status"], runs_x["orphan_class"]
    done = status == RunStatus.DONE
    stopped = [RunStatus.FAILED, RunStatus.PARKED, RunStatus.PAUSED]
    rules = [
        (
            cls.eq(OrphanClass.ACTUALLY_DONE) & (runs_x["orphan"] | status.isin(stopped)),
            "ledger says {status} but the terminal agent's final response is stored ({last})",
        ),
        (
            cls.eq(OrphanClass.PAUSED) & (status == RunStatus.RUNNING) & runs_x["orphan"],
            "ledger says RUNNING but the log shows a clean pause on a long-running call "
            "({last}): the ledger's PAUSED update was lost",
        ),
        (
            done & (runs_x["unanswered_calls"].str.len() > 0),
            "ledger says DONE but call(s) {calls} have no response in the log",
        ),
        (
            done & cls.isin([OrphanClass.NOT_STARTED, OrphanClass.UNKNOWN]),
            "ledger says DONE but no event of the run is in the log (or the evidence window "
            "leaves it out)",
        ),
        (
            done & cls.eq(OrphanClass.MODEL_INFLIGHT) & runs_x["last_error"].isna(),
            "ledger says DONE but the last {last} is not the terminal agent's final response",
        ),
        (
            (status == RunStatus.PAUSED) & ~runs_x["any_lr"] & cls.ne(OrphanClass.NOT_STARTED),
            "ledger says PAUSED but no event of the invocation carries long-running call ids",
        ),
        (
            (status == RunStatus.RUNNING) & runs_x["lease_until"].isna(),
            "ledger says RUNNING without lease_until, so the sweeper never claims it",
        ),
    ]
    # Word only the rows some rule flags (usually few of the ledger).
    flagged = np.logical_or.reduce([cond.to_numpy(dtype=bool) for cond, _ in rules])
    runs_f = runs_x[flagged]
    idx = runs_f.index
    fields = {
        "status": runs_f["status"],
        "last": fill(
            idx,
            "event #{seq} by {author}",
            seq=int_text(runs_f["last_seq"]),
            author=runs_f["last_author"],
        ),
        "calls": runs_f["unanswered_calls"].map(join_text),
    }
    parts = []
    for cond, words in rules:
        hit = cond[flagged]
        parts.append(runs_f[hit].assign(detail=fill_first(idx, [(hit, words)], fields)[hit]))
    out = pd.concat(parts).rename(columns={"status": "ledger_status"})
    return as_columns(out.sort_values("run_id", kind="stable"), DISAGREEMENT_COLUMNS)


def per_owner(acted: pd.DataFrame) -> pd.DataFrame:
    """Per worker: non-terminal runs, live leases, orphans, recovered-but-unfinished, loops."""
    flags = pd.DataFrame(
        {
            "owner": acted["owner"],
            "runs": True,
            "live_leases": acted["live"],
            "orphans": acted["orphan"],
            "recovered_unfinished": acted["attempts"] >= 1,
            "crash_loops": acted["crash"],
        }
    )
    return as_columns(
        flags.groupby("owner", dropna=False, sort=True).sum().reset_index(), OWNER_COLUMNS
    )
