"""The Impact section: per flow, what was affected (runs, sessions, users, ...) with its proof
(each flow's postmortem module counts it: ``impact``), and the claims the flows build it from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeGuard

import pandas as pd

from incidentkit.postmortem.collect import FlowFindings
from incidentkit.postmortem.proof import Ref, cite, distinct
from incidentkit.postmortem.text import md

MEASURES = ("runs", "sessions", "users", "invocations", "duration", "tokens")
"""The measures every flow is asked for, in the order of the section."""


@dataclass(frozen=True)
class Claim:
    """One statement of the draft with its proof; ``missing``: an n/a and its reason."""

    text: str
    proof: tuple[Ref, ...] = ()
    missing: bool = False

    def line(self) -> str:
        head = f"n/a — {self.text}" if self.missing else self.text
        return f"{head} {cite(self.proof)}".rstrip()


def is_number(value: object) -> TypeGuard[int | float]:
    """Whether a row value is a finite number (a cost, a count), not a flag or text."""
    return isinstance(value, int | float) and not isinstance(value, bool) and abs(value) < 1e300


def seconds_between(start: pd.Timestamp | None, end: pd.Timestamp | None) -> float | None:
    """Seconds from ``start`` to ``end``; None when either is missing or they are further
    apart than a time span holds (about 292 years)."""
    if start is None or end is None:
        return None
    try:
        return float((end - start).total_seconds())
    except (OverflowError, ValueError):
        return None


def na(reason: str) -> Claim:
    """A measure the flow cannot count, and why."""
    return Claim(reason, missing=True)


def no_column(ff: FlowFindings, what: str) -> Claim:
    """n/a: the flow's rows carry no ``what``."""
    return na(f"the {ff.flow} rows carry no {what}")


def no_tokens(ff: FlowFindings) -> Claim:
    """n/a: the flow counts no tokens."""
    return na(f"the {ff.flow} flow counts no tokens")


def count_claim(
    ff: FlowFindings, item_ids: Sequence[str], column: str, what: str, note: str = ""
) -> Claim:
    """The distinct ``column`` values over the rows of ``item_ids``, counted (``≥ N`` when
    findings.json cut rows), with their rows as proof."""
    values, pointers, cut = distinct(ff, item_ids, column)
    bound = "≥ " if cut else ""
    return Claim(f"{bound}{len(values)} {what}{note}", tuple(pointers))


def one_session(ff: FlowFindings, overlaps: str, faults: str | None) -> dict[str, Claim]:
    """The claims of a flow that reads one session (``session_id``, ``user_id``): that session,
    its user, and the invocations of its ``overlaps`` item and of its ``faults`` item's rows
    with a ``kind``."""
    parameters, claims = ff.findings.evidence.parameters, {}
    for measure, name, whose in (
        ("sessions", "session_id", "the session the flow read"),
        ("users", "user_id", "the session's user"),
    ):
        if parameters.get(name):
            claims[measure] = Claim(
                f"1 ({md(parameters[name])}, {whose})",
                (Ref(ff.rel, key=f"evidence.parameters.{name}"),),
            )
    items = [i for i in (faults, overlaps) if i is not None and ff.item(i)]
    values: set[str] = set()
    pointers = []
    for item_id in items:
        numbers = []
        for n, row in enumerate(ff.rows(item_id), 1):
            got = {str(row.get(c)) for c in ("invocation_id", "invocation_a", "invocation_b")}
            got -= {"None"}
            if got and (item_id == overlaps or row.get("kind")):
                values |= got
                numbers.append(n)
        if numbers:
            pointers.append(Ref(ff.rel, item_id, tuple(numbers)))
    what = "overlapping or failing" if faults else "overlapping"
    claims["invocations"] = Claim(f"{len(values)} {what} invocations", tuple(pointers))
    claims["runs"] = no_column(ff, "run id")
    claims["duration"] = na(f"the {ff.flow} flow judges state, not a period")
    claims["tokens"] = no_tokens(ff)
    return claims


def _read(ff: FlowFindings) -> dict[str, Claim] | None:
    """The flow's claims; None when its run stopped, it navigates or it has no postmortem
    module."""
    module = None if ff.failed is not None or ff.navigates else ff.module()
    return None if module is None else module.impact(ff)


def _unread(ff: FlowFindings) -> str:
    """Why the draft counts nothing of a flow: its run stopped, or no reader knows it."""
    if ff.failed is not None:
        return f"the {ff.flow} run stopped before its verdict"
    return f"this draft reads no {ff.flow} findings"


def _absent(measure: str, read: Sequence[tuple[FlowFindings, dict[str, Claim]]]) -> Claim:
    """The one n/a of a measure no flow counts: the flow's reason, or the flows that lack it."""
    reasons = sorted({c[measure].text for _, c in read if measure in c})
    if len(reasons) == 1 and len(read) == 1:
        return na(reasons[0])
    flows = ", ".join(ff.flow for ff, _ in read)
    return na(f"none of the findings read ({flows}) count it")


def impact(sources: Sequence[FlowFindings]) -> list[str]:
    """The Impact section's lines: one per measure, from the flows that count it (a sub-line per
    flow when several do); one n/a line for a measure none counts."""
    read = [(ff, claims) for ff in sources if (claims := _read(ff)) is not None]
    if not read:
        why = "; ".join(_unread(ff) for ff in sources)
        see = " (see Evidence incomplete above)" if any(ff.failed for ff in sources) else ""
        return [f"- n/a — {why}: nothing to count{see}"]
    lines = []
    extras = sorted({k for _, claims in read for k in claims if k not in MEASURES})
    for measure in (*MEASURES, *extras):
        found = [(ff, c[measure]) for ff, c in read if measure in c and not c[measure].missing]
        label = f"**{measure.capitalize()}{' affected' if measure in MEASURES[:4] else ''}**"
        if not found:
            lines.append(f"- {label}: {_absent(measure, read).line()}")
        elif len(found) == 1:  # named by its flow when several were read
            whose = f"{found[0][0].flow}: " if len(read) > 1 else ""
            lines.append(f"- {label}: {whose}{found[0][1].line()}")
        else:
            lines.append(f"- {label}:")
            lines += [f"  - {ff.flow}: {claim.line()}" for ff, claim in found]
    counted = {ff.rel for ff, _ in read}
    stopped = [ff.flow for ff in sources if ff.failed is not None]
    unknown = [
        ff.flow
        for ff in sources
        if ff.rel not in counted and ff.failed is None and not ff.navigates
    ]
    if stopped:
        lines.append(
            f"- Not counted: {', '.join(stopped)} (the run stopped before its verdict: see "
            "Evidence incomplete above)"
        )
    if unknown:
        lines.append(f"- Not counted: {', '.join(unknown)} (this draft reads no such findings)")
    return lines
