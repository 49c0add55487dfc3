"""The overview flow's findings: the triage card, a line per check, and the evidence the
reported symptom opens first.

Item ids and row fields are a contract (``docs/findings.md``); scripts read them.
"""

from __future__ import annotations

import shlex
from typing import Unpack

import pandas as pd

from incidentkit.findings import ROW_LIMIT, Finding, Findings, FindingsContext, Severity, rows_of
from incidentkit.flows.overview.card import SYMPTOMS
from incidentkit.flows.overview.growth import ADVICE, leaking_classes
from incidentkit.flows.overview.heap import heap_text, old_object_text
from incidentkit.flows.overview.triage import OverviewReport

FLOW = "overview"
LEAK_ROW = ["class", "allocated_in", "holder", "stack", "samples", "culprit"]
GROWING_ROW = [
    *("class", "library", "instances_growth", "bytes_growth", "first_instances"),
    *("last_instances", "holds", "containers", "container_growth", "kin", "culprit", "text"),
]
HEAP_ROW = ["recording", "gcs", "first_after_bytes", "last_after_bytes", "growth_bytes"]
CARD_ROW = [
    *("check", "severity", "count", "title", "flow", "evidence"),
    *("command", "session_id", "keys", "link", "report_verdict"),
]
STATE = "state-can-vanish"


def with_keys(card: pd.DataFrame) -> pd.DataFrame:
    """``card`` whose state lines' commands name their session and keys (``-p session_id S
    -p keys k1,k2``), shell-quoted: ready to paste."""
    if "command" not in card or "keys" not in card:
        return card
    keyed = card["keys"].map(lambda k: isinstance(k, str) and bool(k)) & card["command"].map(
        lambda c: isinstance(c, str) and " -p session_id " in c
    )
    if not keyed.any():
        return card
    rows = card.loc[keyed]
    commands = [
        f"{command.split(' -p session_id ')[0]} -p session_id {shlex.quote(str(session))} "
        f"-p keys {shlex.quote(keys)}"
        for command, session, keys in zip(
            rows["command"], rows["session_id"], rows["keys"], strict=True
        )
    ]
    out = card.copy()
    out.loc[keyed, "command"] = pd.Series(commands, index=rows.index, dtype=object)
    return out


def _unexamined(report: OverviewReport) -> str | None:
    """The reported symptom's first check (``forgot``: no session's keys examined; ``crash``:
    no orphan looked for) when none of its lines ran: the card cannot call that symptom clean.
    None when a line ran, or no symptom was given."""
    if report.symptom is None or report.symptom not in SYMPTOMS:
        return None
    first = SYMPTOMS[report.symptom].order[0]
    lines = report.card.loc[report.card["check"].eq(first), "severity"]
    return first if lines.empty or bool(lines.eq("NOT_CHECKED").all()) else None


def _card(report: OverviewReport, limit: int | None) -> Finding:
    card = with_keys(report.card)
    urgent = card.loc[card["severity"].isin(["CRITICAL", "WARNING"])]
    if len(urgent):
        top = urgent.iloc[0]
        where = (
            "look at the classes that grow"
            if top["flow"] == FLOW
            else f"open the {top['flow']} flow first"
        )
        title = f"{len(urgent)} check(s) need a look; {where}: {top['title']}"
        severity = (
            Severity.CRITICAL if (urgent["severity"] == "CRITICAL").any() else Severity.WARNING
        )
        steps = []
        for row in urgent.to_dict("records"):
            command = row.get("command")
            if row["check"] in ("growing-classes", "heap-growth"):
                steps.append(f"for the classes that grow: {ADVICE}")
            elif isinstance(command, str):
                steps.append(f"the {row['flow']} flow: {command}")
        action = "Open, in this order: " + "; ".join(dict.fromkeys(steps)) + "."
    elif (first := _unexamined(report)) == STATE:
        state = card.loc[card["check"].eq(STATE), "title"]
        why = "; ".join(state) if len(state) else "no check of the app's state ran"
        title = f"the state was not examined, so the card cannot say it is clean: {why}"
        severity = Severity.WARNING
        action = (
            "Run vanished_state on the customer's session with the key they miss "
            "(incidentkit run vanished_state --evidence EVIDENCE -p session_id S -p keys K), "
            "and add the session store (or the event log with its deltas) to the manifest."
        )
    elif first is not None:
        lines = card.loc[card["check"].eq(first), "title"]
        why = "; ".join(dict.fromkeys(lines)) if len(lines) else "no line of it ran"
        title = (
            f"the {first} check, the first for '{report.symptom}', did not run, so the card "
            f"cannot say nothing needs action: {why}"
        )
        severity = Severity.WARNING
        action = (
            f"Give the evidence the {first} line names (or card_engine = no when the card was "
            "computed in the engine), then run the card again; or open the flow its line names."
        )
    else:
        title = f"no check of the {len(card)} needs a look"
        state = card.loc[card["check"].eq(STATE) & card["severity"].eq("INFO"), "title"]
        if report.symptom == "forgot" and len(state):
            title += f"; {'; '.join(state)}"
        severity = Severity.INFO
        action = "None; for a reported symptom the card's order says where to look anyway."
    skipped = card.loc[card["severity"].eq("NOT_CHECKED"), "check"]
    detail = "Each line is one flow's cheap check on the app's evidence. " + (
        f"Not checked: {', '.join(skipped)} (see each line)." if len(skipped) else ""
    )
    return Finding(
        f"{FLOW}/card", severity, title, detail.strip(), action,
        rows_of(card, [c for c in (*CARD_ROW, "app") if c in card], limit=limit), len(card),
    )  # fmt: skip


def _heap(report: OverviewReport, limit: int | None) -> Finding | None:
    heap = report.heap
    if heap.empty or not heap["growing"].any():
        return None
    leaks = report.leaks
    old = old_object_text(leaks) if len(leaks) else None
    return Finding(
        f"{FLOW}/heap-growth",
        Severity.WARNING,
        heap_text(heap) + (f"; most old-object samples: {old}" if old else ""),
        "From the JFR recording: heap used after each GC (what survives) climbs from GC to "
        "GC, over 3 GCs or more (fewer say nothing either way). The old-object samples are "
        "objects allocated during the recording and still alive at its end, by class and the "
        "application frame that allocated them, when the recording kept their stacks.",
        ADVICE,
        rows_of(leaks, LEAK_ROW, limit=limit) if len(leaks) else rows_of(heap, HEAP_ROW),
        len(leaks) if len(leaks) else len(heap),
    )


def _growing(report: OverviewReport, limit: int | None) -> Finding | None:
    """The application's classes that grow between the class histograms, with the maps that
    hold them."""
    growing = report.growing
    if growing.empty:
        return None
    leaks = leaking_classes(growing)
    if leaks.empty:
        return None
    first = leaks.iloc[0]
    culprit = f", pointing at {first['culprit']}" if isinstance(first["culprit"], str) else ""
    own = int((~leaks["library"]).sum())
    whose = f"{own} application" if own else f"{len(leaks)} library"
    return Finding(
        f"{FLOW}/growing-classes",
        Severity.WARNING,
        f"{whose} class group(s) grow between the histograms; {first['text']}{culprit}",
        "From the class histograms: classes whose instances and bytes grow from the first to "
        "the last (never falling between), the application's own first (the JDK's classes and "
        "arrays only carry them; libraries rank below), by instances gained. Each is paired "
        "with the JDK containers that grew by the same count, within 5 % (a "
        "ConcurrentHashMap$Node per map entry), and with the classes that grew with it (kin). "
        "A usual culprit is named only when ADK's own classes are in the histograms.",
        f"Find the {first['holds'] or 'field'} that holds {first['class']} (a static or "
        f"long-lived one) and bound it. {ADVICE}",
        rows_of(leaks, GROWING_ROW, limit=limit),
        len(leaks),
    )


def _symptom(report: OverviewReport) -> Finding | None:
    if not report.symptom:
        return None
    first = SYMPTOMS[report.symptom].first_evidence
    return Finding(
        f"{FLOW}/first-evidence",
        Severity.INFO,
        f"for '{report.symptom}', open {first.split(',')[0]} first",
        f"Let the reported symptom choose the first evidence source. For "
        f"'{report.symptom}': {first}.",
        "Open that evidence first; the card lists the symptom's checks first.",
        ({"symptom": report.symptom, "first_evidence": first},),
    )


def overview_findings(report: OverviewReport, **context: Unpack[FindingsContext]) -> Findings:
    """The findings of the overview flow, from :func:`.triage.triage_overview`, with
    ``context`` (:class:`~incidentkit.findings.FindingsContext`).

    Verdict: INCOMPLETE_EVIDENCE when rows of the sources were rejected, or when no line of
    the reported symptom's first check ran (:func:`_unexamined`); else ACTION_NEEDED when a
    line of the card is CRITICAL or WARNING; else CLEAN.
    """
    limit = context.get("row_limit", ROW_LIMIT)
    items = (_symptom(report), _card(report, limit), _growing(report, limit), _heap(report, limit))
    counts = report.card["severity"].value_counts()
    summary = {
        "checks": len(report.card),
        **{s.lower(): int(counts.get(s, 0)) for s in ("CRITICAL", "WARNING", "INFO")},
        "not_checked": int(counts.get("NOT_CHECKED", 0)),
    }
    return Findings.build(
        FLOW,
        items,
        summary,
        incomplete=_unexamined(report) is not None,
        as_of=report.as_of,
        **context,
    )
