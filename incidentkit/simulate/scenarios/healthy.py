"""``healthy``: background traffic only. Every flow must report nothing to act on."""

from __future__ import annotations

from typing import Any

from incidentkit.simulate.model import Bundle, at
from incidentkit.simulate.plan import Plan, Spec
from incidentkit.simulate.scenarios.common import llm_call_figures, paused_entry, terminal_agents
from incidentkit.simulate.traffic import Background
from incidentkit.simulate.world import World

WINDOW = (at("09:00"), at("10:00"))
SESSIONS = 42


def build(world: World, scale: int) -> Plan:
    background = Background(
        start=at("09:00"), end=at("09:55"), sessions=SESSIONS * scale, span_sample=0.3
    )

    def expected(w: World, events_format: str) -> dict[str, Any]:
        return {
            "verdict": "healthy",
            **terminal_agents(),
            "orphans": [],
            "non_terminal": [paused_entry(row) for row in w.open_rows],
            "open_invocations": [],
            "limit_hits": [],
            "errors": 0,
            "llm_calls": llm_call_figures(w.stats),
        }

    core: list[Bundle] = []
    return Plan(core=core, background=background, expected=expected, as_of=WINDOW[1])


SPEC = Spec(
    "healthy",
    "Healthy traffic: several apps, transfers, tools, approvals; nothing wrong",
    WINDOW,
    build,
)
