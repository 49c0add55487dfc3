"""The Timeline section: the evidence window, as_of and every dated row, merged across flows."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from incidentkit.postmortem.collect import ORPHAN_ITEMS, FlowFindings, orphaned
from incidentkit.postmortem.proof import Dated, Ref, cite, dated, item_ref
from incidentkit.postmortem.text import TODO, iso, md, ms, time, utc


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
    """The flow's dated rows (none for a run that stopped before its verdict)."""
    return [] if ff.failed is not None else _row_moments(ff)


def _grouped(
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


def _row_moments(ff: FlowFindings) -> list[Moment]:
    found: list[Moment] = []
    if ff.flow == "latency_cliff":
        found += _grouped(
            ff,
            ["latency_cliff/cliff"],
            "at",
            lambda r: (
                f"latency cliff: p95 {ms(r.get('p95_before_ms'))} → "
                f"{ms(r.get('p95_after_ms'))} (first bucket after the change point)"
            ),
        )
        found += _grouped(
            ff,
            ["latency_cliff/open-invocations"],
            "started_at",
            _open_text,
            by=_role,
        )
    elif ff.flow == "orphans":
        found += _grouped(
            ff,
            ORPHAN_ITEMS,
            "lease_until",
            lambda r: (
                f"the lease of orphaned run {r.get('run_id')} ({r.get('orphan_class')}) "
                f"held by {r.get('owner')} runs out: that worker had stopped renewing it"
            ),
            by="owner",
        )
    elif ff.flow in ("vanished_state", "session"):
        overlaps = f"{ff.flow}/overlapping-invocations"
        found += _grouped(
            ff,
            [overlaps],
            "b_start",
            lambda r: (
                f"invocation {r.get('invocation_b')} starts on session {r.get('session_id')} "
                f"while {r.get('invocation_a')} runs "
                f"({utc(r.get('a_start'))} – {utc(r.get('a_end'))})"
            ),
        )
        if ff.flow == "session":
            found += _grouped(
                ff,
                ["session/errors"],
                "ts",
                lambda r: (
                    f"error {r.get('kind')} {r.get('error_code') or ''} in invocation "
                    f"{r.get('invocation_id')}".replace("  ", " ")
                ),
            )
    return found


_DEAD = {
    "lease_expired": "its ledger lease expired",
    "redriven": "its run was re-driven since",
    "session_silent": "its session went silent while others went on; presumed",
}
"""An orphan's ``orphan_reason`` in words."""


def _role(row: dict[str, Any]) -> str:
    """An open invocation's role: ``orphan`` when its worker died (``orphaned``; findings
    written before that field: ``lease_expired``), else ``hang``."""
    return "orphan" if orphaned(row) else "hang"


def _open_text(row: dict[str, Any]) -> str:
    """An open invocation's start: a hang still holds its thread; an orphan's worker died."""
    last = f"last event {row.get('last_event_kind')}" + (
        f" on {row['tool']}" if row.get("tool") else ""
    )
    if _role(row) == "orphan":
        owner = f" ({row['owner']})" if row.get("owner") else ""
        why = _DEAD.get(str(row.get("orphan_reason")), _DEAD["lease_expired"])
        return (
            f"invocation {row.get('invocation_id')} starts on a worker{owner} that died before "
            f"it finished ({why}); orphaned, {last}"
        )
    return (
        f"invocation {row.get('invocation_id')} starts; still open at as_of "
        f"({row.get('open_for_s')} s), {last}"
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
    silent = [ff.flow for ff in sources if ff.flow == "runaway" and ff.failed is None]
    if silent:
        lines += ["", "The runaway findings carry no times (counts only)."]
    return [
        *lines,
        "",
        f"> {TODO} add what the evidence cannot show (deploys, dependency changes, pages, "
        "the moment of detection, each mitigation and the recovery), with their times in UTC.",
    ]
