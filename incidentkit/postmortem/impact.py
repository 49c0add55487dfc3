"""The Impact section: per flow, what was affected (runs, sessions, users, ...) with its proof."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeGuard

import pandas as pd

from incidentkit.flows.vanished_state.verdicts import SETTLED, KeyVerdict
from incidentkit.postmortem.collect import OPEN_ITEM, ORPHAN_ITEMS, FlowFindings, orphaned
from incidentkit.postmortem.proof import Ref, cite, counter, distinct, item_ref
from incidentkit.postmortem.text import duration, iso, md, ms, num, time

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


def _number(value: object) -> TypeGuard[int | float]:
    """Whether a row value is a finite number (a cost, a count), not a flag or text."""
    return isinstance(value, int | float) and not isinstance(value, bool) and abs(value) < 1e300


def _seconds(start: pd.Timestamp | None, end: pd.Timestamp | None) -> float | None:
    """Seconds from ``start`` to ``end``; None when either is missing or they are further
    apart than a time span holds (about 292 years)."""
    if start is None or end is None:
        return None
    try:
        return float((end - start).total_seconds())
    except (OverflowError, ValueError):
        return None


def _na(reason: str) -> Claim:
    return Claim(reason, missing=True)


def _no_column(ff: FlowFindings, what: str) -> Claim:
    return _na(f"the {ff.flow} rows carry no {what}")


def _no_tokens(ff: FlowFindings) -> Claim:
    return _na(f"the {ff.flow} flow counts no tokens")


def _count_claim(
    ff: FlowFindings, item_ids: Sequence[str], column: str, what: str, note: str = ""
) -> Claim:
    values, pointers, cut = distinct(ff, item_ids, column)
    bound = "≥ " if cut else ""
    return Claim(f"{bound}{len(values)} {what}{note}", tuple(pointers))


def _latency(ff: FlowFindings) -> dict[str, Claim]:
    s, claims = ff.findings.summary, {}
    cliff = ff.rows("latency_cliff/cliff")
    opened = "latency_cliff/open-invocations"
    timeout = ff.timeout
    if cliff:
        c = cliff[0]
        claims["runs"] = Claim(
            f"{num(s.get('run_starts_since_cliff', c.get('runs_after')))} runs started since "
            f"the cliff, each slower: p50 {ms(c.get('p50_before_ms'))} → "
            f"{ms(c.get('p50_after_ms'))}, p95 {ms(c.get('p95_before_ms'))} → "
            f"{ms(c.get('p95_after_ms'))}; errors {num(c.get('errors_before'))} before, "
            f"{num(c.get('errors_after'))} after",
            (item_ref(ff, "latency_cliff/cliff"), counter(ff, "run_starts_since_cliff")),
        )
    else:
        claims["runs"] = _na("no latency cliff in the window")
    claims["invocations"] = _open_claim(ff, timeout)
    claims["sessions"] = _count_claim(ff, [opened], "session_id", "sessions of those invocations")
    claims["users"] = _no_column(ff, "user id")
    as_of = time(ff.findings.evidence.as_of)
    at = time(cliff[0].get("at")) if cliff else None
    seconds = _seconds(at, as_of)
    if at is not None and as_of is not None and seconds is not None:
        still = ", invocations still open then" if s.get("open_invocations") else ""
        claims["duration"] = Claim(
            f"≥ {duration(seconds)}: from the cliff at {iso(at)} to "
            f"as_of {iso(as_of)}{still}; the findings show no recovery",
            (item_ref(ff, "latency_cliff/cliff"), Ref(ff.rel, key="evidence.as_of")),
        )
    claims["tokens"] = _no_tokens(ff)
    if s.get("stuck_threads"):
        claims["stuck threads"] = Claim(
            f"{num(s['stuck_threads'])} threads unmoved in every thread dump",
            (item_ref(ff, "latency_cliff/stuck-threads"), counter(ff, "stuck_threads")),
        )
    return claims


def orphaned_rows(ff: FlowFindings) -> list[int]:
    """The 1-based rows of ``latency_cliff/open-invocations`` whose worker died."""
    return [n for n, row in enumerate(ff.rows(OPEN_ITEM), 1) if orphaned(row)]


def _open_claim(ff: FlowFindings, timeout: float | None) -> Claim:
    """The open invocations: the hung ones held a thread each; the orphans' worker died."""
    s, opened = ff.findings.summary, "latency_cliff/open-invocations"
    total = s.get("open_invocations", 0)
    total = total if _number(total) else len(ff.rows(opened))
    dead = orphaned_rows(ff)
    found = ff.item(opened)
    cut = found is not None and (found[1].count or 0) > len(found[1].rows)
    orphans = s.get("orphaned_invocations", len(dead))
    orphans = orphans if _number(orphans) else len(dead)
    past = f"{num(total)} invocations open past the {f'{timeout:g} s' if timeout else 'the'} "
    past += "client timeout"
    proof: tuple[Ref, ...] = (item_ref(ff, opened), counter(ff, "open_invocations"))
    if not orphans:
        return Claim(f"{past}: their users had given up, each still held a thread", proof)
    hung = total - orphans
    bound = "≥ " if cut and "orphaned_invocations" not in s else ""
    dead_text = (
        f"{bound}{num(orphans)} orphaned: their worker died (a ledger lease that ran out, or "
        "a run re-driven since), so none of them held a thread; the orphans flow recovers "
        "their runs"
    )
    proof = (item_ref(ff, opened, dead or None), counter(ff, "open_invocations"))
    if "orphaned_invocations" in s:
        proof = (*proof, counter(ff, "orphaned_invocations"))
    if hung <= 0:
        return Claim(f"{past}, all {dead_text}", proof)
    return Claim(
        f"{past}: {num(hung)} hung (their users had given up, each still held a thread), "
        f"{dead_text}",
        proof,
    )


def _orphans(ff: FlowFindings) -> dict[str, Claim]:
    s, claims = ff.findings.summary, {}
    if "orphans" not in s and ff.limits is not None:  # the events cannot tell runs apart
        why = f"the orphans flow withheld its classes: {md(ff.limits.title)}"
        claims = {key: _na(why) for key in ("runs", "sessions", "invocations")}
        claims["users"] = _na("the orphan run rows carry no user id")
        claims["tokens"] = _no_tokens(ff)
        return claims
    present = [i for i in ORPHAN_ITEMS if ff.item(i)]
    claims["runs"] = Claim(
        f"{num(s.get('orphans', 0))} orphaned runs (a RUNNING ledger row whose lease ran out) "
        f"of {num(s.get('runs', 0))} in the ledger",
        (*(item_ref(ff, i) for i in present), counter(ff, "orphans")),
    )
    claims["sessions"] = _count_claim(ff, present, "session_id", "sessions of the orphaned runs")
    none = sum(1 for i in present for row in ff.rows(i) if row.get("invocation_id") is None)
    note = f" ({none} orphaned runs have none: no event of theirs is stored)" if none else ""
    claims["invocations"] = _count_claim(
        ff, present, "invocation_id", "invocations of the orphaned runs", note
    )
    claims["users"] = _na("the orphan run rows carry no user id")
    claims["duration"] = _na(
        "the orphans flow judges one moment (as_of); the timeline shows when the leases ran out"
    )
    claims["tokens"] = _no_tokens(ff)
    dupes = ff.rows("orphans/duplicate-effects")
    if dupes:
        keys = ", ".join(
            f"{md(r.get('business_key'))} ({num(r.get('effects'))} effects)" for r in dupes
        )
        claims["duplicate effects"] = Claim(
            f"{len(dupes)} business keys applied more than once: {keys}",
            (item_ref(ff, "orphans/duplicate-effects"),),
        )
    if ff.rows("orphans/crash-loops"):
        claims["crash loops"] = Claim(
            f"{num(s.get('crash_loops', 0))} runs at the attempts cap: each re-drive stopped "
            "its worker again",
            (item_ref(ff, "orphans/crash-loops"), counter(ff, "crash_loops")),
        )
    return claims


def _runaway(ff: FlowFindings) -> dict[str, Claim]:
    s, claims = ff.findings.summary, {}
    flagged = [i for i in ("runaway/hit-limit", "runaway/loops") if ff.item(i)]
    claims["invocations"] = Claim(
        f"{num(s.get('flagged', 0))} invocations hit the model call limit or looped, of "
        f"{num(s.get('invocations', 0))} in the window",
        (*(item_ref(ff, i) for i in flagged), counter(ff, "flagged")),
    )
    runs = _count_claim(
        ff, ["runaway/hit-limit"], "run_id", "runs", " (the limit hits' ledger rows)"
    )
    claims["runs"] = runs if runs.proof else _no_column(ff, "run id")
    claims["sessions"] = _no_column(ff, "session id")
    claims["users"] = _no_column(ff, "user id")
    claims["duration"] = _no_column(ff, "times")
    if "runaway_tokens" in s and s.get("tokens"):
        share = s["runaway_tokens"] / s["tokens"]
        costs = [float(c) for r in ff.rows("runaway/cost") if _number(c := r.get("cost"))]
        cost = f"; cost {round(sum(costs), 2)}" if costs else ""
        claims["tokens"] = Claim(
            f"{num(s['runaway_tokens'])} by the flagged invocations, {share:.0%} of the app's "
            f"{num(s['tokens'])} in the window{cost}",
            (counter(ff, "runaway_tokens"), counter(ff, "tokens"), item_ref(ff, "runaway/cost")),
        )
    else:
        claims["tokens"] = _na("the runaway findings count no tokens (no usage metadata)")
    return claims


def _state(ff: FlowFindings, overlaps: str, faults: str | None) -> dict[str, Claim]:
    """The claims the vanished_state and session flows share: one session, its invocations."""
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
    claims["runs"] = _no_column(ff, "run id")
    claims["duration"] = _na(f"the {ff.flow} flow judges state, not a period")
    claims["tokens"] = _no_tokens(ff)
    return claims


def _vanished(ff: FlowFindings) -> dict[str, Claim]:
    claims = _state(ff, "vanished_state/overlapping-invocations", None)
    rows = ff.rows("vanished_state/keys")
    lost = [n for n, r in enumerate(rows, 1) if r.get("verdict") not in SETTLED]
    rewound = [n for n, r in enumerate(rows, 1) if r.get("verdict") == KeyVerdict.REWOUND]
    if rows:
        names = ", ".join(
            f"{md(rows[n - 1].get('key'))} ({md(rows[n - 1].get('verdict'))})" for n in lost
        )
        claims["state keys"] = Claim(
            f"{len(lost)} of {len(rows)} keys did not stick" + (f": {names}" if names else ""),
            (item_ref(ff, "vanished_state/keys", lost or None),),
        )
    if rewound:  # rolled back on request (Runner.rewind_async), not lost
        names = ", ".join(md(rows[n - 1].get("key")) for n in rewound)
        claims["rewound keys"] = Claim(
            f"{len(rewound)} key(s) rolled back by a rewind: {names}",
            (item_ref(ff, "vanished_state/keys", rewound),),
        )
    return claims


def _session(ff: FlowFindings) -> dict[str, Claim]:
    claims = _state(ff, "session/overlapping-invocations", "session/errors")
    s = ff.findings.summary
    claims["errors"] = Claim(
        f"{num(s.get('errors', 0))} errors, {num(s.get('quiet_errors', 0))} of them quiet (an "
        f"error code on a run that did not fail), {num(s.get('undeliverable', 0))} undeliverable",
        (counter(ff, "errors"), counter(ff, "quiet_errors"), item_ref(ff, "session/errors")),
    )
    return claims


_IMPACT: Mapping[str, Callable[[FlowFindings], dict[str, Claim]]] = {
    "latency_cliff": _latency,
    "orphans": _orphans,
    "runaway": _runaway,
    "vanished_state": _vanished,
    "session": _session,
}


def _unread(ff: FlowFindings) -> str:
    """Why the draft counts nothing of a flow: its run stopped, or no reader knows it."""
    if ff.failed is not None:
        return f"the {ff.flow} run stopped before its verdict"
    return f"this draft reads no {ff.flow} findings"


def _absent(measure: str, read: Sequence[tuple[FlowFindings, dict[str, Claim]]]) -> Claim:
    """The one n/a of a measure no flow counts: the flow's reason, or the flows that lack it."""
    reasons = sorted({c[measure].text for _, c in read if measure in c})
    if len(reasons) == 1 and len(read) == 1:
        return _na(reasons[0])
    flows = ", ".join(ff.flow for ff, _ in read)
    return _na(f"none of the findings read ({flows}) count it")


def impact(sources: Sequence[FlowFindings]) -> list[str]:
    """The Impact section's lines: one per measure, from the flows that count it (a sub-line per
    flow when several do); one n/a line for a measure none counts."""
    read = [
        (ff, _IMPACT[ff.flow](ff)) for ff in sources if ff.failed is None and ff.flow in _IMPACT
    ]
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
