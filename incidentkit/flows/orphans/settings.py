"""The orphans flow's settings (:mod:`incidentkit.flows.settings`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from incidentkit.flows.settings import FlowSettings, OneOrMore, Table, Whole, setting

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True, kw_only=True)
class OrphanSettings(FlowSettings):
    """The sweep of the app's runs at ``as_of``: which agent ends a run, how each tool's
    journal entries are keyed, and how many attempts make a crash loop."""

    as_of: pd.Timestamp
    terminal_agent: str | tuple[str, ...] = setting(
        OneOrMore(
            fix="give the agent whose final response ends a run, e.g. -p terminal_agent "
            "notify_agent, or set terminal_agent in [apps.<app>]"
        ),
        profile=True,
    )
    key_templates: Mapping[str, str] = setting(
        Table(
            what="a table of key templates by tool name",
            fix="give one per tool, e.g. -p key_templates "
            '\'{"sendInvoice": "send-invoice:{invoiceId}"}\', or set key_templates in '
            "[apps.<app>] ({} when no tool journals by business key)",
        ),
        profile=True,
    )
    attempts_cap: int = setting(
        Whole(1, fix="give the sweeper's cap, e.g. 3"), profile=True, default=3
    )
