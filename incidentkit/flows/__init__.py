"""The triage flows: one folder each, one registry line each, one notebook each.

A flow folder holds its pure triage, its findings, its plots, the steps its notebook's cells
call, and ``flow.py``: the :class:`~incidentkit.flows.plugin.Flow` that tells the rest of the
kit what the flow is (its notebook, the sections it reads, what it withholds on lossy
evidence). :data:`FLOWS` collects them; the runner, the CLI, ``incidentkit new``, ``run all``,
the evidence limits, the docs and the tests read it. ``docs/adding-a-flow.md`` says how to add
one.
"""

from __future__ import annotations

from collections.abc import Mapping

from incidentkit.flows.plugin import EvidenceLimits, Flow

__all__ = ["FLOWS", "EvidenceLimits", "Flow", "register"]

_FLOWS: dict[str, Flow] = {}
FLOWS: Mapping[str, Flow] = _FLOWS
"""Every flow, by name, in the order ``run all`` and the docs list them. A flow's own modules
read their declaration from their ``flow.py``, never from here while it fills."""


def register(flow: Flow) -> Flow:
    """Add ``flow`` to :data:`FLOWS` (a flow of the same name is replaced); returns it."""
    _FLOWS[flow.name] = flow
    return flow


def _declared() -> tuple[Flow, ...]:
    """The kit's flows, one line each (imported here: a flow's package imports this one)."""
    from incidentkit.flows.latency_cliff.flow import FLOW as LATENCY_CLIFF
    from incidentkit.flows.orphans.flow import FLOW as ORPHANS
    from incidentkit.flows.overview.flow import FLOW as OVERVIEW
    from incidentkit.flows.runaway.flow import FLOW as RUNAWAY
    from incidentkit.flows.session.flow import FLOW as SESSION
    from incidentkit.flows.vanished_state.flow import FLOW as VANISHED_STATE

    return (ORPHANS, LATENCY_CLIFF, RUNAWAY, VANISHED_STATE, SESSION, OVERVIEW)


for _flow in _declared():
    register(_flow)
