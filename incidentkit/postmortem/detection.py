"""The Detection section: per flow, which alert saw the incident or would have seen it sooner."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import pandas as pd

from incidentkit.postmortem.collect import OPEN_ITEM, ORPHAN_ITEMS, FlowFindings, orphaned
from incidentkit.postmortem.proof import cite, counter, dated, item_ref
from incidentkit.postmortem.text import TODO, iso, md, num, utc


def _latency(ff: FlowFindings) -> list[str]:
    lines = []
    timeout = ff.timeout
    cliff = ff.rows("latency_cliff/cliff")
    if cliff and not cliff[0].get("errors_after"):
        lines.append(
            "- latency_cliff: no error alert fires: nothing failed, things waited "
            f"{item_ref(ff, 'latency_cliff/cliff').text()}"
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


def _runaway(ff: FlowFindings) -> list[str]:
    lines, s = [], ff.findings.summary
    hits = ff.rows("runaway/hit-limit")
    if hits:
        lines.append(
            f"- runaway: the limit (maxLlmCalls {num(hits[0].get('limit'))}) stopped "
            f"{len(hits)} invocation(s) after {num(hits[0].get('model_calls'))} model calls "
            f"{item_ref(ff, 'runaway/hit-limit').text()}"
        )
    if s.get("recommended_max_llm_calls"):
        lines.append(
            f"- runaway: maxLlmCalls {s['recommended_max_llm_calls']} (recommended from "
            "the healthy invocations) would have stopped each loop sooner, after "
            f"{s['recommended_max_llm_calls']} calls "
            + cite([counter(ff, "recommended_max_llm_calls"), item_ref(ff, "runaway/model-calls")])
        )
    return lines


def _orphans(ff: FlowFindings) -> list[str]:
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


def _session(ff: FlowFindings) -> list[str]:
    s = ff.findings.summary
    codes = s.get("error_code_events", 0)
    return [
        f"- session: a run-failure alert sees only run errors; an alert on events with an "
        f"error_code fires sooner: {codes} such event(s), {s.get('quiet_errors', 0)} on a "
        f"run that did not fail "
        + cite([counter(ff, "error_code_events"), counter(ff, "quiet_errors")])
    ]


def _vanished(ff: FlowFindings) -> list[str]:
    if not ff.rows("vanished_state/overlapping-invocations"):
        return []
    first = dated(ff, ["vanished_state/overlapping-invocations"], "b_start")
    return [
        "- vanished_state: lost state raises no error; an alert on two invocations "
        "open at once on one session fires at the overlap, first at "
        f"{md(utc(first[0][3]['b_start'])) if first else 'n/a'} "
        f"{item_ref(ff, 'vanished_state/overlapping-invocations').text()}"
    ]


_DETECTION: Mapping[str, Callable[[FlowFindings], list[str]]] = {
    "latency_cliff": _latency,
    "runaway": _runaway,
    "orphans": _orphans,
    "session": _session,
    "vanished_state": _vanished,
}


def detection(sources: Sequence[FlowFindings]) -> list[str]:
    """The Detection section's lines, from every flow whose run reached a verdict other than
    CLEAN (a CLEAN flow had nothing to detect, nothing to stop sooner)."""
    lines = [
        line
        for ff in sources
        if ff.failed is None and not ff.clean and ff.flow in _DETECTION
        for line in _DETECTION[ff.flow](ff)
    ]
    return [
        *(lines or ["- The findings name no alert."]),
        "",
        f"> {TODO} how was the incident detected (alert, ticket, customer report), when, and "
        "how long after it began?",
    ]
