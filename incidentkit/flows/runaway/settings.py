"""The runaway flow's settings (:mod:`incidentkit.flows.settings`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from incidentkit.flows.runaway.signatures import MIN_REPEATS
from incidentkit.flows.settings import (
    BASELINE,
    BASELINE_ENGINE,
    FlowSettings,
    Names,
    Positive,
    Whole,
    setting,
)

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True, kw_only=True)
class RunawaySettings(FlowSettings):
    """The app's model calls judged at ``as_of``: the configured limit, the loops' exit keys,
    what makes a repeat, the price, and the distribution's window."""

    as_of: pd.Timestamp
    max_llm_calls: int | None = setting(
        Whole(1, fix="give the RunConfig limit, e.g. 500"),
        profile=True,
        default=None,
        default_source="not set: the limit error's message, else ADK's 500",
    )
    loop_exit_keys: tuple[str, ...] = setting(
        Names(
            fix="give a list, e.g. -p loop_exit_keys '[\"review:approved\"]', or set "
            "loop_exit_keys in [apps.<app>]"
        ),
        profile=True,
        default=(),
    )
    min_repeats: int = setting(
        Whole(2, fix="give how many identical calls make a repeat, e.g. 3"), default=MIN_REPEATS
    )
    price_per_1k_tokens: float | None = setting(
        Positive(fix="give the model's price per 1,000 tokens, e.g. 0.0003 (0: no money shown)"),
        default=None,
    )
    baseline: str | None = setting(BASELINE, default=None)
    """``START/END`` of the distribution's window (a duration given ends at ``as_of``); None:
    the incident window."""
    baseline_engine: bool = setting(BASELINE_ENGINE, default=True)
