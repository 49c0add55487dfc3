"""A deterministic incident simulator: evidence packs with known truth.

``simulate(scenario, out)`` writes one incident's evidence (ledger, ADK events, journal, spans,
diagnostics log, thread dumps), its ``evidence.toml`` and ``truth.json``. Same seed, same bytes.
Used for the committed fixture packs, demos, benchmarks (``scale``) and trying the notebooks
before pointing them at production. See ``docs/simulator.md``.
"""

from incidentkit.simulate.command import add_arguments, run_cli
from incidentkit.simulate.driver import EVENTS_FORMATS, simulate
from incidentkit.simulate.scenarios import SCENARIOS

__all__ = ["EVENTS_FORMATS", "SCENARIOS", "add_arguments", "run_cli", "simulate"]
