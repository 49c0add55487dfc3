"""The latency flow's cheap checks on the triage card: invocations open past the client
timeout, those of them whose worker died (for the orphans flow), and the latency cliff."""

from __future__ import annotations

import pandas as pd

from incidentkit.flows.card_lines import CardContext, CardLine, card_line, not_checked
from incidentkit.flows.latency_cliff.hangs import Orphaned
from incidentkit.flows.latency_cliff.triage import LatencyReport, triage_latency
from incidentkit.flows.orphans.flow import FLOW as ORPHANS

FLOW = "latency_cliff"
EVIDENCE = "diagnostics log, spans, ledger, event log, thread dumps"


def card_lines(context: CardContext) -> list[CardLine]:
    """The open-past-timeout, dead-worker and latency-cliff lines (NOT_CHECKED, all three, when
    no source times an invocation)."""
    profile = context.profile
    report = triage_latency(
        context.frames, as_of=context.as_of, client_timeout_s=profile.client_timeout_s
    )
    if report.source is None:
        why = "no source times an invocation (no run.start, invocation span, run or event)"
        return [
            not_checked("open-past-timeout", FLOW, EVIDENCE, why),
            not_checked("latency-cliff", FLOW, EVIDENCE, why),
            not_checked("dead-worker", ORPHANS.name, EVIDENCE, why),
        ]
    timeout = f"{profile.client_timeout_s:g} s client timeout"
    hangs, dead = report.hangs, report.orphans
    tools = hangs["tool"].dropna().value_counts()
    waiting = f", most waiting on {tools.index[0]}" if len(tools) else ""
    also = f"; {len(dead)} more belong to a dead worker (dead-worker line)" if len(dead) else ""
    open_line = card_line(
        "open-past-timeout",
        "CRITICAL" if len(hangs) else "INFO",
        len(hangs),
        f"{len(hangs)} invocation(s) open past the {timeout}{waiting}{also}",
        FLOW,
        f"{report.open_source or report.source}",
    )
    return [open_line, _dead_line(report, timeout), _cliff_line(report, report.source)]


def _dead_line(report: LatencyReport, timeout: str) -> CardLine:
    """The open invocations whose worker died: orphans, for the orphans flow."""
    dead = report.orphans
    evidence = "run ledger (leases), event log"
    if dead.empty:
        return card_line(
            "dead-worker", "INFO", 0, "no open invocation of a dead worker", ORPHANS.name, evidence
        )
    reason = dead["orphan_reason"]
    owners = sorted(set(dead["owner"].dropna().astype(str)))
    why = []
    if reason.eq(Orphaned.LEASE_EXPIRED).any():
        whose = f" ({', '.join(owners)})" if owners else ""
        why.append(f"{int(reason.eq(Orphaned.LEASE_EXPIRED).sum())} ledger lease(s) expired{whose}")
    if reason.eq(Orphaned.REDRIVEN).any():
        why.append(f"{int(reason.eq(Orphaned.REDRIVEN).sum())} run(s) re-driven since")
    if reason.eq(Orphaned.SESSION_SILENT).any():
        why.append(
            f"{int(reason.eq(Orphaned.SESSION_SILENT).sum())} session(s) silent while the app "
            "went on (no ledger: presumed)"
        )
    return card_line(
        "dead-worker",
        "WARNING",
        len(dead),
        f"{len(dead)} invocation(s) open past the {timeout} are orphans, not hangs: the "
        f"worker died ({'; '.join(why)})",
        ORPHANS.name,
        evidence,
    )


def _cliff_line(report: LatencyReport, source: str) -> CardLine:
    """The latency change point, a cliff only where latency rose (the latency flow's rule),
    told in the measure that rose: every run's latency, an open one at its age."""
    if not report.has_cliff:
        return card_line("latency-cliff", "INFO", 0, "no latency change point", FLOW, source)
    row = report.cliff.iloc[0]
    before = report.series.iloc[: report.cliff_index]
    after = report.series.iloc[report.cliff_index :]
    before = before.loc[~before["invocation_id"].isin(report.orphans["invocation_id"])]
    after = after.loc[~after["invocation_id"].isin(report.orphans["invocation_id"])]
    said = []
    for q in (0.95, 0.5):
        low, high = float(before["ms"].quantile(q)), float(after["ms"].quantile(q))
        if high > low:
            said.append(f"p{round(q * 100)} {low / 1000:.3g} s → {high / 1000:.3g} s")
    rose = said[0] if said else "latency rose"
    return card_line(
        "latency-cliff",
        "WARNING",
        report.run_starts_since_cliff,
        f"latency rose at {pd.Timestamp(row['at']):%H:%M} UTC: {rose} (open invocations "
        "counted at their age)",
        FLOW,
        source,
    )
