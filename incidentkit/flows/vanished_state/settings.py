"""The vanished_state flow's settings (:mod:`incidentkit.flows.settings`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from incidentkit.flows.settings import FlowSettings, Names, setting

if TYPE_CHECKING:
    import pandas as pd

KEYS = Names(
    fix='give a list of state keys, e.g. -p keys \'["loyalty_tier", "cart"]\' ([] for all)'
)


@dataclass(frozen=True, kw_only=True)
class VanishedSettings(FlowSettings):
    """The session read up to ``as_of``, its user, and the state keys to judge."""

    as_of: pd.Timestamp
    session_id: str
    user_id: str
    keys: tuple[str, ...] = setting(
        KEYS, default=(), default_source="default: every key the session names"
    )
