"""The Timeline section: the evidence window, as_of and every dated row, merged across flows
(each flow's postmortem module dates its rows: ``timeline``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from incidentkit.postmortem.collect import FlowFindings
from incidentkit.postmortem.proof import Dated, Ref, cite, dated, item_ref
from incidentkit.postmortem.text import TODO, iso, md, time, utc


@dataclass(frozen=True)
class Moment:
    """One line of the timeline: its time, what happened, its proof and the time as written."""

    at: pd.Timestamp
    text: str
    proof: tuple[Ref, ...] = ()
    raw: str = ""


_EDGES = ("opens", "closes", "as_of")
"""The moments every flow has, merged into one row per time (:func:`_edges`)."""
_ORDER = {"opens": 0, "closes": 2, "as_of": 3}
"""At one time: the window opens first, the rows next (1), then it closes and as_of."""


def _edge_moments(ff: FlowFindings) -> list[tuple[str, pd.Timestamp, Ref]]:
    """The flow's window edges and as_of: (which, time, proof)."""
    evidence, found = ff.findings.evidence, []
    if evidence.window is not None:
        for edge, which in zip(evidence.window, _EDGES[:2], strict=True):
            stamp = time(edge)
            if stamp is not None:
                found.append((which, stamp, Ref(ff.rel, key="evidence.window")))
    stamp = time(evidence.as_of)
    if stamp is not None:
        found.append(("as_of", stamp, Ref(ff.rel, key="evidence.as_of")))
    return found


def _edges(sources: Sequence[FlowFindings]) -> list[tuple[int, Moment]]:
    """One row per window edge or as_of and time; named by its flows only when they differ."""
    groups: dict[tuple[str, pd.Timestamp], list[tuple[str, Ref]]] = {}
    for ff in sources:
        for which, stamp, ref in _edge_moments(ff):
            groups.setdefault((which, stamp), []).append((ff.flow, ref))
    found = []
    for (which, stamp), members in groups.items():
        shared = len({at for w, at in groups if w == which}) == 1
        flows = sorted({flow for flow, _ in members})
        prefix = "" if shared else f"{', '.join(flows)}: "
        if which == "as_of":
            whose = "the flow" if len(flows) == 1 else "the flows"
            text = f"{prefix}{whose} judged at as_of"
        else:
            text = f"{prefix}the evidence window {which}"
        proof = tuple(ref for _, ref in members)
        found.append((_ORDER[which], Moment(stamp, text, proof, iso(stamp))))
    return found


def _moments(ff: FlowFindings) -> list[Moment]:
    """The flow's dated rows (none for a run that stopped before its verdict, or of a flow
    without a postmortem module)."""
    module = None if ff.failed is not None else ff.module()
    return [] if module is None else module.timeline(ff)


def grouped(
    ff: FlowFindings,
    item_ids: Sequence[str],
    column: str,
    text: Callable[[dict[str, Any]], str],
    *,
    by: str | Callable[[dict[str, Any]], str] | None = None,
) -> list[Moment]:
    """A moment per row of ``item_ids`` at ``column``; in a group (``by``: a column or a
    function of the row; else all) of more than three rows, only its first and its last."""
    groups: dict[str, list[Dated]] = {}
    for entry in dated(ff, item_ids, column):
        group = "" if by is None else by(entry[3]) if callable(by) else str(entry[3].get(by))
        groups.setdefault(group, []).append(entry)
    moments = []
    for entries in groups.values():
        picked = [(e, "") for e in entries]
        if len(entries) > 3:
            picked = [(entries[0], f" (first of {len(entries)})")]
            picked.append((entries[-1], f" (last of {len(entries)})"))
        moments += [
            Moment(stamp, text(row) + label, (item_ref(ff, item_id, [n]),), str(row[column]))
            for (stamp, item_id, n, row), label in picked
        ]
    return moments


def overlaps(ff: FlowFindings, item_id: str) -> list[Moment]:
    """A moment per overlapping invocation of ``item_id`` (rows with ``invocation_a`` and
    ``_b``, ``a_start``, ``a_end``, ``b_start``, ``session_id``): when the second started."""
    return grouped(
        ff,
        [item_id],
        "b_start",
        lambda r: (
            f"invocation {r.get('invocation_b')} starts on session {r.get('session_id')} "
            f"while {r.get('invocation_a')} runs "
            f"({utc(r.get('a_start'))} – {utc(r.get('a_end'))})"
        ),
    )


def timeline(sources: Sequence[FlowFindings]) -> list[str]:
    """The Timeline section's lines: a table by time, one row for what several flows saw."""
    merged: dict[tuple[pd.Timestamp, int, str], list[Ref]] = {}
    moments = [*_edges(sources), *((1, m) for ff in sources for m in _moments(ff))]
    for order, moment in moments:
        merged.setdefault((moment.at, order, moment.text), []).extend(moment.proof)
    lines = ["| time (UTC) | what the evidence shows | proof |", "|---|---|---|"]
    lines += [
        f"| {iso(at)} | {md(text)} | {cite(proof) or '—'} |"
        for (at, _, text), proof in sorted(merged.items(), key=lambda e: e[0])
    ]
    silent = sorted({ff.flow for ff in sources if not ff.hooks.timed and ff.failed is None})
    if silent:
        lines += ["", f"The {', '.join(silent)} findings carry no times (counts only)."]
    return [
        *lines,
        "",
        f"> {TODO} add what the evidence cannot show (deploys, dependency changes, pages, "
        "the moment of detection, each mitigation and the recovery), with their times in UTC.",
    ]
