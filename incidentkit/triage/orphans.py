"""Orphan classification (seed 000): every run in flight at ``as_of``, what happened, what to do.

:func:`classify_orphans` applies the seed's sweeper classifier to the whole ledger in one
vectorised pass (merges and group-bys; no per-run query, no loop over events), then looks up
each unanswered call in the side-effect journal by business key and writes the action an
on-call engineer takes. ``docs/orphans.md`` explains every class, verdict and action.
"""

from __future__ import annotations

import enum
import re
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from incidentkit.errors import ParameterError
from incidentkit.frames import (
    BOOL,
    FLOAT,
    INT,
    NINT,
    OBJ,
    STR,
    TS,
    RunStatus,
    require_columns,
    spec_of,
    utc_timestamp,
)


class OrphanClass(enum.StrEnum):
    """What the log says about a run (seed 000's classifier, plus UNKNOWN)."""

    NOT_STARTED = "NOT_STARTED"
    MODEL_INFLIGHT = "MODEL_INFLIGHT"
    TOOL_UNANSWERED = "TOOL_UNANSWERED"
    PAUSED = "PAUSED"
    ACTUALLY_DONE = "ACTUALLY_DONE"
    UNKNOWN = "UNKNOWN"


class JournalVerdict(enum.StrEnum):
    """What the side-effect journal says about one unanswered call."""

    NO_ENTRY = "NO_ENTRY"
    INTENT_ONLY = "INTENT_ONLY"
    DONE = "DONE"
    NO_KEY = "NO_KEY"
    UNTRACKED = "UNTRACKED"
    UNKNOWN = "UNKNOWN"


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


RUN_COLUMNS: Mapping[str, str] = {
    "run_id": STR,
    "session_id": STR,
    "invocation_id": STR,
    "invocation_source": STR,
    "orphan_class": STR,
    "unanswered_calls": OBJ,
    "journal_verdict": STR,
    "action_kind": STR,
    "action": STR,
    "reason": STR,
    "status": STR,
    "owner": STR,
    "lease_until": TS,
    "attempts": INT,
    "started_at": TS,
    "last_seq": NINT,
    "last_author": STR,
    "last_ts": TS,
    "long_running_ids": OBJ,
}
CALL_COLUMNS: Mapping[str, str] = {
    "run_id": STR,
    "session_id": STR,
    "invocation_id": STR,
    "call_id": STR,
    "tool": STR,
    "args": OBJ,
    "seq": INT,
    "ts": TS,
    "long_running": BOOL,
    "business_key": STR,
    "journal_key": STR,
    "journal_status": STR,
    "journal_verdict": STR,
    "matched_by": STR,
    "window": STR,
    "action_kind": STR,
    "action": STR,
    "reason": STR,
}
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
}
DISAGREEMENT_COLUMNS: Mapping[str, str] = {
    "run_id": STR,
    "session_id": STR,
    "invocation_id": STR,
    "ledger_status": STR,
    "orphan_class": STR,
    "detail": STR,
}
OWNER_COLUMNS: Mapping[str, str] = {
    "owner": STR,
    "runs": INT,
    "live_leases": INT,
    "orphans": INT,
    "recovered_unfinished": INT,
    "crash_loops": INT,
}
TERMINAL_STATUSES = frozenset({RunStatus.DONE, RunStatus.FAILED, RunStatus.PARKED})
LAST_EVENTS = 3
"""How many of a run's last events a dead-letter record keeps."""


@dataclass(frozen=True)
class OrphanReport:
    """Everything :func:`classify_orphans` found; every frame has all its columns, even empty."""

    orphans: pd.DataFrame
    in_flight: pd.DataFrame
    calls: pd.DataFrame
    crash_loops: pd.DataFrame
    duplicate_effects: pd.DataFrame
    live_leases: pd.DataFrame
    status_disagreements: pd.DataFrame
    per_owner: pd.DataFrame
    as_of: pd.Timestamp
    terminal_agents: tuple[str, ...]
    key_templates: Mapping[str, str]
    attempts_cap: int
    ledger_runs: int

    def class_counts(self) -> dict[str, int]:
        """Orphans per class, every class present (zero when absent)."""
        counts = self.orphans["orphan_class"].value_counts()
        return {cls.value: int(counts.get(cls.value, 0)) for cls in OrphanClass}


class _Template(NamedTuple):
    text: str
    roots: tuple[str, ...]


def classify_orphans(
    runs: pd.DataFrame,
    events: pd.DataFrame,
    calls: pd.DataFrame,
    responses: pd.DataFrame,
    journal: pd.DataFrame,
    *,
    as_of: Any,
    terminal_agent: str | Iterable[str],
    key_templates: Mapping[str, str] | None = None,
    attempts_cap: int = 3,
) -> OrphanReport:
    """Classify every non-terminal run of the ledger at ``as_of`` as seed 000's sweeper would.

    ``terminal_agent`` names the agent whose final response ends a run (one name or several).
    ``key_templates`` maps each tool with a side effect to its business-key template, filled
    from the call's args (``{"sendInvoice": "send-invoice:{invoiceId}"}``); tools not listed are
    taken to have none. Orphans are RUNNING rows whose lease expired before ``as_of`` (a
    timezone-aware time; naive is refused). Runs with ``attempts >= attempts_cap`` that would
    be re-driven are crash loops to park. Inputs are canonical frames and are not modified.
    """
    at = utc_timestamp(as_of, what="as_of")
    terminal = _terminal_agents(terminal_agent)
    templates = _templates(key_templates)
    if isinstance(attempts_cap, bool) or not isinstance(attempts_cap, int) or attempts_cap < 1:
        raise ParameterError(
            "attempts_cap must be a whole number of at least 1",
            value=attempts_cap,
            fix="give the sweeper's cap, e.g. 3",
        )
    frames = {"runs": runs, "events": events, "calls": calls, "responses": responses}
    for name, frame in (*frames.items(), ("journal", journal)):
        require_columns(frame, spec_of(name).names, what=f"the {name} frame")

    ev, sessions, invocations = _prepare(events)
    located = _locate(runs, ev, sessions).merge(invocations, on=["sk", "invocation_id"], how="left")
    unanswered = _unanswered(located, calls, responses)
    runs_x = _classify(located, unanswered, terminal)
    keys, key_reasons = _business_keys(calls, templates)

    status = runs_x["status"]
    running = status == RunStatus.RUNNING
    runs_x["orphan"] = running & (runs_x["lease_until"] < at)
    runs_x["live"] = running & (runs_x["lease_until"] >= at)
    runs_x["crash"] = (
        runs_x["orphan"]
        & (runs_x["attempts"] >= attempts_cap)
        & ~runs_x["orphan_class"].isin([OrphanClass.ACTUALLY_DONE, OrphanClass.PAUSED])
    )
    open_x = runs_x[~status.isin(list(TERMINAL_STATUSES))]
    verdicts = _journal_verdicts(
        unanswered[unanswered["row"].isin(open_x["row"])], keys, key_reasons, journal, templates
    )
    acted = _run_actions(open_x, verdicts, attempts_cap).sort_values("run_id", kind="stable")
    orphan, crash = acted["orphan"], acted["crash"]
    return OrphanReport(
        orphans=_shape(acted[orphan], RUN_COLUMNS),
        in_flight=_shape(acted[~orphan], RUN_COLUMNS),
        calls=_shape(
            verdicts.merge(acted[["row", "run_id"]], on="row").sort_values(["run_id", "seq"]),
            CALL_COLUMNS,
        ),
        crash_loops=_shape(
            _crash_loops(acted[crash], ev, events, calls, responses, at, attempts_cap),
            CRASH_LOOP_COLUMNS,
        ),
        duplicate_effects=_shape(_duplicates(calls, responses, keys, journal), DUPLICATE_COLUMNS),
        live_leases=_shape(_live(acted[acted["live"]], at), LIVE_COLUMNS),
        status_disagreements=_shape(_disagreements(runs_x), DISAGREEMENT_COLUMNS),
        per_owner=_shape(_per_owner(acted), OWNER_COLUMNS),
        as_of=at,
        terminal_agents=terminal,
        key_templates={tool: tpl.text for tool, tpl in templates.items()},
        attempts_cap=attempts_cap,
        ledger_runs=len(runs),
    )


def run_invocations(runs: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """Each run's invocation id: the ledger's, or else its user event's (seed 000's recovery).

    Returns run_id, session_id, invocation_id and invocation_source ("ledger", "user_event",
    or missing when neither names one), in ledger order.
    """
    require_columns(runs, spec_of("runs").names, what="the runs frame")
    require_columns(events, spec_of("events").names, what="the events frame")
    ev, sessions, _ = _prepare(events)
    located = _locate(runs, ev, sessions)
    cols = {"run_id": STR, "session_id": STR, "invocation_id": STR, "invocation_source": STR}
    return _shape(located, cols)


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


# ---------------------------------------------------------------------------- parameters


def _terminal_agents(value: str | Iterable[str]) -> tuple[str, ...]:
    try:
        names = (value,) if isinstance(value, str) else tuple(value)
    except TypeError:
        names = ()
    if not names or not all(isinstance(name, str) and name for name in names):
        raise ParameterError(
            "terminal_agent must name the agent whose final response ends a run",
            value=value,
            fix='give its name, e.g. terminal_agent="notify_agent"',
        )
    return names


def _templates(raw: Mapping[str, str] | None) -> dict[str, _Template]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ParameterError(
            "key_templates is not a mapping of tool name to key template",
            value=raw,
            fix='give e.g. {"sendInvoice": "send-invoice:{invoiceId}"}',
        )
    out: dict[str, _Template] = {}
    for tool, template in raw.items():
        if not isinstance(tool, str) or not isinstance(template, str):
            raise ParameterError(
                "key_templates must map tool names to template strings",
                value={tool: template},
                fix='give e.g. {"sendInvoice": "send-invoice:{invoiceId}"}',
            )
        out[tool] = _parse_template(tool, template)
    return out


def _parse_template(tool: str, template: str) -> _Template:
    def bad(problem: str) -> ParameterError:
        return ParameterError(
            f"key template for tool {tool!r} {problem}",
            value=template,
            fix="name the call's args fields in braces, e.g. send-invoice:{invoiceId}, and "
            "double literal braces ({{ }})",
        )

    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as err:
        raise bad(f"is not a valid format string ({err})") from err
    roots = []
    for _, field_name, _, conversion in parsed:
        if field_name is None:
            continue
        root = re.split(r"[.\[]", field_name, maxsplit=1)[0]
        if not root or root.isdigit():
            raise bad("has a positional field; fields must name args")
        if conversion not in (None, "r", "s", "a"):
            raise bad(f"has an unknown conversion !{conversion}")
        roots.append(root)
    if not roots:
        raise bad("names no args field, so every call would get the same key")
    return _Template(template, tuple(roots))


def _render(template: _Template, args: Any) -> tuple[str | None, str | None]:
    """The business key of one call, or why it cannot be made."""
    if not isinstance(args, Mapping):
        return None, "the call's args are not a JSON object"
    for root in template.roots:
        if args.get(root) is None:
            return None, f"args lack field {root!r} that key template {template.text!r} needs"
    try:
        return template.text.format_map(args), None
    except (KeyError, AttributeError, IndexError, TypeError, ValueError) as err:
        return None, f"key template {template.text!r} cannot be filled from args ({err!r})"


def _business_keys(
    calls: pd.DataFrame, templates: Mapping[str, _Template]
) -> tuple[np.ndarray, np.ndarray]:
    """Business key and failure reason of every call (positional), for templated tools."""
    keys = np.full(len(calls), None, dtype=object)
    reasons = np.full(len(calls), None, dtype=object)
    names = calls["name"].to_numpy(dtype=object)
    args = calls["args"].to_numpy(dtype=object)
    for tool, template in templates.items():
        where = np.flatnonzero(names == tool)
        rendered = [_render(template, value) for value in args[where]]
        keys[where] = [key for key, _ in rendered]
        reasons[where] = [reason for _, reason in rendered]
    return keys, reasons


# ---------------------------------------------------------------------------- the log


def _prepare(events: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Events with a session code ``sk``; the sessions; one row per invocation with its tail."""
    skeys = ["app_name", "user_id", "session_id"]
    sk = events.groupby(skeys, dropna=False, sort=False).ngroup().to_numpy(dtype=np.int64)
    cols = ["session_id", "invocation_id", "seq", "ts", "author", "final_response"]
    ev = events[cols].reset_index(drop=True)
    ev["sk"] = sk
    sizes = pd.to_numeric(events["long_running_tool_ids"].str.len(), errors="coerce")
    ev["lr_n"] = sizes.fillna(0).to_numpy(dtype=np.int64)
    sessions = events[skeys].reset_index(drop=True).assign(sk=sk).drop_duplicates("sk")

    valid = ev[ev["invocation_id"].notna()]
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
    agg["last_lr_n"] = tail["lr_n"].to_numpy()
    lr_ids = events["long_running_tool_ids"].to_numpy(dtype=object)
    agg["long_running_ids"] = lr_ids[agg["last"].to_numpy(dtype=np.int64)]
    return ev, sessions, agg.drop(columns="last")


def _locate(runs: pd.DataFrame, ev: pd.DataFrame, sessions: pd.DataFrame) -> pd.DataFrame:
    """Ledger rows with their session code (-1: no events) and invocation id (seed 000)."""
    cols = ["run_id", "app_name", "user_id", "session_id", "invocation_id", "request"]
    cols += ["status", "owner", "lease_until", "attempts", "started_at"]
    out = runs[cols].reset_index(drop=True)
    out.insert(0, "row", np.arange(len(out)))
    # Events without app/user (e.g. a bare JSONL event dump) match any run of that session id.
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
    best = best.drop_duplicates("row").set_index("row")["sk"]
    out["sk"] = out["row"].map(best).fillna(-1).astype(np.int64)

    # runAsync does not emit the user event, so the ledger may lack the invocation id: take
    # the first stored user event of the session at or after the run's start.
    need = out.loc[
        out["invocation_id"].isna() & (out["sk"] >= 0) & out["started_at"].notna(),
        ["row", "sk", "started_at"],
    ]
    users = ev.loc[ev["author"] == "user", ["sk", "seq", "ts", "invocation_id"]]
    hits = need.merge(users, on="sk")
    hits = hits[hits["ts"] >= hits["started_at"]].sort_values(["row", "seq"])
    hits = hits.drop_duplicates("row")[["row", "seq", "ts", "invocation_id"]].rename(
        columns={"seq": "recovered_seq", "ts": "recovered_ts", "invocation_id": "recovered"}
    )
    out = out.merge(hits, on="row", how="left")
    from_ledger = out["invocation_id"].notna()
    out["ledger_invocation_id"] = out["invocation_id"]
    out["invocation_id"] = out["invocation_id"].where(from_ledger, out["recovered"]).astype(STR)
    out["invocation_source"] = _pick(
        [from_ledger, out["recovered"].notna()], ["ledger", "user_event"], None, out.index
    )
    return out.drop(columns="recovered")


def _unanswered(
    located: pd.DataFrame, calls: pd.DataFrame, responses: pd.DataFrame
) -> pd.DataFrame:
    """Calls of each run's invocation that no response of that invocation answers."""
    keys = located.loc[
        located["invocation_id"].notna() & located["session_id"].notna(),
        ["row", "session_id", "invocation_id"],
    ]
    cols = ["session_id", "invocation_id", "call_id", "name", "args", "seq", "ts", "long_running"]
    mine = calls[cols].reset_index(drop=True)
    mine["cidx"] = np.arange(len(mine))
    mine["cid"] = mine["call_id"].fillna("")  # the seed's fc.id().orElse("")
    answered = pd.DataFrame(
        {
            "session_id": responses["session_id"],
            "invocation_id": responses["invocation_id"],
            "cid": responses["call_id"].fillna(""),
        }
    )
    call_key, answer_key = _row_keys(mine, answered, ["session_id", "invocation_id", "cid"])
    open_ = mine[~np.isin(call_key, answer_key)].drop(columns="cid")
    open_ = open_.merge(keys, on=["session_id", "invocation_id"])
    return open_.sort_values(["row", "seq", "cidx"]).reset_index(drop=True)


def _classify(
    located: pd.DataFrame, unanswered: pd.DataFrame, terminal: tuple[str, ...]
) -> pd.DataFrame:
    """The seed's classify(), in its order, for every run at once."""
    out = located.copy()
    inv_missing = out["invocation_id"].isna()
    final = out["last_final"].eq(True) & out["last_author"].isin(terminal)
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
    ids = _per_group(unanswered["call_id"], unanswered["row"], tuple)
    out["unanswered_calls"] = _tuples(out["row"].map(ids))
    out["any_lr"] = out["any_lr"].eq(True)
    out["n_events"] = out["n_events"].fillna(0).astype(np.int64)
    return out


# ---------------------------------------------------------------------------- the journal

_STATUS_RANK = {"DONE": 0, "INTENT": 1}

# What to do about one unanswered call: (rank, action kind, words). The lowest rank of a
# run's calls decides its action; ranks 0-2 mean "do not re-drive yet".
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


def _journal_index(journal: pd.DataFrame, by: str) -> pd.DataFrame:
    """One journal row per ``by`` value (DONE wins over INTENT over anything else)."""
    j = pd.DataFrame({"by": journal[by], "key": journal["key"], "status": journal["status"]})
    j = j[j["by"].notna()]
    j["rank"] = j["status"].map(_STATUS_RANK).fillna(2).astype(np.int64)
    return j.sort_values(["by", "rank", "key"]).drop_duplicates("by").set_index("by")


def _journal_verdicts(
    open_calls: pd.DataFrame,
    keys: np.ndarray,
    key_reasons: np.ndarray,
    journal: pd.DataFrame,
    templates: Mapping[str, _Template],
) -> pd.DataFrame:
    """Journal verdict, window and action of every unanswered call."""
    c = open_calls.rename(columns={"name": "tool"}).reset_index(drop=True)
    idx = c.index
    cidx = c["cidx"].to_numpy(dtype=np.int64)
    c["business_key"] = pd.Series(keys[cidx], dtype=object).astype(STR)
    why = pd.Series(key_reasons[cidx], dtype=object).astype(STR)
    by_key, by_cid = _journal_index(journal, "key"), _journal_index(journal, "function_call_id")
    hit_key = c["business_key"].isin(by_key.index)
    hit_cid = ~hit_key & c["call_id"].notna() & c["call_id"].isin(by_cid.index)

    def found(column: str) -> pd.Series:
        via_key = c["business_key"].map(by_key[column])
        return via_key.where(hit_key, c["call_id"].map(by_cid[column]).where(hit_cid))

    c["journal_key"], c["journal_status"] = found("key").astype(STR), found("status").astype(STR)
    rank = found("rank")
    c["matched_by"] = _pick([hit_key, hit_cid], ["business_key", "function_call_id"], None, idx)
    verdict = _pick(
        [rank == 0, rank == 1, rank.notna(), ~c["tool"].isin(list(templates)), why.notna()],
        ["DONE", "INTENT_ONLY", "UNKNOWN", "UNTRACKED", "NO_KEY"],
        JournalVerdict.NO_ENTRY.value,
        idx,
    )
    c["journal_verdict"] = verdict
    c["window"] = _pick([verdict == "NO_ENTRY", verdict == "INTENT_ONLY"], ["W3", "W4"], "-", idx)
    trap = hit_cid.to_numpy(dtype=bool)
    case = _pick([trap & (rank == 0), trap], ["TRAP_DONE", "TRAP"], verdict, idx)
    fields = {
        "tool": _t(c["tool"]),
        "cid": _t(c["call_id"], "(no id)"),
        "key": _t(c["business_key"], "its business key"),
        "jkey": _t(c["journal_key"]),
        "status": _t(c["journal_status"]),
        "why": _t(why),
    }
    conds = [case == name for name in _CALL_WORDS]
    c["rank"] = _pick(conds, [r for r, _, _ in _CALL_WORDS.values()], 4, idx).astype(np.int64)
    c["action_kind"] = _pick(conds, [a.value for _, a, _ in _CALL_WORDS.values()], None, idx)
    c["action"] = _words(
        idx,
        [(cond, w) for cond, (_, _, w) in zip(conds, _CALL_WORDS.values(), strict=True)],
        fields,
    )
    key_note = _pick(
        [c["business_key"].notna(), verdict == "UNTRACKED"],
        [
            _fmt(idx, "business key {key}", **fields),
            _fmt(idx, "no key template for {tool}", **fields),
        ],
        _fmt(idx, "no business key: {why}", **fields),
        idx,
    )
    c["reason"] = _fmt(
        idx,
        "call {cid} to {tool} (event #{seq}) has no response; {note}; journal: {verdict}{via}",
        seq=_n(c["seq"]),
        note=key_note,
        verdict=verdict,
        via=_pick([hit_cid], [" (matched by function call id only)"], "", idx),
        **fields,
    )
    return c


# ---------------------------------------------------------------------------- actions

# A run's action: the first rule that holds, in this order (names index _RUN_RULES below).
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
_REASONS: Mapping[str, str] = {
    "no_session": "no event is stored for session {session}",
    "no_start": "the ledger row has neither an invocation id nor started_at, so its user "
    "event cannot be told apart from earlier ones",
    "no_user": "no user event in session {session} at or after started_at {started}",
    "lost": "no stored event carries the ledger's invocation id {inv} in session {session}",
    "paused": "last event #{seq} by {author} carries long-running call id(s) {lr}",
    "done": "last event #{seq} is the final response of terminal agent {author}",
    "tool": "unanswered after last event #{seq} by {author}: {summary}",
    "sub_final": "last event #{seq} is a final text by {author}, which is not the terminal "
    "agent; every call is answered, so a model call was in flight",
    "model": "last event #{seq} by {author} is not a final response; every call is answered, "
    "so a model call was in flight",
}


def _run_actions(runs_x: pd.DataFrame, calls_v: pd.DataFrame, cap: int) -> pd.DataFrame:
    """The action and reason of every run, from its class, its calls and the ledger."""
    out = runs_x.copy()
    cls, status, idx = out["orphan_class"], out["status"], out.index
    is_, crash = cls.eq, out["crash"]

    # The worst call decides; its words (or every call's, when all are safe) say how.
    worst = calls_v.groupby("row")["rank"].transform("min")
    shown = calls_v[(calls_v["rank"] <= 2) | (worst >= 3)]
    first = calls_v.sort_values(["row", "rank", "seq"]).drop_duplicates("row").set_index("row")
    worst_rank = out["row"].map(first["rank"])
    line = _fmt(
        calls_v.index,
        "{tool} {cid}: {verdict} ({window})",
        tool=calls_v["tool"],
        cid=_t(calls_v["call_id"], "(no id)"),
        verdict=calls_v["journal_verdict"],
        window=calls_v["window"],
    )
    out["journal_verdict"] = out["row"].map(first["journal_verdict"]).astype(STR)
    fields = {
        "session": _t(out["session_id"]),
        "owner": _t(out["owner"]),
        "lease": _when(out["lease_until"]),
        "attempts": _n(out["attempts"]),
        "cap": str(cap),
        "cls": _t(cls),
        "status": _t(status),
        "lr": _t(out["long_running_ids"].map(_join, na_action="ignore")),
        "calls": _t(out["row"].map(_per_group(shown["action"], shown["row"], " ".join))),
        "summary": _t(out["row"].map(_per_group(line, calls_v["row"], "; ".join))),
        "seq": _n(out["last_seq"]),
        "author": _t(out["last_author"]),
        "inv": _t(out["invocation_id"]),
        "started": _when(out["started_at"]),
    }
    no_session = out["sk"] < 0
    reason_when = [
        is_(OrphanClass.NOT_STARTED) & no_session,
        is_(OrphanClass.UNKNOWN) & out["invocation_id"].isna(),
        is_(OrphanClass.NOT_STARTED),
        is_(OrphanClass.UNKNOWN),
        is_(OrphanClass.PAUSED),
        is_(OrphanClass.ACTUALLY_DONE),
        is_(OrphanClass.TOOL_UNANSWERED),
        out["last_final"].eq(True),
    ]
    words = list(_REASONS.values())
    reason = _words(idx, list(zip(reason_when, words[:-1], strict=True)), fields, words[-1])
    fields |= {"rseq": _n(out["recovered_seq"]), "rts": _when(out["recovered_ts"])}
    recovered = "; invocation id {inv} recovered from the user event #{rseq} at {rts}"
    reason += _words(idx, [(out["invocation_source"] == "user_event", recovered)], fields)
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
        "model": is_(OrphanClass.MODEL_INFLIGHT),
        "tool_hold": is_(OrphanClass.TOOL_UNANSWERED) & (worst_rank <= 2),
        "tool_go": is_(OrphanClass.TOOL_UNANSWERED),
        "mark_paused": is_(OrphanClass.PAUSED),
        "unknown": pd.Series(True, index=idx),
    }
    conds = [rules[name] for name in _RUN_WORDS]
    kind = _pick(conds, [kind.value for kind, _ in _RUN_WORDS.values()], None, idx)
    out["action_kind"] = kind.where(kind != Action.UNKNOWN, out["row"].map(first["action_kind"]))
    out["action"] = _words(
        idx, [(cond, w) for cond, (_, w) in zip(conds, _RUN_WORDS.values(), strict=True)], fields
    )
    out["reason"] = reason.where(~crash, reason + f"; crash loop: attempts ≥ cap {cap}")
    return out


# ---------------------------------------------------------------------------- the other views


def _crash_loops(
    crash: pd.DataFrame,
    ev: pd.DataFrame,
    events: pd.DataFrame,
    calls: pd.DataFrame,
    responses: pd.DataFrame,
    at: pd.Timestamp,
    cap: int,
) -> pd.DataFrame:
    """Runs to park, each with the dead-letter record to copy (request, class, last events)."""
    keys = crash[["row", "sk", "invocation_id"]].rename(columns={"invocation_id": "inv"})
    tail = keys.merge(ev[["sk", "invocation_id", "seq"]].reset_index(names="eidx"), on="sk")
    tail = tail[tail["inv"].isna() | (tail["invocation_id"] == tail["inv"])]
    tail = tail.sort_values(["row", "seq"]).groupby("row").tail(LAST_EVENTS)
    picked = events.iloc[tail["eidx"].to_numpy(dtype=np.int64)]
    last = pd.DataFrame(
        {
            "row": tail["row"].to_numpy(),
            "seq": picked["seq"].to_numpy(),
            "ts": picked["ts"].to_numpy(),
            "author": picked["author"].to_numpy(dtype=object),
            "kind": event_kinds(
                picked,
                calls[calls["event_id"].isin(picked["event_id"])],
                responses[responses["event_id"].isin(picked["event_id"])],
            ).to_numpy(dtype=object),
            "text": picked["text"].str.slice(0, 200).to_numpy(dtype=object),
        }
    )
    by_row: dict[int, list[dict[str, Any]]] = {}
    for record in last.to_dict("records"):
        row = int(record.pop("row"))
        by_row.setdefault(row, []).append(_plain(record))
    out = crash.assign(attempts_cap=cap)
    fields = ["run_id", "app_name", "user_id", "session_id", "invocation_id", "request"]
    fields += ["owner", "attempts", "orphan_class", "reason", "row"]
    out["dead_letter"] = [
        {
            **{k: _plain_value(v) for k, v in record.items() if k != "row"},
            "attempts_cap": cap,
            "parked_at": at,
            "last_events": by_row.get(int(record["row"]), []),
        }
        for record in crash[fields].to_dict("records")
    ]
    return out.sort_values("run_id")


def _live(live: pd.DataFrame, at: pd.Timestamp) -> pd.DataFrame:
    remaining = (live["lease_until"] - at).dt.total_seconds()
    return live.assign(remaining_s=remaining).sort_values("lease_until")


def _duplicates(
    calls: pd.DataFrame, responses: pd.DataFrame, keys: np.ndarray, journal: pd.DataFrame
) -> pd.DataFrame:
    """Business keys effected more than once (journal proof, or answered calls with no journal)."""
    c = calls[["session_id", "invocation_id", "call_id", "name"]].reset_index(drop=True)
    c["business_key"] = pd.Series(keys, dtype=object).astype(STR)
    c = c[c["business_key"].notna()]
    tool_of = c.drop_duplicates("business_key").set_index("business_key")["name"]
    key_of_call = c[c["call_id"].notna()].drop_duplicates("call_id").set_index("call_id")
    j = journal.loc[journal["status"] == "DONE", ["key", "invocation_id", "function_call_id"]]
    j = j.assign(
        business_key=j["function_call_id"].map(key_of_call["business_key"]).fillna(j["key"])
    )
    j = j[j["business_key"].duplicated(keep=False)]
    by_journal = j.groupby("business_key").agg(
        effects=("key", "size"),
        call_ids=("function_call_id", tuple),
        invocation_ids=("invocation_id", tuple),
        journal_keys=("key", tuple),
    )
    by_journal = by_journal[by_journal["effects"] >= 2].assign(basis="journal")

    c["cid"] = c["call_id"].fillna("")
    replies = pd.DataFrame(
        {
            "session_id": responses["session_id"],
            "invocation_id": responses["invocation_id"],
            "cid": responses["call_id"].fillna(""),
        }
    )
    call_key, reply_key = _row_keys(c, replies, ["session_id", "invocation_id", "cid"])
    answered = c[np.isin(call_key, reply_key)]
    answered = answered[~answered["business_key"].isin(journal["key"].dropna())]
    answered = answered[~answered["business_key"].isin(by_journal.index)]
    answered = answered.drop_duplicates(["session_id", "invocation_id", "cid"])
    answered = answered[answered["business_key"].duplicated(keep=False)]
    by_calls = answered.groupby("business_key").agg(
        effects=("cid", "size"),
        call_ids=("call_id", tuple),
        invocation_ids=("invocation_id", tuple),
    )
    by_calls = by_calls[by_calls["effects"] >= 2].assign(basis="calls")
    by_calls["journal_keys"] = _tuples(pd.Series(np.nan, index=by_calls.index))
    out = pd.concat([by_journal, by_calls]).reset_index(names="business_key")
    out["tool"] = out["business_key"].map(tool_of)
    fields = {"tool": out["tool"], "key": out["business_key"], "n": _n(out["effects"])}
    out["detail"] = _pick(
        [out["basis"] == "journal"],
        [
            _fmt(
                out.index,
                "the journal holds {n} DONE entries for {key}: the effect happened {n} times",
                **fields,
            )
        ],
        _fmt(
            out.index,
            "{n} answered calls of {tool} carry business key {key} and the journal "
            "has no entry under it, so {tool} most likely ran {n} times",
            **fields,
        ),
        out.index,
    )
    return out.sort_values("business_key")


def _disagreements(acted: pd.DataFrame) -> pd.DataFrame:
    """Ledger rows whose status the log contradicts."""
    status, cls, idx, orphan = acted["status"], acted["orphan_class"], acted.index, acted["orphan"]
    done = status == RunStatus.DONE
    fields = {
        "status": status,
        "last": _fmt(
            idx, "event #{seq} by {author}", seq=_n(acted["last_seq"]), author=acted["last_author"]
        ),
        "calls": acted["unanswered_calls"].map(_join),
    }
    rules = [
        (
            cls.eq(OrphanClass.ACTUALLY_DONE)
            & (orphan | status.isin(["FAILED", "PARKED", "PAUSED"])),
            "ledger says {status} but the terminal agent's final response is stored ({last})",
        ),
        (
            done & (acted["unanswered_calls"].str.len() > 0),
            "ledger says DONE but call(s) {calls} have no response in the log",
        ),
        (
            done & cls.isin([OrphanClass.NOT_STARTED, OrphanClass.UNKNOWN]),
            "ledger says DONE but no event of the run is in the log (or the evidence window "
            "leaves it out)",
        ),
        (
            done & cls.eq(OrphanClass.MODEL_INFLIGHT),
            "ledger says DONE but the last {last} is not the terminal agent's final response",
        ),
        (
            (status == RunStatus.PAUSED) & ~acted["any_lr"] & cls.ne(OrphanClass.NOT_STARTED),
            "ledger says PAUSED but no event of the invocation carries long-running call ids",
        ),
        (
            (status == RunStatus.RUNNING) & acted["lease_until"].isna(),
            "ledger says RUNNING without lease_until, so the sweeper never claims it",
        ),
    ]
    parts = [
        acted[cond].assign(detail=_words(idx, [(cond, words)], fields)[cond])
        for cond, words in rules
    ]
    out = pd.concat(parts).rename(columns={"status": "ledger_status"})
    return out.sort_values("run_id", kind="stable")


def _per_owner(acted: pd.DataFrame) -> pd.DataFrame:
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
    return flags.groupby("owner", dropna=False, sort=True).sum().reset_index()


# ---------------------------------------------------------------------------- helpers


def _shape(frame: pd.DataFrame, columns: Mapping[str, str]) -> pd.DataFrame:
    """Exactly ``columns``, in order, with their dtypes and a fresh RangeIndex."""
    out: dict[str, pd.Series] = {}
    for col, dtype in columns.items():
        series = frame[col].reset_index(drop=True)
        if dtype == TS:
            if isinstance(series.dtype, pd.DatetimeTZDtype):
                out[col] = series.dt.tz_convert("UTC").dt.as_unit("ns")
            else:
                out[col] = pd.to_datetime(series, utc=True).dt.as_unit("ns")
        elif dtype == STR:
            out[col] = series.astype(object).where(series.notna(), None).astype(STR)
        elif dtype == BOOL:
            out[col] = series.astype(object).where(series.notna(), False).astype(bool)
        else:
            out[col] = series.astype(dtype)
    return pd.DataFrame(out, index=pd.RangeIndex(len(frame)))


def _pick(conds: list[pd.Series], choices: list[Any], default: Any, index: pd.Index) -> pd.Series:
    """np.select over aligned Series: the first true condition's choice, else ``default``."""
    n = len(index)

    def arr(value: Any) -> np.ndarray:
        values: np.ndarray = (
            value.to_numpy(dtype=object)
            if isinstance(value, pd.Series)
            else np.full(n, value, dtype=object)
        )
        return values

    picked = np.select(
        [np.asarray(c, dtype=bool) for c in conds], [arr(v) for v in choices], arr(default)
    )
    return pd.Series(picked, index=index, dtype=object)


def _words(
    index: pd.Index, rules: list[tuple[Any, str]], fields: Mapping[str, Any], default: str = ""
) -> pd.Series:
    """The template of the first rule whose condition holds, filled in, row by row.

    Like ``_pick`` over ``_fmt``s, but each template is filled only on the rows that take it.
    """
    which = np.select(
        [np.asarray(cond, dtype=bool) for cond, _ in rules], np.arange(len(rules)), len(rules)
    )
    out = np.full(len(index), None, dtype=object)
    for k, template in enumerate([words for _, words in rules] + [default]):
        rows = which == k
        if rows.any():
            names = {name for _, name, _, _ in string.Formatter().parse(template) if name}
            sub = {
                n: fields[n][rows] if isinstance(fields[n], pd.Series) else fields[n] for n in names
            }
            out[rows] = _fmt(index[rows], template, **sub).to_numpy(dtype=object)
    return pd.Series(out, index=index, dtype=object)


def _row_keys(
    left: pd.DataFrame, right: pd.DataFrame, columns: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    """Integer keys equal exactly where ``columns`` are equal, across both frames."""
    key = np.zeros(len(left) + len(right), dtype=np.int64)
    for col in columns:
        codes, uniques = pd.factorize(pd.concat([left[col], right[col]], ignore_index=True))
        key = pd.factorize(key * (len(uniques) + 1) + (codes + 1))[0].astype(np.int64)
    return key[: len(left)], key[len(left) :]


def _fmt(index: pd.Index, template: str, **values: Any) -> pd.Series:
    """Vectorised ``template.format(**values)`` over aligned Series (strings broadcast)."""
    out = pd.Series("", index=index, dtype=STR)
    for literal, name, _, _ in string.Formatter().parse(template):
        out = out + literal
        if name is not None:
            value = values[name]
            out = out + (_t(value) if isinstance(value, pd.Series) else str(value))
    return out


def _t(series: pd.Series, missing: str = "?") -> pd.Series:
    """Text of a column for messages; missing values read ``missing``."""
    return series.astype(object).where(series.notna(), missing).astype(STR)


def _n(series: pd.Series) -> pd.Series:
    return _t(series.astype(NINT).astype(STR))


def _when(series: pd.Series) -> pd.Series:
    stamps = pd.to_datetime(series, utc=True)
    return _t(stamps.dt.strftime("%Y-%m-%dT%H:%M:%SZ"))


def _join(values: Any) -> str:
    return ", ".join("?" if v is None or v != v else str(v) for v in values)


def _per_group(values: pd.Series, keys: pd.Series, combine: Any) -> pd.Series:
    """``combine`` (tuple, or a str join) of ``values`` per key, in order, indexed by key.

    Single-row groups, the common case, are combined without a groupby call per group.
    """
    multi = keys.duplicated(keep=False).to_numpy(dtype=bool)
    singles = values[~multi].to_numpy(dtype=object)
    one = np.empty(len(singles), dtype=object)
    one[:] = [combine((value,)) for value in singles]
    grouped = values[multi].groupby(keys[multi].to_numpy(), sort=False).agg(combine)
    return pd.concat([pd.Series(one, index=keys[~multi].to_numpy(), dtype=object), grouped])


def _tuples(series: pd.Series) -> pd.Series:
    """Tuples, with () where ``series`` is missing."""
    values = series.to_numpy(dtype=object)
    out = np.empty(len(values), dtype=object)
    out[:] = [v if isinstance(v, tuple) else () for v in values]
    return pd.Series(out, index=series.index, dtype=object)


def _plain_value(value: Any) -> Any:
    """A dead-letter value without pandas' missing markers."""
    if value is None or value is pd.NaT or (isinstance(value, float) and value != value):
        return None
    if isinstance(value, np.generic):
        return value.item()
    return value


def _plain(record: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _plain_value(v) for k, v in record.items()}
