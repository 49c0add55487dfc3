"""What every check of the triage card is made of: its lines (:data:`LINE_COLUMNS`), what it
runs on (:class:`CardContext`) and the app's settings it reads (:class:`Profile`).

A flow's check lives in its folder and its ``flow.py`` declares it
(:class:`~incidentkit.flows.plugin.CardChecks`); the card
(:mod:`incidentkit.flows.overview.card`) runs every declared check and orders the lines.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

import pandas as pd

from incidentkit.flows.common import Frames

LINE_COLUMNS = [
    *("check", "severity", "count", "title", "flow", "evidence", "detail", "session_id"),
    "keys",
]
"""One row per check: what was checked, how urgent (``CRITICAL``, ``WARNING``, ``INFO``,
``NOT_CHECKED``), how many rows it found, in words, the flow to open next, the evidence it
reads first, the session to open it on (the one-session flows need one) and the state keys to
judge there (``k1,k2``; the state check's lines only)."""
SEVERITY_RANK = {"CRITICAL": 0, "WARNING": 1, "INFO": 2, "NOT_CHECKED": 3}


class CardLine(TypedDict):
    """One line of the card, a row of :data:`LINE_COLUMNS`."""

    check: str
    severity: str
    count: int
    title: str
    flow: str
    evidence: str
    detail: str
    session_id: str | None
    keys: str | None
    app: NotRequired[str | None]
    """The app of a line computed over the whole fleet at once (an engine check,
    :mod:`incidentkit.flows.engine_card`); None: the JVM's, not an app's."""


@dataclass(frozen=True)
class Profile:
    """The app's settings the checks need (from parameters, else ``[apps.<app>]``)."""

    client_timeout_s: float = 60.0
    max_llm_calls: int | None = None
    loop_exit_keys: tuple[str, ...] = ()
    terminal_agent: Any = None
    """The orphan check needs it; without it that line is NOT_CHECKED."""
    key_templates: Mapping[str, str] | None = None
    attempts_cap: int = 3


@dataclass(frozen=True)
class CardContext:
    """What a check is given: one app's frames, read once, and what the card was asked."""

    frames: Frames
    as_of: pd.Timestamp
    profile: Profile
    symptom: str | None = None
    """The reported symptom (a key of :data:`incidentkit.flows.overview.card.SYMPTOMS`)."""
    histograms: pd.DataFrame | None = None
    """The JVM's ``GC.class_histogram`` dumps, when the evidence has them."""
    jfr_heap: pd.DataFrame | None = None
    """A JFR recording's heap summaries, when the evidence has one."""
    jfr_old_objects: pd.DataFrame | None = None
    """Its old-object samples."""


def card_line(
    check: str,
    severity: str,
    count: int,
    title: str,
    flow: str,
    evidence: str,
    detail: str = "",
    session_id: str | None = None,
    keys: str | None = None,
) -> CardLine:
    """A line of the card: ``flow`` is the flow to open next, ``evidence`` what it reads."""
    return {
        "check": check,
        "severity": severity,
        "count": count,
        "title": title,
        "flow": flow,
        "evidence": evidence,
        "detail": detail,
        "session_id": session_id,
        "keys": keys,
    }


def not_checked(check: str, flow: str, evidence: str, why: str) -> CardLine:
    """The line of a check the evidence cannot feed, saying ``why``."""
    return card_line(check, "NOT_CHECKED", 0, f"not checked: {why}", flow, evidence)
