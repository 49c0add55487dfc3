"""The scenarios, by name. Each module defines ``SPEC``."""

from __future__ import annotations

from collections.abc import Mapping

from incidentkit.simulate.plan import Spec
from incidentkit.simulate.scenarios import (
    crash_recovery,
    healthy,
    latency_cliff,
    runaway,
    slow_death,
    vanished_state,
)

SCENARIOS: Mapping[str, Spec] = {
    spec.name: spec
    for spec in (
        healthy.SPEC,
        latency_cliff.SPEC,
        runaway.SPEC,
        vanished_state.SPEC,
        crash_recovery.SPEC,
        slow_death.SPEC,
    )
}
