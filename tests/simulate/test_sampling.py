"""Tail sampling of long traces: pieces by end time, only errored pieces kept."""

from __future__ import annotations

from incidentkit.simulate.model import Span
from incidentkit.simulate.sampling import errored_pieces, pieces


def _span(name: str, end: int | None, *, error: bool = False) -> Span:
    return Span(
        trace_id="t" * 32,
        span_id=name,
        parent_id=None,
        kind="call_llm",
        start=0,
        end=end,
        error=("E", "boom", "boom") if error else None,
    )


def test_pieces_start_when_the_sampler_forgot_the_trace() -> None:
    spans = [_span("a", 5), _span("c", 130), _span("b", 100), _span("d", 136), _span("open", None)]
    got = [[s.span_id for s in piece] for piece in pieces(spans, memory_ms=100)]
    assert got == [["a", "b"], ["c", "d"]]


def test_a_short_trace_is_one_piece() -> None:
    spans = [_span(str(n), 1_000 * n) for n in range(1, 60)]
    assert pieces(spans) == [spans]


def test_only_pieces_holding_an_error_are_kept_in_their_order() -> None:
    spans = [_span("root", 250, error=True), _span("a", 10), _span("b", 240), _span("c", 120)]
    kept = errored_pieces(spans, memory_ms=100)
    assert [s.span_id for s in kept] == ["root", "b"]
    assert errored_pieces([_span("a", 10), _span("b", 20)], memory_ms=100) == []
