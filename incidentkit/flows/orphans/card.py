"""The orphans flow's cheap check on the triage card: runs orphaned at as_of."""

from __future__ import annotations

from incidentkit.flows.card_lines import CardContext, CardLine, card_line, not_checked
from incidentkit.flows.orphans.triage import classify_orphans

FLOW = "orphans"


def card_lines(context: CardContext) -> list[CardLine]:
    """The orphans line: WARNING for orphaned runs, CRITICAL with a crash loop or a duplicate
    side effect; NOT_CHECKED without a ledger run or the profile's ``terminal_agent``."""
    frames, profile = context.frames, context.profile
    evidence = "run ledger, event log, journal"
    if frames.runs.empty:
        return [not_checked("orphans", FLOW, evidence, "no ledger run of this app")]
    if not profile.terminal_agent:
        why = "the app's profile names no terminal_agent"
        return [not_checked("orphans", FLOW, evidence, why)]
    report = classify_orphans(
        frames.runs,
        frames.events,
        frames.calls,
        frames.responses,
        frames.journal,
        as_of=context.as_of,
        terminal_agent=profile.terminal_agent,
        key_templates=profile.key_templates,
        attempts_cap=profile.attempts_cap,
    )
    orphans, loops = len(report.orphans), len(report.crash_loops)
    title = f"{orphans} orphaned run(s) at as_of" + (f", {loops} crash loop(s)" if loops else "")
    severity = (
        "CRITICAL" if loops or len(report.duplicate_effects) else ("WARNING" if orphans else "INFO")
    )
    return [card_line("orphans", severity, orphans, title, FLOW, "run ledger")]
