"""Pieces every scenario's truth shares: non-terminal runs, calls-per-invocation figures."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from incidentkit.simulate.model import LedgerRow
from incidentkit.simulate.traffic import TERMINAL_AGENTS
from incidentkit.simulate.truth import percentile
from incidentkit.simulate.world import RunStat

TERMINAL = ("DONE", "FAILED", "PARKED")


def paused_entry(row: LedgerRow) -> dict[str, Any]:
    """A cleanly paused background run: class PAUSED, nothing to do but wait."""
    return {
        "run_id": row.run_id,
        "session_id": row.session,
        "invocation_id": row.invocation_id,
        "ledger_status": row.status,
        "orphan_class": "PAUSED",
        "expired": False,
        "action": "wait: the run is paused on a long-running approval",
    }


def llm_call_figures(
    stats: list[RunStat], *, app: str | None = None, exclude: Iterable[str] = ()
) -> dict[str, Any]:
    """Model calls per invocation (the plugin's ``run.end llmCalls``) over the invocations with
    a run.end, of ``app`` when given, leaving out ``exclude`` (the runaway ones)."""
    left_out = set(exclude)
    calls = [
        float(s.llm_calls)
        for s in stats
        if s.outcome is not None
        and (app is None or s.app == app)
        and s.invocation_id not in left_out
    ]
    scope = f" of app {app}" if app else ""
    unless = ", except those that hit the limit or loop" if left_out else ""
    return {
        "population": f"invocations{scope} with a run.end (diagnostics llmCalls){unless}",
        "invocations": len(calls),
        "p50": percentile(calls, 50),
        "p99": percentile(calls, 99),
        "max": max(calls) if calls else None,
    }


def terminal_agents() -> dict[str, Any]:
    """The terminal agents of every background app: one list, and per app."""
    per_app = {app: list(agents) for app, agents in sorted(TERMINAL_AGENTS.items())}
    return {
        "terminal_agents": sorted({a for agents in per_app.values() for a in agents}),
        "terminal_agents_per_app": per_app,
    }
