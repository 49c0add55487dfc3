"""Orphan classification: every run in flight at ``as_of``, what happened, what to do.

:func:`classify_orphans` applies a recovery sweeper's classifier to the whole ledger in one
vectorised pass (merges and group-bys; no per-run query, no loop over events), then looks up
each unanswered call in the side-effect journal by business key and writes the action an
on-call engineer takes. ``docs/orphans.md`` explains every class, verdict and action.

The steps live beside it: ``classes`` (locating each run's invocation and classifying it),
``journal`` (business keys and the journal), ``actions`` (what to do, in words) and ``views``
(the side views).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from incidentkit.errors import ParameterError
from incidentkit.flows._frames import as_columns
from incidentkit.flows._resume import RUN_TWICE_COLUMNS, calls_run_twice, resumes
from incidentkit.flows.orphans.actions import Action, call_actions, run_actions
from incidentkit.flows.orphans.classes import (
    OrphanClass,
    answered,
    classify,
    event_kinds,
    locate,
    read_log,
    run_invocations,
    unanswered,
)
from incidentkit.flows.orphans.journal import (
    JournalVerdict,
    business_keys,
    journal_verdicts,
    parse_key_templates,
)
from incidentkit.flows.orphans.views import (
    CRASH_LOOP_COLUMNS,
    DISAGREEMENT_COLUMNS,
    DUPLICATE_COLUMNS,
    LAST_EVENTS,
    LIVE_COLUMNS,
    OWNER_COLUMNS,
    crash_loops,
    duplicate_effects,
    live_leases,
    per_owner,
    status_disagreements,
)
from incidentkit.frames import (
    BOOL,
    INT,
    NINT,
    OBJ,
    STR,
    TS,
    RunStatus,
    require_columns,
    spec_of,
)
from incidentkit.times import utc_timestamp

__all__ = [
    "CALL_COLUMNS",
    "CRASH_LOOP_COLUMNS",
    "DISAGREEMENT_COLUMNS",
    "DUPLICATE_COLUMNS",
    "LAST_EVENTS",
    "LIVE_COLUMNS",
    "OWNER_COLUMNS",
    "RUN_COLUMNS",
    "TERMINAL_STATUSES",
    "Action",
    "JournalVerdict",
    "OrphanClass",
    "OrphanReport",
    "classify_orphans",
    "event_kinds",
    "run_invocations",
]

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
    "call_action_kind": STR,
    "call_action": STR,
}
"""A call's ``action_kind`` and ``action`` are its run's (one action per run, in every view);
``call_action_kind`` and ``call_action`` say what the journal asks for this call alone, which
decides the run's action when the run is re-driven or held for its calls."""
TERMINAL_STATUSES = frozenset({RunStatus.DONE, RunStatus.FAILED, RunStatus.PARKED})


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
    calls_run_twice: pd.DataFrame = field(
        default_factory=lambda: as_columns(pd.DataFrame(), RUN_TWICE_COLUMNS)
    )
    """Calls ADK executed again after a crash resumed their invocation, each with what the
    journal says (:data:`incidentkit.flows._resume.RUN_TWICE_COLUMNS`); found with or without
    a ledger."""
    notes: tuple[str, ...] = ()
    """What the sweep could not read beside its own sources, in words (shown first)."""

    def class_counts(self) -> dict[str, int]:
        """Orphans per class, every class present (zero when absent)."""
        counts = self.orphans["orphan_class"].value_counts()
        return {cls.value: int(counts.get(cls.value, 0)) for cls in OrphanClass}


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
    spans: pd.DataFrame | None = None,
    diagnostics: pd.DataFrame | None = None,
    has_journal: bool = True,
) -> OrphanReport:
    """Classify every non-terminal run of the ledger at ``as_of`` as a recovery sweeper would.

    ``terminal_agent`` names the agent whose final response ends a run (one name or several).
    ``key_templates`` maps each tool with a side effect to its business-key template, filled
    from the call's args (``{"sendInvoice": "send-invoice:{invoiceId}"}``); tools not listed are
    taken to have none. Orphans are RUNNING rows whose lease expired before ``as_of`` (a
    timezone-aware time; naive is refused). Runs with ``attempts >= attempts_cap`` that would
    be re-driven are crash loops to park. Inputs are canonical frames and are not modified.

    Apart from the ledger, the calls ADK ran again when it resumed a crashed invocation (a
    resumable app: same invocation id, same function-call id) are checked against the
    journal; ``spans`` and ``diagnostics``, when given, show the resumes
    (:func:`incidentkit.flows._resume.resumes`), and ``has_journal`` False says the evidence
    has no journal at all.
    """
    at = utc_timestamp(as_of, what="as_of")
    terminal = _terminal_agents(terminal_agent)
    templates = parse_key_templates(key_templates)
    if isinstance(attempts_cap, bool) or not isinstance(attempts_cap, int) or attempts_cap < 1:
        raise ParameterError(
            "attempts_cap must be a whole number of at least 1",
            value=attempts_cap,
            fix="give the sweeper's cap, e.g. 3",
        )
    frames = {"runs": runs, "events": events, "calls": calls, "responses": responses}
    for name, frame in (*frames.items(), ("journal", journal)):
        require_columns(frame, spec_of(name).names, what=f"the {name} frame")

    log = read_log(events)
    located = locate(runs, log).merge(log.invocations, on=["sk", "invocation_id"], how="left")
    is_answered = answered(calls, responses)
    open_calls = unanswered(located, calls, is_answered)
    runs_x = classify(located, open_calls, terminal)
    keys, key_problems = business_keys(calls, templates)

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
    verdicts = journal_verdicts(
        open_calls[open_calls["row"].isin(open_x["row"])], keys, key_problems, journal, templates
    )
    calls_v = call_actions(verdicts)
    acted = run_actions(open_x, calls_v, attempts_cap).sort_values("run_id", kind="stable")
    orphan = acted["orphan"]
    own = calls_v.rename(columns={"action_kind": "call_action_kind", "action": "call_action"})
    runs_x["action_kind"] = runs_x["row"].map(acted.set_index("row")["action_kind"]).astype(STR)
    pauses = resumes(events, calls, responses, spans, diagnostics).pauses
    return OrphanReport(
        orphans=as_columns(acted[orphan], RUN_COLUMNS),
        in_flight=as_columns(acted[~orphan], RUN_COLUMNS),
        calls=as_columns(
            own.merge(acted[["row", "run_id", "action_kind", "action"]], on="row").sort_values(
                ["run_id", "seq"]
            ),
            CALL_COLUMNS,
        ),
        crash_loops=crash_loops(
            acted[acted["crash"]], log, events, calls, responses, at, attempts_cap
        ),
        duplicate_effects=duplicate_effects(calls, is_answered, keys, journal),
        live_leases=live_leases(acted[acted["live"]], at),
        status_disagreements=status_disagreements(runs_x),
        per_owner=per_owner(acted),
        as_of=at,
        terminal_agents=terminal,
        key_templates={tool: tpl.text for tool, tpl in templates.items()},
        attempts_cap=attempts_cap,
        ledger_runs=len(runs),
        calls_run_twice=calls_run_twice(pauses, calls, responses, journal if has_journal else None),
    )


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
