"""The overview flow's triage: the card on one app's frames, and where each line links."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from incidentkit.flows.common import Frames
from incidentkit.flows.overview.card import Profile, triage_card


@dataclass(frozen=True)
class OverviewReport:
    """Everything the overview notebook shows and its findings are drawn from."""

    as_of: pd.Timestamp
    symptom: str | None
    card: pd.DataFrame
    """One line per check (:data:`.card.LINE_COLUMNS`), ``link`` (the flow's own report when
    ``run all`` wrote it, relative to this report, else None) and ``report_verdict``."""
    growing: pd.DataFrame
    """The classes that grow between the class histograms (empty without two of them)."""
    heap: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Heap used after GC per JFR recording (:data:`.heap.HEAP_COLUMNS`; empty without one)."""
    leaks: pd.DataFrame = field(default_factory=pd.DataFrame)
    """The old-object samples by class and allocation site (:data:`.heap.LEAK_COLUMNS`)."""
    computed: str = ""
    """Where the card was computed (``"computed in PostgreSQL over adk_event, agent_run"``);
    empty: over the frames loaded into pandas."""


def report_links(flows: pd.Series, summary: Mapping[str, Any] | None) -> pd.DataFrame:
    """Per line, the flow's report and verdict as ``run all`` recorded them in its
    ``summary.json`` (read before this flow ran): ``link`` relative to the overview's own
    folder, ``report_verdict``; None where the flow did not run."""
    runs = (summary or {}).get("flows") or {}

    def of(flow: str, field: str) -> Any:
        run = runs.get(flow) or {}
        if field == "link":
            report = run.get("report")
            return f"../{report}" if isinstance(report, str) and report else None
        return run.get("verdict")

    return pd.DataFrame(
        {
            "link": flows.map(lambda f: of(f, "link")).astype(object),
            "report_verdict": flows.map(lambda f: of(f, "verdict")).astype(object),
        },
        index=flows.index,
    )


def read_summary(path: str | os.PathLike[str]) -> Mapping[str, Any] | None:
    """``run all``'s summary.json, or None when there is none (a flow run on its own)."""
    if not path or not Path(path).is_file():
        return None
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def triage_overview(
    frames: Frames,
    *,
    as_of: pd.Timestamp,
    profile: Profile,
    histograms: pd.DataFrame | None = None,
    symptom: str | None = None,
    summary: Mapping[str, Any] | None = None,
    jfr_heap: pd.DataFrame | None = None,
    jfr_old_objects: pd.DataFrame | None = None,
) -> OverviewReport:
    """The card (ordered by ``symptom``), each line linked to the flow's report when
    ``summary`` (``run all``'s summary.json) records one; a JFR recording's heap summaries and
    old-object samples add the heap after GC and the leak candidates."""
    card = triage_card(
        frames,
        as_of=as_of,
        profile=profile,
        histograms=histograms,
        symptom=symptom,
        jfr_heap=jfr_heap,
        jfr_old_objects=jfr_old_objects,
    )
    return linked(
        card,
        as_of=as_of,
        symptom=symptom,
        summary=summary,
        histograms=histograms,
        jfr_heap=jfr_heap,
        jfr_old_objects=jfr_old_objects,
    )


def linked(
    card: pd.DataFrame,
    *,
    as_of: pd.Timestamp,
    symptom: str | None,
    summary: Mapping[str, Any] | None = None,
    histograms: pd.DataFrame | None = None,
    jfr_heap: pd.DataFrame | None = None,
    jfr_old_objects: pd.DataFrame | None = None,
    computed: str = "",
) -> OverviewReport:
    """The report of ``card`` (however it was computed): each line linked to its flow's
    report, and the JVM's views (growing classes, heap after GC, leak candidates)."""
    card = card.join(report_links(card["flow"], summary))
    growing = pd.DataFrame()
    if histograms is not None and len(histograms):
        from incidentkit.flows.overview.growth import growing_classes

        growing = growing_classes(histograms)
    heap, leaks = pd.DataFrame(), pd.DataFrame()
    if jfr_heap is not None and len(jfr_heap):
        from incidentkit.flows.overview.heap import heap_after_gc, leak_candidates

        heap = heap_after_gc(jfr_heap)
        if jfr_old_objects is not None:
            leaks = leak_candidates(jfr_old_objects)
    return OverviewReport(
        as_of=as_of,
        symptom=symptom,
        card=card,
        growing=growing,
        heap=heap,
        leaks=leaks,
        computed=computed,
    )
