"""What the on-call engineer does about each unanswered call and each run, in words.

Every action and reason is a template filled column-wise; ``docs/orphans.md`` explains them.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import numpy as np
import pandas as pd

from incidentkit.flows._frames import choose, per_group
from incidentkit.flows._text import fill, fill_first, int_text, join_text, text, time_text
from incidentkit.flows.orphans.classes import OrphanClass
from incidentkit.flows.orphans.journal import JournalVerdict
from incidentkit.frames import STR, RunStatus


class Action(enum.StrEnum):
    """The kind of action a run needs (the ``action`` column says it in words)."""

    REDRIVE = "REDRIVE"
    REPLAY = "REPLAY"
    ASK_DOWNSTREAM = "ASK_DOWNSTREAM"
    MARK_DONE = "MARK_DONE"
    MARK_PAUSED = "MARK_PAUSED"
    WAIT = "WAIT"
    PARK = "PARK"
    INVESTIGATE = "INVESTIGATE"
    NONE = "NONE"
    UNKNOWN = "UNKNOWN"


# What to do about one unanswered call, by case (its verdict, or a trap: found only by function
# call id): (rank, action kind, words). The lowest rank of a run's calls decides its action;
# ranks 0-2 mean "do not re-drive yet".
_CALL_WORDS: Mapping[str, tuple[int, Action, str]] = {
    "TRAP_DONE": (
        0,
        Action.INVESTIGATE,
        "Do not re-drive as is: journal entry {jkey} for call {cid} is keyed by function call "
        "id and says DONE, so {tool} already took effect; a re-drive makes a new call id and "
        "{tool} would run again. Record the result under {key} (or finish the run by hand) "
        "first.",
    ),
    "TRAP": (
        0,
        Action.ASK_DOWNSTREAM,
        "Ask the system behind {tool} whether call {cid} took effect before re-driving (W4: "
        "journal entry {jkey} holds only an intent and is keyed by function call id, so a "
        "re-drive with a new call id would not find it and {tool} could run twice).",
    ),
    "UNKNOWN": (
        1,
        Action.ASK_DOWNSTREAM,
        "Ask the system behind {tool} whether it saw key {key} before re-driving (the journal "
        "entry's status is {status}, neither INTENT nor DONE).",
    ),
    "NO_KEY": (
        1,
        Action.INVESTIGATE,
        "Find the business key of call {cid} by hand ({why}), then check the journal and the "
        "system behind {tool} before re-driving.",
    ),
    "INTENT_ONLY": (
        2,
        Action.ASK_DOWNSTREAM,
        "Ask the system behind {tool} whether it saw key {key} before re-driving (W4: the call "
        "may have taken effect).",
    ),
    "DONE": (
        3,
        Action.REPLAY,
        "Replay stored result for key {key}; do not call {tool} again (the journal holds DONE, "
        "so the re-driven tool returns the stored result).",
    ),
    "UNTRACKED": (
        4,
        Action.REDRIVE,
        "Safe to re-drive if {tool} has no side effect (no key template names it).",
    ),
    "NO_ENTRY": (
        4,
        Action.REDRIVE,
        "Safe to re-drive: no journal entry for {key} (W3: {tool} never started).",
    ),
}


def call_actions(verdicts: pd.DataFrame) -> pd.DataFrame:
    """Adds ``rank``, action_kind, action and reason to the frame of
    :func:`~incidentkit.flows.orphans.journal.journal_verdicts`."""
    c = verdicts.copy()
    idx, verdict = c.index, c["journal_verdict"]
    trap = c["matched_by"] == "function_call_id"
    case = choose(
        [trap & (verdict == JournalVerdict.DONE), trap], ["TRAP_DONE", "TRAP"], verdict, idx
    )
    fields = {
        "tool": text(c["tool"]),
        "cid": text(c["call_id"], "(no id)"),
        "key": text(c["business_key"], "its business key"),
        "jkey": text(c["journal_key"]),
        "status": text(c["journal_status"]),
        "why": text(c["key_problem"]),
    }
    conds = [case == name for name in _CALL_WORDS]
    c["rank"] = choose(conds, [r for r, _, _ in _CALL_WORDS.values()], 4, idx).astype(np.int64)
    c["action_kind"] = choose(conds, [a.value for _, a, _ in _CALL_WORDS.values()], None, idx)
    c["action"] = fill_first(
        idx,
        [(cond, w) for cond, (_, _, w) in zip(conds, _CALL_WORDS.values(), strict=True)],
        fields,
    )
    key_note = fill_first(
        idx,
        [
            (c["business_key"].notna(), "business key {key}"),
            (verdict == JournalVerdict.UNTRACKED, "no key template for {tool}"),
        ],
        fields,
        "no business key: {why}",
    )
    c["reason"] = fill(
        idx,
        "call {cid} to {tool} (event #{seq}) has no response; {note}; journal: {verdict}{via}",
        seq=int_text(c["seq"]),
        note=key_note,
        verdict=verdict,
        via=choose([trap], [" (matched by function call id only)"], "", idx),
        **fields,
    )
    return c


# A run's action: the first rule that holds, in this order (names index the rules below).
_RUN_WORDS: Mapping[str, tuple[Action, str]] = {
    "crash": (
        Action.PARK,
        "Park and alert: attempts {attempts} ≥ cap {cap}; copy the request, this "
        "classification and the last events to the dead-letter queue.",
    ),
    "live": (Action.NONE, "Not an orphan: lease held by worker {owner} until {lease}."),
    "no_lease": (
        Action.INVESTIGATE,
        "Recover by hand: the ledger says RUNNING without lease_until, so the sweeper "
        "(lease_until < now()) never claims it; the log says {cls}.",
    ),
    "odd_status": (
        Action.INVESTIGATE,
        "Check the ledger: status {status} is not one the sweeper acts on; the log says {cls}.",
    ),
    "wait": (Action.WAIT, "Wait: paused on long-running call(s) {lr} awaiting approval."),
    "done": (
        Action.MARK_DONE,
        "Mark DONE: the terminal agent's final response is stored; re-driving would answer "
        "the user twice.",
    ),
    "paused_odd": (
        Action.INVESTIGATE,
        "Check by hand before re-driving: the ledger says PAUSED but the log says {cls}.",
    ),
    "no_session": (
        Action.REDRIVE,
        "Re-drive from the ledger: replay the stored request; session {session} holds no "
        "events, so nothing of the run was stored (W1).",
    ),
    "not_started": (
        Action.REDRIVE,
        "Re-drive from the ledger: replay the stored request in session {session}; its user "
        "message was never stored (W1).",
    ),
    "model_error": (
        Action.REDRIVE,
        "Re-drive: start a new invocation in session {session} with a continuation message; "
        "the run's last step failed with {error} and its worker died before recording it (if "
        "the re-drive fails the same way, park it).",
    ),
    "model": (
        Action.REDRIVE,
        "Re-drive: start a new invocation in session {session} with a continuation message; "
        "the model call in flight was lost (cost: one model call).",
    ),
    "tool_hold": (Action.UNKNOWN, "Do not re-drive yet. {calls}"),
    "tool_go": (
        Action.UNKNOWN,
        "Re-drive: start a new invocation in session {session} with a continuation message. "
        "{calls}",
    ),
    "mark_paused": (
        Action.MARK_PAUSED,
        "Mark PAUSED, do not re-drive: the run waits on long-running call(s) {lr}; its worker "
        "died before recording the pause.",
    ),
    "unknown": (
        Action.INVESTIGATE,
        "Investigate by hand before re-driving: {reason}.",
    ),
}
# Why: the first that holds, in this order (the conditions are in run_actions); "model" is
# the default.
_REASONS: Mapping[str, str] = {
    "no_session": "no event is stored for session {session}",
    "no_start": "the ledger row has neither an invocation id nor started_at, so its user "
    "event cannot be told apart from earlier ones",
    "no_user": "no user event in session {session} at or after started_at {started}",
    "lost": "no stored event carries the ledger's invocation id {inv} in session {session}",
    "paused": "last event #{seq} by {author} carries long-running call id(s) {lr}",
    "done": "last event #{seq} is the final response of terminal agent {author}",
    "tool": "unanswered after last event #{seq} by {author}: {summary}",
    "error": "last event #{seq} by {author} is an error ({error}), not an answer; every call "
    "is answered",
    "sub_final": "last event #{seq} is a final text by {author}, which is not the terminal "
    "agent; every call is answered, so a model call was in flight",
    "model": "last event #{seq} by {author} is not a final response; every call is answered, "
    "so a model call was in flight",
}
_RECOVERED = "; invocation id {inv} recovered from the user event #{rseq} at {rts}"
_ERRED = "; the last event is an error ({error}), not an answer"


def run_actions(runs_x: pd.DataFrame, calls_v: pd.DataFrame, cap: int) -> pd.DataFrame:
    """The journal_verdict, action_kind, action and reason of every classified run, from its
    class, its calls (:func:`call_actions`) and the ledger."""
    out = runs_x.copy()
    cls, status, idx = out["orphan_class"], out["status"], out.index
    is_, crash = cls.eq, out["crash"]

    # The worst call decides; its words (or every call's, when all are safe) say how.
    first = calls_v.sort_values(["row", "rank", "seq"]).drop_duplicates("row").set_index("row")
    worst = calls_v["row"].map(first["rank"])
    shown = calls_v[(calls_v["rank"] <= 2) | (worst >= 3)]
    worst_rank = out["row"].map(first["rank"])
    line = fill(
        calls_v.index,
        "{tool} {cid}: {verdict} ({window})",
        tool=calls_v["tool"],
        cid=text(calls_v["call_id"], "(no id)"),
        verdict=calls_v["journal_verdict"],
        window=calls_v["window"],
    )
    out["journal_verdict"] = out["row"].map(first["journal_verdict"]).astype(STR)
    fields = {
        "session": text(out["session_id"]),
        "owner": text(out["owner"]),
        "lease": time_text(out["lease_until"]),
        "attempts": int_text(out["attempts"]),
        "cap": str(cap),
        "cls": text(cls),
        "status": text(status),
        "lr": text(out["long_running_ids"].map(join_text, na_action="ignore")),
        "calls": text(out["row"].map(per_group(shown["action"], shown["row"], " "))),
        "summary": text(out["row"].map(per_group(line, calls_v["row"], "; "))),
        "seq": int_text(out["last_seq"]),
        "author": text(out["last_author"]),
        "inv": text(out["invocation_id"]),
        "started": time_text(out["started_at"]),
        "rseq": int_text(out["recovered_seq"]),
        "rts": time_text(out["recovered_ts"]),
        "error": text(out["last_error"]),
    }
    erred = out["last_error"].notna()
    no_session = out["sk"] < 0
    reason_when = [
        is_(OrphanClass.NOT_STARTED) & no_session,
        is_(OrphanClass.UNKNOWN) & out["invocation_id"].isna(),
        is_(OrphanClass.NOT_STARTED),
        is_(OrphanClass.UNKNOWN),
        is_(OrphanClass.PAUSED),
        is_(OrphanClass.ACTUALLY_DONE),
        is_(OrphanClass.TOOL_UNANSWERED),
        erred,
        out["last_final"].eq(True),
    ]
    words = list(_REASONS.values())
    reason = fill_first(idx, list(zip(reason_when, words[:-1], strict=True)), fields, words[-1])
    reason += fill_first(idx, [(out["invocation_source"] == "user_event", _RECOVERED)], fields)
    reason += fill_first(idx, [(erred & is_(OrphanClass.TOOL_UNANSWERED), _ERRED)], fields)
    fields["reason"] = reason.astype(STR)
    paused = status == RunStatus.PAUSED
    rules = {
        "crash": crash,
        "live": out["live"],
        "no_lease": (status == RunStatus.RUNNING) & out["lease_until"].isna(),
        "odd_status": ~status.isin([RunStatus.RUNNING, RunStatus.PAUSED]),
        "wait": paused & is_(OrphanClass.PAUSED),
        "done": is_(OrphanClass.ACTUALLY_DONE),
        "paused_odd": paused,
        "no_session": is_(OrphanClass.NOT_STARTED) & no_session,
        "not_started": is_(OrphanClass.NOT_STARTED),
        "model_error": is_(OrphanClass.MODEL_INFLIGHT) & erred,
        "model": is_(OrphanClass.MODEL_INFLIGHT),
        "tool_hold": is_(OrphanClass.TOOL_UNANSWERED) & (worst_rank <= 2),
        "tool_go": is_(OrphanClass.TOOL_UNANSWERED),
        "mark_paused": is_(OrphanClass.PAUSED),
        "unknown": pd.Series(True, index=idx),
    }
    conds = [rules[name] for name in _RUN_WORDS]
    kind = choose(conds, [kind.value for kind, _ in _RUN_WORDS.values()], None, idx)
    out["action_kind"] = kind.where(kind != Action.UNKNOWN, out["row"].map(first["action_kind"]))
    out["action"] = fill_first(
        idx, [(cond, w) for cond, (_, w) in zip(conds, _RUN_WORDS.values(), strict=True)], fields
    )
    out["reason"] = reason.where(~crash, reason + f"; crash loop: attempts ≥ cap {cap}")
    return out


URGENCY = (
    Action.PARK,
    Action.ASK_DOWNSTREAM,
    Action.REDRIVE,
    Action.REPLAY,
    Action.MARK_DONE,
    Action.INVESTIGATE,
)
"""Action kinds in the order an on-call engineer should look at them (others come last)."""


def by_urgency(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` sorted by how urgently their action kind needs a person, then run id."""
    rank = runs["action_kind"].map({str(kind): i for i, kind in enumerate(URGENCY)})
    ordered = runs.assign(_rank=rank.fillna(len(URGENCY)))
    return ordered.sort_values(["_rank", "run_id"], kind="stable").drop(columns="_rank")


def most_urgent_run(orphans: pd.DataFrame) -> str | None:
    """The orphan to look at first (crash loops, then W4, then re-drives...), or None."""
    candidates = orphans[orphans["action_kind"].isin([str(kind) for kind in URGENCY])]
    if candidates.empty:
        return None
    return str(by_urgency(candidates)["run_id"].iloc[0])
