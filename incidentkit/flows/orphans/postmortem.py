"""What the orphans findings give a postmortem draft: the orphaned runs, their sessions and
invocations, duplicate effects and crash loops; when each lease ran out; the worker that
stopped as the trigger; the sweeper and the attempts cap as the alerts; and the
``incidentkit actions`` command that lists the runs of an item.

Imported only when a draft is written (``flow.py`` names it); it is a
:class:`~incidentkit.flows.plugin.PostmortemModule`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from incidentkit.findings import Finding
from incidentkit.flows.orphans.flow import ORPHAN_ITEMS
from incidentkit.postmortem.collect import FlowFindings
from incidentkit.postmortem.impact import Claim, count_claim, na, no_tokens
from incidentkit.postmortem.proof import cite, counter, dated, distinct, item_ref
from incidentkit.postmortem.text import code, md, num, utc
from incidentkit.postmortem.timeline import Moment, grouped

if TYPE_CHECKING:
    from incidentkit.flows.orphans import postmortem
    from incidentkit.flows.plugin import PostmortemModule

    _CONFORMS: PostmortemModule = postmortem

NOTHING_TO_DO = frozenset({"NONE", "WAIT"})
"""Action kinds that are no runs to act on: a live lease, a run waiting for a person."""


def impact(ff: FlowFindings) -> dict[str, Claim]:
    """The orphaned runs of the ledger, their sessions and invocations, duplicate effects and
    crash loops; n/a but the reason when the evidence could not tell the classes."""
    s, claims = ff.findings.summary, {}
    if "orphans" not in s and ff.limits is not None:  # the events cannot tell runs apart
        why = f"the orphans flow withheld its classes: {md(ff.limits.title)}"
        claims = {key: na(why) for key in ("runs", "sessions", "invocations")}
        claims["users"] = na("the orphan run rows carry no user id")
        claims["tokens"] = no_tokens(ff)
        return claims
    present = [i for i in ORPHAN_ITEMS if ff.item(i)]
    claims["runs"] = Claim(
        f"{num(s.get('orphans', 0))} orphaned runs (a RUNNING ledger row whose lease ran out) "
        f"of {num(s.get('runs', 0))} in the ledger",
        (*(item_ref(ff, i) for i in present), counter(ff, "orphans")),
    )
    claims["sessions"] = count_claim(ff, present, "session_id", "sessions of the orphaned runs")
    none = sum(1 for i in present for row in ff.rows(i) if row.get("invocation_id") is None)
    note = f" ({none} orphaned runs have none: no event of theirs is stored)" if none else ""
    claims["invocations"] = count_claim(
        ff, present, "invocation_id", "invocations of the orphaned runs", note
    )
    claims["users"] = na("the orphan run rows carry no user id")
    claims["duration"] = na(
        "the orphans flow judges one moment (as_of); the timeline shows when the leases ran out"
    )
    claims["tokens"] = no_tokens(ff)
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


def timeline(ff: FlowFindings) -> list[Moment]:
    """When each orphaned run's lease ran out, per worker."""
    return grouped(
        ff,
        ORPHAN_ITEMS,
        "lease_until",
        lambda r: (
            f"the lease of orphaned run {r.get('run_id')} ({r.get('orphan_class')}) "
            f"held by {r.get('owner')} runs out: that worker had stopped renewing it"
        ),
        by="owner",
    )


def triggers(ff: FlowFindings) -> list[str]:
    """The workers that stopped while their runs were in flight; why is not in the evidence."""
    owners, pointers, _ = distinct(ff, ORPHAN_ITEMS, "owner")
    if not owners:
        return []
    return [
        f"- **Trigger**: worker(s) {md(', '.join(owners))} stopped while runs were in "
        f"flight; their leases ran out (timeline) {cite(pointers)}",
        "- **Root cause**: n/a — the evidence shows that the worker stopped, not why "
        "(a kill, a deploy, an out-of-memory exit: see the TODO below)",
    ]


def detection(ff: FlowFindings) -> list[str]:
    """The sweeper at the first lease expiry; the attempts cap on a crash loop, and sooner an
    alert on the worker's stop."""
    lines = []
    leases = dated(ff, ORPHAN_ITEMS, "lease_until")
    if leases:
        _, item_id, n, row = leases[0]
        first = item_ref(ff, item_id, [n]).text()
        lines.append(
            "- orphans: the recovery sweeper claims an orphan once its lease runs out; "
            f"the first ran out at {md(utc(row['lease_until']))} {first}"
        )
    if ff.rows("orphans/crash-loops"):
        lines.append(
            "- orphans: the attempts cap parks a crash loop and alerts "
            f"{item_ref(ff, 'orphans/crash-loops').text()}"
        )
        before = f", before {md(utc(leases[0][3]['lease_until']))}" if leases else ""
        lines.append(
            "- orphans: sooner: an alert on a worker that exits or stops renewing its "
            f"leases fires at the stop itself{before}"
        )
    return lines


def action_note(ff: FlowFindings, item: Finding) -> str:
    """The ``incidentkit actions`` commands that list the item's runs to act on, one per kind
    (none for a live lease or a wait: :data:`NOTHING_TO_DO`)."""
    kinds = sorted(
        {str(r["action_kind"]) for r in item.rows if r.get("action_kind")} - NOTHING_TO_DO
    )
    if not kinds:
        return ""
    folder = Path(ff.rel).parent.as_posix()
    where = "OUT" if folder == "." else f"OUT/{folder}"
    return (
        " (runs to act on: "
        + ", ".join(code(f"incidentkit actions {where} --kind {k}") for k in kinds)
        + ")"
    )
