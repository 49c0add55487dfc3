"""The overview flow's steps: what its notebook's cells call, one call per cell."""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pandas as pd

from incidentkit.evidence import Evidence
from incidentkit.findings import Findings
from incidentkit.flows import FLOWS, engine_card
from incidentkit.flows.common import (
    Frames,
    check_app,
    findings_context,
    frames_of,
    judge,
    last_record,
    ledger_apps,
    logged_apps,
    opened,
    up_to,
)
from incidentkit.flows.evidence_limits import with_limits
from incidentkit.flows.overview.card import SYMPTOMS, Profile, ordered
from incidentkit.flows.overview.findings import overview_findings
from incidentkit.flows.overview.flow import FLOW as DECLARED
from incidentkit.flows.overview.settings import CardProfile, OverviewSettings
from incidentkit.flows.overview.triage import (
    OverviewReport,
    linked,
    read_summary,
    triage_overview,
)
from incidentkit.flows.settings import PARAMETER, Found, resolve
from incidentkit.frames import FRAMES
from incidentkit.manifest import Filters

FLOW = "overview"
SECTIONS = tuple(dict.fromkeys((*DECLARED.sections, "jfr")))
"""The sections whose rejects make the verdict incomplete (a JFR recording among them)."""
JVM_CHECKS = ("growing-classes", "heap-growth")
"""Checks of the JVM's evidence (histograms, a JFR recording), not of one app's."""


def setup(
    evidence: Evidence | str | os.PathLike[str],
    *,
    app_name: str = "",
    as_of: object = "",
    symptom: str = "",
    card_engine: str = "",
) -> tuple[Evidence, OverviewSettings]:
    """The incident up to ``as_of`` and the card's settings: the apps to check (the
    parameter, else the manifest's ``app_name``, else every app the evidence names), the
    symptom, and where the card is computed (``card_engine``)."""
    incident = opened(FLOW, evidence, as_of=as_of)
    choice = card_engine.strip().lower() or "auto"
    if choice == "auto":
        in_engine, why = engine_card.auto_choice(
            incident.sources, filters=incident.filters, environ=incident.environ
        )
    else:
        in_engine, why = choice == "yes", PARAMETER
    if app_name and app_name.strip():
        apps, apps_from = [app_name.strip()], "parameter"
        check_app(incident, apps[0])
    elif incident.filters.app_name:
        apps, apps_from = [incident.filters.app_name], "manifest app_name"
    elif in_engine:
        apps, where = engine_card.fleet_apps(incident.sources, incident.filters, incident.environ)
        apps_from = f"every app of {where}"
    else:
        apps, apps_from = ledger_apps(incident), "every app of the ledger"
        if not apps:
            apps, where = logged_apps(incident)
            apps_from = f"every app of {where}"
    latest = _latest_in_engine if in_engine else None
    incident, moment = judge(FLOW, incident, as_of, latest=latest)
    label = ", ".join(apps) if apps else "(none found)"
    found = Found(
        FLOW,
        label,
        apps_from,
        moment.at,
        moment.source,
        more={"apps": (tuple(apps), apps_from), "in_engine": (in_engine, why)},
    )
    settings = resolve(OverviewSettings, incident, found, symptom=symptom, card_engine=card_engine)
    return up_to(incident, settings.as_of), settings


ENGINE_SECTIONS = ("events", "ledger")
"""The sections the engine card reads in their database (the rest are small files)."""


def _latest_in_engine(evidence: Evidence) -> pd.Timestamp | None:
    """The evidence's last record, as :func:`~incidentkit.flows.common.last_record` finds it,
    with the events' and the ledger's latest time asked of where the engine card reads them
    (one ``MAX`` each), not read from frames it never loads."""
    times = [last_record(evidence, [s for s in DECLARED.sections if s not in ENGINE_SECTIONS])]
    for section in ENGINE_SECTIONS:
        spec = evidence.sources.get(section)
        if spec is None or not engine_card.in_engine(spec, files=True):
            continue
        times.append(engine_card.latest(spec, evidence.filters, evidence.environ))
    known = [t for t in times if t is not None]
    return max(known) if known else None


def profile_of(evidence: Evidence, app: str) -> Profile:
    """The settings the checks need for ``app``, from its ``[apps.<app>]`` profile."""
    return resolve(CardProfile, evidence, Found(FLOW, app, "the card's app")).profile()


def for_app(frames: Frames, app: str) -> Frames:
    """The rows of ``frames`` that belong to ``app``: by app name where a frame has one, else
    by its sessions (calls, responses, state writes) or invocations (spans, journal)."""
    runs = frames.runs.loc[frames.runs["app_name"].eq(app)]
    events = frames.events.loc[frames.events["app_name"].eq(app)]
    diagnostics = frames.diagnostics.loc[frames.diagnostics["app_name"].eq(app)]
    sessions = pd.concat([events["session_id"], runs["session_id"]]).dropna().unique()
    invocations = (
        pd.concat([events["invocation_id"], runs["invocation_id"], diagnostics["invocation_id"]])
        .dropna()
        .unique()
    )

    def by_session(frame: pd.DataFrame) -> pd.DataFrame:
        return frame.loc[frame["session_id"].isin(sessions)]

    spans = frames.spans
    traces = spans.loc[spans["invocation_id"].isin(invocations), "trace_id"]
    return Frames(
        runs=runs,
        events=events,
        calls=by_session(frames.calls),
        responses=by_session(frames.responses),
        state_writes=by_session(frames.state_writes),
        session_state=frames.session_state.loc[frames.session_state["app_name"].eq(app)],
        journal=frames.journal.loc[frames.journal["invocation_id"].isin(invocations)],
        spans=spans.loc[spans["trace_id"].isin(traces)],
        diagnostics=diagnostics,
        threads=frames.threads,
    )


def triage(
    evidence: Evidence, settings: OverviewSettings, *, summary_path: str | os.PathLike[str] = ""
) -> OverviewReport:
    """The card of every app: the frames read once and split by app; each line linked to
    its flow's report when ``run all`` (which gives ``summary_path``) ran it first. With the
    engine card (``card_engine``: :func:`engine_triage`) no event or ledger frame is read."""
    whole = evidence.narrowed(replace(evidence.filters, app_name=None))
    histograms = (
        evidence.frame("class_histograms")
        if "class_histograms" in FRAMES and evidence.has("histograms")
        else None
    )
    jfr = evidence.has("jfr")
    jfr_heap = evidence.frame("jfr_heap") if jfr else None
    jfr_old = evidence.frame("jfr_old_objects") if jfr else None
    summary = read_summary(summary_path)
    if settings.in_engine:
        found = engine_triage(
            evidence, settings, whole.filters, summary, histograms, jfr_heap, jfr_old
        )
        return replace(found, card=_finished(found.card, evidence, settings))
    everything = frames_of(whole, DECLARED.reads)
    cards: list[pd.DataFrame] = []
    report = None
    for app in settings.apps or ("",):
        report = triage_overview(
            for_app(everything, app) if app else everything,
            as_of=settings.as_of,
            profile=profile_of(evidence, app) if app else Profile(),
            histograms=histograms,
            symptom=settings.symptom,
            summary=summary,
            jfr_heap=jfr_heap,
            jfr_old_objects=jfr_old,
        )
        card = report.card.assign(app=app or None)
        if cards:  # the JVM's histograms and recording are on the first app's card only
            card = card.loc[~card["check"].isin(JVM_CHECKS)]
        cards.append(card)
    assert report is not None
    card = pd.concat(cards, ignore_index=True)
    card.loc[card["check"].isin(JVM_CHECKS), "app"] = None  # the JVM's, not an app's
    return replace(report, card=_finished(card, evidence, settings))


def _finished(card: pd.DataFrame, evidence: Evidence, settings: OverviewSettings) -> pd.DataFrame:
    """The card without the JVM lines the evidence has nothing for, with each line's command,
    in reading order."""
    if not evidence.has("histograms") and settings.symptom != "restarts":
        card = card.loc[card["check"].ne("growing-classes")]  # nothing to check it on
    if not evidence.has("jfr"):
        card = card.loc[card["check"].ne("heap-growth")]
    card = card.assign(command=commands(card, evidence))
    return ordered(card, settings.symptom)


def engine_triage(
    evidence: Evidence,
    settings: OverviewSettings,
    filters: Filters,
    summary: Mapping[str, Any] | None,
    histograms: pd.DataFrame | None,
    jfr_heap: pd.DataFrame | None,
    jfr_old: pd.DataFrame | None,
) -> OverviewReport:
    """The card of every app computed in the events' and ledger's database
    (:mod:`incidentkit.flows.engine_card`): one pass per check over the fleet; only
    aggregates and the flagged invocations' rows are read, never the events frame. Each app's
    lines in the card's order, as :func:`triage` gives them."""
    apps = tuple(settings.apps)
    with engine_card.opened(
        apps=apps or ("",),
        filters=filters,
        as_of=settings.as_of,
        profiles={app: profile_of(evidence, app) if app else Profile() for app in apps},
        sources=evidence.sources,
        environ=evidence.environ,
        symptom=settings.symptom,
        histograms=histograms,
        jfr_heap=jfr_heap,
        jfr_old_objects=jfr_old,
    ) as context:
        lines = engine_card.engine_lines(context)
        computed = context.computed("events", "ledger")
    jvm = lines["check"].isin(JVM_CHECKS)
    cards = [
        ordered(lines.loc[~jvm & lines["app"].eq(app)].reset_index(drop=True), settings.symptom)
        for app in apps or ("",)
    ]
    card = pd.concat([*cards, lines.loc[jvm]], ignore_index=True)
    card["app"] = card["app"].where(card["app"].astype(bool), None).astype("str")
    return linked(
        card,
        as_of=settings.as_of,
        symptom=settings.symptom,
        summary=summary,
        histograms=histograms,
        jfr_heap=jfr_heap,
        jfr_old_objects=jfr_old,
        computed=computed,
    )


def commands(card: pd.DataFrame, evidence: Evidence) -> pd.Series:
    """Per line, the command that opens its flow on its app (and session), ready to paste;
    None for the overview's own line (slow death is shown here)."""
    where = evidence.manifest.path
    folder = "EVIDENCE" if where is None else str(where.parent)
    if where is not None:
        with contextlib.suppress(ValueError):  # another drive (Windows): keep the full path
            relative = os.path.relpath(where.parent)
            folder = folder if relative.startswith("..") else relative

    def command(row: Mapping[str, Any]) -> str | None:
        flow = str(row["flow"])
        if flow == FLOW:
            return None
        line = f"incidentkit run {flow} --evidence {shlex.quote(folder)} --out out/{flow}"
        if isinstance(row.get("app"), str):
            line += f" -p app_name {shlex.quote(row['app'])}"
        if FLOWS[flow].required:
            session = row.get("session_id")
            given = shlex.quote(session) if isinstance(session, str) else "SESSION_ID"
            line += f" -p session_id {given}"
        keys = row.get("keys")
        if isinstance(keys, str) and keys:
            line += f" -p keys {shlex.quote(keys)}"
        return line

    lines: list[str | None] = [
        command({str(k): v for k, v in row.items()}) for row in card.to_dict("records")
    ]
    return pd.Series(lines, index=card.index, dtype=object)


ENGINE_READ = ("histograms", "jfr")
"""The sections the engine card reads into frames (small files); the events and the ledger it
queries where they live, so their rejects are not read either."""


def findings(report: OverviewReport, evidence: Evidence, settings: OverviewSettings) -> Findings:
    """The flow's findings, with the incident's title, window, settings and rejects (of the
    sections read into frames: with the engine card, the JVM's files only)."""
    read = tuple(s for s in SECTIONS if s in ENGINE_READ) if report.computed else SECTIONS
    found = overview_findings(report, **findings_context(evidence, settings, read))
    return with_limits(found, evidence)


def coverage(evidence: Evidence, settings: OverviewSettings) -> str:
    """What the evidence covers (:func:`incidentkit.coverage.measure`, which loads every
    source); with the engine card, not measured: loading the events is what it avoids."""
    if settings.in_engine:
        return (
            "Coverage not measured: the card is computed where the events and the ledger are "
            "(card_engine), and measuring would load every event. Run `incidentkit inspect` on "
            "the evidence for its coverage, or give card_engine = no."
        )
    from incidentkit.coverage import measure, render_text

    return render_text(measure(evidence))


SHOWN: Mapping[str, tuple[str, ...]] = {
    "card": (
        *("severity", "app", "check", "title", "count", "evidence"),
        *("command", "keys", "report_verdict", "link"),
    ),
    "growing": (
        *("class", "first_instances", "last_instances", "first_bytes", "last_bytes"),
        *("bytes_growth", "culprit"),
    ),
    "heap": (
        *("recording", "gcs", "first", "last", "first_after_bytes", "last_after_bytes"),
        *("growth_bytes", "bytes_per_hour", "growing"),
    ),
    "leaks": ("class", "allocated_in", "holder", "samples", "culprit"),
}


def table(report: OverviewReport, view: str) -> Any:
    """The card (``"card"``), the growing classes (``"growing"``), the heap after GC
    (``"heap"``) or the old-object leak candidates (``"leaks"``) for people."""
    from incidentkit.report import MarkdownView
    from incidentkit.report import table as people_table

    frame: pd.DataFrame = getattr(report, view)
    if view == "growing" and frame.empty:
        return MarkdownView(
            "No class grows: the manifest has no `[histograms]` section, or its histograms "
            "show no class growing (two or more are needed; `docs/slow_death.md`)."
        )
    if view == "heap" and frame.empty:
        return MarkdownView(
            "No heap summaries: the manifest has no `[jfr]` section, or its recording holds no "
            "`jdk.GCHeapSummary` events (`docs/jfr.md`)."
        )
    if view == "leaks" and frame.empty:  # said once: the heap's line covers no recording
        return MarkdownView(
            ""
            if report.heap.empty
            else "No old-object samples in the recording (`jdk.OldObjectSample` is off in "
            "its settings, or nothing allocated during it survived; `docs/jfr.md`)."
        )
    if view == "card":  # lines that found something first; the quiet ones counted
        quiet = frame.loc[frame["severity"].eq("INFO")]
        frame = frame.loc[frame["severity"].ne("INFO")]
        if frame.empty:
            return MarkdownView(f"All {len(quiet)} checks found nothing (INFO).")
    shown = [c for c in SHOWN[view] if c in frame.columns]
    return people_table(frame, shown)


def first_evidence(report: OverviewReport) -> Any:
    """What the reported symptom opens first, as Markdown."""
    from incidentkit.report import MarkdownView

    where = (
        f" The card was {report.computed} (only aggregates and the flagged invocations' rows "
        "were read; `docs/engine-card.md`)."
        if report.computed
        else ""
    )
    if not report.symptom:
        return MarkdownView(
            "No symptom given: the card is ordered by severity. Give one of "
            + ", ".join(f"`{s}`" for s in SYMPTOMS)
            + " to order it as the triage card does for that symptom."
            + where
        )
    return MarkdownView(
        f"**{report.symptom}**: open {SYMPTOMS[report.symptom].first_evidence} first.{where}"
    )
