"""The triage card (let the reported symptom choose the first evidence source): the
cheap check of every flow on one app's frames, each a line with its count, its severity and
the flow to open next, ordered by the symptom the user reports.

Each flow declares its checks in its ``flow.py`` (:attr:`~incidentkit.flows.plugin.Flow.card`)
and keeps them in its folder; the card runs each on frames loaded once (no notebook, no second
read): a check whose evidence is missing is a line that says so, never an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from incidentkit.errors import IncidentkitError
from incidentkit.flows import FLOWS
from incidentkit.flows.card_lines import (
    LINE_COLUMNS,
    SEVERITY_RANK,
    CardContext,
    CardLine,
    Profile,
    not_checked,
)
from incidentkit.flows.common import Frames

__all__ = [
    "CHECKS",
    "LINE_COLUMNS",
    "SEVERITY_RANK",
    "SYMPTOMS",
    "Profile",
    "Symptom",
    "ordered",
    "triage_card",
]

CHECKS = (
    "open-past-timeout",
    "latency-cliff",
    "over-call-limit",
    "orphans",
    "dead-worker",
    "quiet-errors",
    "state-can-vanish",
    "overlapping-invocations",
    "growing-classes",
    "heap-growth",
)
"""Every check, in the order the card lists them without a symptom (severity first)."""


@dataclass(frozen=True)
class Symptom:
    """What a reported symptom opens first, and the order its card lists the checks in."""

    first_evidence: str
    order: tuple[str, ...]


SYMPTOMS: Mapping[str, Symptom] = {
    "spinner": Symptom(
        "the diagnostics log (run.start lines with no run.end), then the last event of those "
        "invocations in the event log, then two thread dumps a few seconds apart; not the "
        "trace UI: a stuck request's span is never exported",
        (
            *("open-past-timeout", "dead-worker", "latency-cliff", "orphans", "quiet-errors"),
            "over-call-limit",
        ),
    ),
    "slow": Symptom(
        "the spans (invocation, call_llm and execute_tool durations) and the diagnostics log's "
        "run.end ms, per minute: a change point says when it started",
        ("latency-cliff", "open-past-timeout", "dead-worker", "over-call-limit", "quiet-errors"),
    ),
    "cost": Symptom(
        "the diagnostics log's run.end llmCalls and the model spans' token usage, per "
        "invocation: a loop burns calls long before anything fails",
        ("over-call-limit", "latency-cliff", "quiet-errors"),
    ),
    "forgot": Symptom(
        "the event log's sessions where state can vanish (temp: keys; partial events; tool "
        "answers with no delta; overlapping invocations), then the session's dump and its "
        "state deltas (incidentkit session ID), then its stored state",
        ("state-can-vanish", "overlapping-invocations", "quiet-errors", "orphans"),
    ),
    "crash": Symptom(
        "the run ledger (RUNNING rows whose lease expired), then the event log's last events "
        "and the side-effect journal of those runs",
        (
            *("orphans", "dead-worker", "open-past-timeout", "growing-classes", "heap-growth"),
            "quiet-errors",
        ),
    ),
    "errors": Symptom(
        "the event log's error codes and the diagnostics log's model/tool/run.error and "
        "rx.undeliverable lines: many errors never become exceptions",
        ("quiet-errors", "open-past-timeout", "dead-worker", "over-call-limit", "orphans"),
    ),
    "restarts": Symptom(
        "two GC.class_histogram dumps an hour apart (which classes grow), then the ledger's "
        "orphans each restart left",
        ("growing-classes", "heap-growth", "orphans", "dead-worker", "open-past-timeout"),
    ),
}
"""The triage card: each symptom's first evidence and the checks it lists first."""


def triage_card(
    frames: Frames,
    *,
    as_of: pd.Timestamp,
    profile: Profile,
    histograms: pd.DataFrame | None = None,
    symptom: str | None = None,
    jfr_heap: pd.DataFrame | None = None,
    jfr_old_objects: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The card (:data:`LINE_COLUMNS`), one line per check of every flow in
    :data:`~incidentkit.flows.FLOWS` that declares one: the symptom's order when one is given
    (its checks first), else by severity; a check that fails on odd evidence is a NOT_CHECKED
    line for each check it declares, naming the error, never an exception."""
    context = CardContext(
        frames,
        as_of,
        profile,
        symptom=symptom,
        histograms=histograms,
        jfr_heap=jfr_heap,
        jfr_old_objects=jfr_old_objects,
    )
    lines: list[CardLine] = []
    for flow in FLOWS.values():
        for declared in flow.card:
            try:
                lines += declared.lines(context)
            except IncidentkitError as err:  # a check on odd evidence: say so, keep the card
                why = f"{type(err).__name__}: {err}"
                lines += [not_checked(check, flow.name, "", why) for check in declared.checks]
    return ordered(pd.DataFrame(lines, columns=LINE_COLUMNS), symptom)


def ordered(card: pd.DataFrame, symptom: str | None) -> pd.DataFrame:
    """The card's lines in reading order: the symptom's checks first (when one is given),
    then by severity, then in the order of :data:`CHECKS`."""
    keys = pd.DataFrame(
        {
            "rank": card["severity"].map(SEVERITY_RANK),
            "position": card["check"].map({c: k for k, c in enumerate(CHECKS)}),
        }
    )
    if symptom:
        first = {c: k for k, c in enumerate(SYMPTOMS[symptom].order)}
        keys.insert(0, "asked", card["check"].map(first).fillna(len(first)))
    order = keys.sort_values(list(keys.columns), kind="stable").index
    return card.loc[order].reset_index(drop=True)
