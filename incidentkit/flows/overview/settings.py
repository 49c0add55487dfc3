"""The overview flow's settings (:mod:`incidentkit.flows.settings`): the card's, and each
app's profile its checks read."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from incidentkit.flows.card_lines import Profile
from incidentkit.flows.settings import (
    Choice,
    FlowSettings,
    Names,
    OneOrMore,
    Seconds,
    Table,
    Whole,
    setting,
)

if TYPE_CHECKING:
    import pandas as pd

_IN_PROFILE = "write it in [apps.<app>] as docs/manifest.md says"


@dataclass(frozen=True, kw_only=True)
class CardProfile(FlowSettings):
    """One app's settings the card's checks read, from its ``[apps.<app>]`` profile (the
    manifest checked them), else the flows' defaults."""

    client_timeout_s: float = setting(Seconds(fix=_IN_PROFILE), profile=True, default=60.0)
    max_llm_calls: int | None = setting(Whole(1, fix=_IN_PROFILE), profile=True, default=None)
    loop_exit_keys: tuple[str, ...] = setting(Names(fix=_IN_PROFILE), profile=True, default=())
    terminal_agent: str | tuple[str, ...] | None = setting(
        OneOrMore(fix=_IN_PROFILE), profile=True, default=None
    )
    """None: the orphan check is NOT_CHECKED."""
    key_templates: Mapping[str, str] = setting(Table(fix=_IN_PROFILE), profile=True, default={})
    attempts_cap: int = setting(Whole(1, fix=_IN_PROFILE), profile=True, default=3)

    def profile(self) -> Profile:
        """What a check is given of them."""
        return Profile(
            client_timeout_s=self.client_timeout_s,
            max_llm_calls=self.max_llm_calls,
            loop_exit_keys=self.loop_exit_keys,
            terminal_agent=self.terminal_agent,
            key_templates=self.key_templates,
            attempts_cap=self.attempts_cap,
        )


def _symptoms() -> Collection[str]:
    from incidentkit.flows.overview.card import SYMPTOMS

    return SYMPTOMS


def _engines() -> Collection[str]:
    from incidentkit.flows.engine_card import CARD_ENGINE

    return CARD_ENGINE


@dataclass(frozen=True, kw_only=True)
class OverviewSettings(FlowSettings):
    """The card of ``apps`` (``app_name``: their names, joined) judged at ``as_of``, ordered
    for the reported symptom; each app's checks read its :class:`CardProfile`."""

    profiles = (CardProfile,)

    apps: tuple[str, ...]
    as_of: pd.Timestamp
    symptom: str | None = setting(
        Choice(_symptoms, none="to order the card by severity"),
        default=None,
        default_source="none: by severity",
    )
    card_engine: str = setting(
        Choice(_engines, none='"auto"'),
        default="auto",
        default_source="default: the engine for a fleet's evidence",
    )
    """Where the card's checks run: ``yes`` in the events' and ledger's database (SQL, the
    whole fleet in one pass per check; :mod:`incidentkit.flows.engine_card`), ``no`` over the
    frames loaded into pandas, ``auto`` the engine for a fleet's evidence
    (:func:`~incidentkit.flows.engine_card.auto_choice`)."""
    in_engine: bool
    """Whether the card is computed in the engine: ``card_engine`` decided once, at setup."""
