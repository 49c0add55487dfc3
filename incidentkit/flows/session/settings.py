"""The session flow's settings (:mod:`incidentkit.flows.settings`): all found in the
evidence (:func:`incidentkit.flows._session.open_session`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from incidentkit.flows.settings import FlowSettings

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True, kw_only=True)
class SessionSettings(FlowSettings):
    """The session read up to ``as_of``, and its user."""

    as_of: pd.Timestamp
    session_id: str
    user_id: str
