"""The overview's own cheap checks on the triage card, of the JVM's evidence rather than one
app's: classes that grow between class histograms, and the heap after GC of a JFR recording."""

from __future__ import annotations

from typing import TYPE_CHECKING

from incidentkit.flows.card_lines import CardContext, CardLine, Profile, card_line, not_checked
from incidentkit.flows.common import Frames
from incidentkit.flows.overview.growth import growing_classes, growth_headline
from incidentkit.flows.overview.heap import (
    heap_after_gc,
    heap_text,
    leak_candidates,
    old_object_text,
)

if TYPE_CHECKING:
    from incidentkit.flows.engine_card import EngineCardContext

FLOW = "overview"
JVM_ARRAYS = {
    "[B": "byte[]",
    "[C": "char[]",
    "[I": "int[]",
    "[J": "long[]",
    "[S": "short[]",
    "[Z": "boolean[]",
    "[D": "double[]",
    "[F": "float[]",
}


def readable_class(name: str) -> str:
    """A class name as people read it: ``[B`` → ``byte[] ([B)``, ``[Ljava.lang.Object;`` →
    ``java.lang.Object[]``."""
    if name in JVM_ARRAYS:
        return f"{JVM_ARRAYS[name]} ({name})"
    if name.startswith("[L") and name.endswith(";"):
        return f"{name[2:-1]}[]"
    return name


def growth_lines(context: CardContext) -> list[CardLine]:
    """The growing-classes line: classes whose instances and bytes grow, WARNING."""
    histograms, evidence = context.histograms, "GC.class_histogram dumps"
    if histograms is None or histograms.empty:
        return [not_checked("growing-classes", FLOW, evidence, "no class histograms")]
    growing = growing_classes(histograms)
    if growing.empty:
        title = "no class grows between the histograms"
        return [card_line("growing-classes", "INFO", 0, title, FLOW, evidence)]
    top = growing.iloc[0]
    title = f"{len(growing)} class(es) grow between the histograms"
    headline = growth_headline(growing)
    if headline:
        title += f": {headline}"
    title += f"; most bytes: {readable_class(str(top['class']))} (+{int(top['bytes_growth']):,})"
    return [card_line("growing-classes", "WARNING", len(growing), title, FLOW, evidence)]


def heap_lines(context: CardContext) -> list[CardLine]:
    """The heap-growth line: heap used after GC that grows across a recording, WARNING."""
    heap, old_objects = context.jfr_heap, context.jfr_old_objects
    evidence = "JFR recording (heap after GC, old-object samples)"
    if heap is None or heap.empty:
        return [not_checked("heap-growth", FLOW, evidence, "no JFR heap summaries")]
    trend = heap_after_gc(heap)
    growing = trend.loc[trend["growing"]]
    if growing.empty:
        return [card_line("heap-growth", "INFO", 0, heap_text(trend), FLOW, evidence)]
    title = heap_text(trend)
    leaks = leak_candidates(old_objects) if old_objects is not None else None
    old = old_object_text(leaks) if leaks is not None else None
    if old:
        title += f"; old objects: {old}"
    return [card_line("heap-growth", "WARNING", len(growing), title, FLOW, evidence)]


def _jvm_context(context: EngineCardContext) -> CardContext:
    """The card's context of the JVM's files only (no app's frames)."""
    return CardContext(
        Frames(),
        context.as_of,
        Profile(),
        symptom=context.symptom,
        histograms=context.histograms,
        jfr_heap=context.jfr_heap,
        jfr_old_objects=context.jfr_old_objects,
    )


def growth_engine_lines(context: EngineCardContext) -> list[CardLine]:
    """:func:`growth_lines` in the engine card: the histograms are small files, read as now."""
    return [{**line, "app": None} for line in growth_lines(_jvm_context(context))]


def heap_engine_lines(context: EngineCardContext) -> list[CardLine]:
    """:func:`heap_lines` in the engine card: a JFR recording's summaries, read as now."""
    return [{**line, "app": None} for line in heap_lines(_jvm_context(context))]
