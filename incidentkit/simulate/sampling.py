"""Tail sampling of long traces, as the collector's ``tail_sampling`` processor sees them.

The sampler decides a trace ``decision_wait`` (30 s) after its first span reaches it and, on a
busy shared collector, forgets it soon after (``num_traces`` holds only so many traces): spans
that end later reach it as a new trace and are decided again. A trace that runs longer than this
memory (:data:`MEMORY_MS`) is therefore decided in pieces; errored pieces are kept (the
``status_code`` policy), healthy ones are sampled like any healthy trace.
"""

from __future__ import annotations

from incidentkit.simulate.model import Span

MEMORY_MS = 120_000
"""How long the sampler remembers a trace after the first of its spans ended."""


def pieces(spans: list[Span], memory_ms: int = MEMORY_MS) -> list[list[Span]]:
    """Exported spans of one trace grouped as the sampler receives them, by end time.

    A piece starts with the first span ending ``memory_ms`` or more after the previous piece
    started. Open spans are never exported, so they belong to no piece.
    """
    out: list[list[Span]] = []
    began = 0
    for span in sorted((s for s in spans if s.end is not None), key=_end):
        end = _end(span)
        if not out or end - began >= memory_ms:
            out.append([])
            began = end
        out[-1].append(span)
    return out


def errored_pieces(spans: list[Span], memory_ms: int = MEMORY_MS) -> list[Span]:
    """The spans of the pieces that hold an error (in their original order), others dropped.

    What is left of a long trace whose healthy pieces were not sampled.
    """
    kept = {
        id(span)
        for piece in pieces(spans, memory_ms)
        if any(s.error is not None for s in piece)
        for span in piece
    }
    return [span for span in spans if id(span) in kept]


def _end(span: Span) -> int:
    return span.end if span.end is not None else 0
