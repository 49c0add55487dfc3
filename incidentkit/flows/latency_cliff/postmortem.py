"""What the latency_cliff findings give a postmortem draft: the runs slowed since the cliff, the
open invocations (hangs that hold a thread, and the orphans of a dead worker, which hold none),
their times, the dead worker as the trigger, and the alerts that would have fired sooner.

Imported only when a draft is written (``flow.py`` names it); it is a
:class:`~incidentkit.flows.plugin.PostmortemModule`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pandas as pd

from incidentkit.findings import Finding
from incidentkit.postmortem.collect import FlowFindings
from incidentkit.postmortem.impact import (
    Claim,
    count_claim,
    is_number,
    na,
    no_column,
    no_tokens,
    seconds_between,
)
from incidentkit.postmortem.proof import Ref, counter, dated, item_ref
from incidentkit.postmortem.text import duration, iso, md, ms, num, time
from incidentkit.postmortem.timeline import Moment, grouped

if TYPE_CHECKING:
    from incidentkit.flows.latency_cliff import postmortem
    from incidentkit.flows.plugin import PostmortemModule

    _CONFORMS: PostmortemModule = postmortem

CLIFF = "latency_cliff/cliff"
OPEN_ITEM = "latency_cliff/open-invocations"
"""The open invocations: hangs, and the orphans of a dead worker."""


def orphaned(row: Mapping[str, Any]) -> bool:
    """Whether an open invocation's worker died (``orphaned``; findings written before that
    field: ``lease_expired``): an orphan, not a hang that holds a thread."""
    return row.get("orphaned", row.get("lease_expired")) is True


def orphaned_rows(ff: FlowFindings) -> list[int]:
    """The 1-based rows of :data:`OPEN_ITEM` whose worker died."""
    return [n for n, row in enumerate(ff.rows(OPEN_ITEM), 1) if orphaned(row)]


# ---------------------------------------------------------------------------------- impact


def impact(ff: FlowFindings) -> dict[str, Claim]:
    """The runs slowed since the cliff, the open invocations and their sessions, how long."""
    s, claims = ff.findings.summary, {}
    cliff = ff.rows(CLIFF)
    timeout = ff.timeout
    if cliff:
        c = cliff[0]
        claims["runs"] = Claim(
            f"{num(s.get('run_starts_since_cliff', c.get('runs_after')))} runs started since "
            f"the cliff, each slower: p50 {ms(c.get('p50_before_ms'))} → "
            f"{ms(c.get('p50_after_ms'))}, p95 {ms(c.get('p95_before_ms'))} → "
            f"{ms(c.get('p95_after_ms'))}; errors {num(c.get('errors_before'))} before, "
            f"{num(c.get('errors_after'))} after",
            (item_ref(ff, CLIFF), counter(ff, "run_starts_since_cliff")),
        )
    else:
        claims["runs"] = na("no latency cliff in the window")
    claims["invocations"] = _open_claim(ff, timeout)
    claims["sessions"] = count_claim(ff, [OPEN_ITEM], "session_id", "sessions of those invocations")
    claims["users"] = no_column(ff, "user id")
    as_of = time(ff.findings.evidence.as_of)
    at = time(cliff[0].get("at")) if cliff else None
    seconds = seconds_between(at, as_of)
    if at is not None and as_of is not None and seconds is not None:
        still = ", invocations still open then" if s.get("open_invocations") else ""
        claims["duration"] = Claim(
            f"≥ {duration(seconds)}: from the cliff at {iso(at)} to "
            f"as_of {iso(as_of)}{still}; the findings show no recovery",
            (item_ref(ff, CLIFF), Ref(ff.rel, key="evidence.as_of")),
        )
    claims["tokens"] = no_tokens(ff)
    if s.get("stuck_threads"):
        claims["stuck threads"] = Claim(
            f"{num(s['stuck_threads'])} threads unmoved in every thread dump",
            (item_ref(ff, "latency_cliff/stuck-threads"), counter(ff, "stuck_threads")),
        )
    return claims


def _open_claim(ff: FlowFindings, timeout: float | None) -> Claim:
    """The open invocations: the hung ones held a thread each; the orphans' worker died."""
    s = ff.findings.summary
    total = s.get("open_invocations", 0)
    total = total if is_number(total) else len(ff.rows(OPEN_ITEM))
    dead = orphaned_rows(ff)
    found = ff.item(OPEN_ITEM)
    cut = found is not None and (found[1].count or 0) > len(found[1].rows)
    orphans = s.get("orphaned_invocations", len(dead))
    orphans = orphans if is_number(orphans) else len(dead)
    past = f"{num(total)} invocations open past the {f'{timeout:g} s' if timeout else 'the'} "
    past += "client timeout"
    proof: tuple[Ref, ...] = (item_ref(ff, OPEN_ITEM), counter(ff, "open_invocations"))
    if not orphans:
        return Claim(f"{past}: their users had given up, each still held a thread", proof)
    hung = total - orphans
    bound = "≥ " if cut and "orphaned_invocations" not in s else ""
    dead_text = (
        f"{bound}{num(orphans)} orphaned: their worker died (a ledger lease that ran out, or "
        "a run re-driven since), so none of them held a thread; the orphans flow recovers "
        "their runs"
    )
    proof = (item_ref(ff, OPEN_ITEM, dead or None), counter(ff, "open_invocations"))
    if "orphaned_invocations" in s:
        proof = (*proof, counter(ff, "orphaned_invocations"))
    if hung <= 0:
        return Claim(f"{past}, all {dead_text}", proof)
    return Claim(
        f"{past}: {num(hung)} hung (their users had given up, each still held a thread), "
        f"{dead_text}",
        proof,
    )


# -------------------------------------------------------------------------------- timeline


def timeline(ff: FlowFindings) -> list[Moment]:
    """The cliff, and each open invocation's start (hangs and orphans grouped apart)."""
    return [
        *grouped(
            ff,
            [CLIFF],
            "at",
            lambda r: (
                f"latency cliff: p95 {ms(r.get('p95_before_ms'))} → "
                f"{ms(r.get('p95_after_ms'))} (first bucket after the change point)"
            ),
        ),
        *grouped(ff, [OPEN_ITEM], "started_at", _open_text, by=_role),
    ]


_DEAD = {
    "lease_expired": "its ledger lease expired",
    "redriven": "its run was re-driven since",
    "session_silent": "its session went silent while others went on; presumed",
}
"""An orphan's ``orphan_reason`` in words."""


def _role(row: dict[str, Any]) -> str:
    """An open invocation's role: ``orphan`` when its worker died (:func:`orphaned`), else
    ``hang``."""
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


# ------------------------------------------------------------------------- root cause, alerts


def triggers(ff: FlowFindings) -> list[str]:
    """The workers that stopped, when open invocations are orphans of a dead worker."""
    dead = [row for row in ff.rows(OPEN_ITEM) if orphaned(row)]
    if not dead:
        return []
    owners = sorted({str(row["owner"]) for row in dead if row.get("owner")})
    whose = f"worker(s) {md(', '.join(owners))}" if owners else "a worker"
    return [
        f"- **Trigger**: {whose} stopped while {len(dead)} open invocation(s) were in "
        "flight: their ledger leases ran out (or their runs were re-driven since); "
        f"those invocations are orphans, not hangs {item_ref(ff, OPEN_ITEM).text()}"
    ]


def detection(ff: FlowFindings) -> list[str]:
    """No error alert on a cliff without errors; a dead worker's alert; the client timeout and
    an alert at ¾ of it on the first hung invocation."""
    lines = []
    timeout = ff.timeout
    cliff = ff.rows(CLIFF)
    if cliff and not cliff[0].get("errors_after"):
        lines.append(
            "- latency_cliff: no error alert fires: nothing failed, things waited "
            f"{item_ref(ff, CLIFF).text()}"
        )
    starts = dated(ff, [OPEN_ITEM], "started_at")
    dead = [entry for entry in starts if orphaned(entry[3])]
    if dead:
        n = dead[0][2]
        lines.append(
            f"- latency_cliff: {len(dead)} open invocation(s) belong to a worker that died: "
            "an alert on a worker that exits or stops renewing its leases fires at the stop "
            f"itself; no latency alert tells a dead worker from a slow one "
            f"{item_ref(ff, OPEN_ITEM, [n]).text()}"
        )
    starts = [entry for entry in starts if not orphaned(entry[3])]
    if timeout and starts:
        stamp, _, n, _ = starts[0]
        proof = item_ref(ff, OPEN_ITEM, [n]).text()
        try:
            gave_up = iso(stamp + pd.Timedelta(seconds=timeout))
            sooner = iso(stamp + pd.Timedelta(seconds=timeout * 0.75))
        except (OverflowError, ValueError):  # past the last time a timestamp holds
            return lines
        lines.append(
            f"- latency_cliff: the first user gave up at {gave_up}, when the first open "
            f"invocation passed the {timeout:g} s client timeout {proof}"
        )
        lines.append(
            f"- latency_cliff: sooner: an alert on invocations open longer than "
            f"{timeout * 0.75:g} s (¾ of the client timeout: a run.start with no run.end) "
            f"would have fired at {sooner}, {timeout * 0.25:g} s before that {proof}"
        )
    return lines


def action_note(ff: FlowFindings, item: Finding) -> str:
    """Nothing: the items' actions say it all."""
    return ""
