"""Pointers to proof (an item's rows, a summary counter, a parameter) and the rows they pick."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from incidentkit.postmortem.collect import FlowFindings
from incidentkit.postmortem.text import code, link, md, time

Dated = tuple[pd.Timestamp, str, int, dict[str, Any]]
"""A dated row: its time, its item, its 1-based row number, the row."""


@dataclass(frozen=True)
class Ref:
    """A pointer to proof: an item's rows (1-based), a summary counter, or a parameter."""

    rel: str
    item: str | None = None
    rows: tuple[int, ...] = ()
    key: str | None = None  # "summary.runs", "evidence.parameters.user_id"

    def text(self) -> str:
        return cite([self])


def _rows_text(rows: Sequence[int]) -> str:
    if not rows:
        return ""
    spans: list[list[int]] = []
    for n in sorted(set(rows)):
        if spans and n == spans[-1][-1] + 1:
            spans[-1].append(n)
        else:
            spans.append([n])
    parts = [str(s[0]) if len(s) == 1 else f"{s[0]}–{s[-1]}" for s in spans]
    return f", row {parts[0]}" if len(rows) == 1 else f", rows {', '.join(parts)}"


def cite(pointers: Iterable[Ref]) -> str:
    """Pointers as one parenthesis per findings document: ``([f](f) → `a`, row 1; summary.b)``."""
    grouped: dict[str, list[str]] = {}
    for ref in pointers:
        what = md(ref.key) if ref.item is None else f"{code(ref.item)}{_rows_text(ref.rows)}"
        grouped.setdefault(ref.rel, []).append(what)
    return " ".join(f"({link(rel)} → {'; '.join(parts)})" for rel, parts in grouped.items())


def item_ref(ff: FlowFindings, item_id: str, rows: Iterable[int] | None = None) -> Ref:
    """A pointer to ``rows`` of ``item_id`` (all its rows when None)."""
    found = ff.item(item_id)
    kept = range(1, len(found[1].rows) + 1) if found is not None else range(0)
    return Ref(ff.rel, item_id, tuple(kept if rows is None else rows))


def counter(ff: FlowFindings, name: str) -> Ref:
    """A pointer to the summary counter ``name``."""
    return Ref(ff.rel, key=f"summary.{name}")


def distinct(
    ff: FlowFindings, item_ids: Sequence[str], column: str
) -> tuple[list[str], list[Ref], bool]:
    """Sorted distinct non-null ``column`` values over the rows of ``item_ids``; the pointers;
    whether findings.json left rows out (then the count is a lower bound)."""
    values: set[str] = set()
    pointers, cut = [], False
    for item_id in item_ids:
        found = ff.item(item_id)
        if found is None:
            continue
        rows = found[1].rows
        numbers = [n for n, row in enumerate(rows, 1) if row.get(column) is not None]
        values |= {str(rows[n - 1][column]) for n in numbers}
        if numbers:
            pointers.append(Ref(ff.rel, item_id, tuple(numbers)))
        cut = cut or (found[1].count or 0) > len(rows)
    return sorted(values), pointers, cut


def dated(ff: FlowFindings, item_ids: Sequence[str], column: str) -> list[Dated]:
    """Every row of ``item_ids`` with a time in ``column``, by time, item and row number."""
    found = [
        (stamp, item_id, n, row)
        for item_id in item_ids
        for n, row in enumerate(ff.rows(item_id), 1)
        if (stamp := time(row.get(column))) is not None
    ]
    return sorted(found, key=lambda t: (t[0], t[1], t[2]))
