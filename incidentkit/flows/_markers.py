"""ADK 2.x markers as the flows see them: which stored events are turns of the conversation,
and which invocation ids are ADK's bookkeeping rather than a user's request.

A compaction and a rewind are each appended as an event of their own, with a fresh invocation
id, authored ``user`` and without content; a resumable app closes every agent with a
checkpoint (``end_of_agent`` / ``agent_state``). The loaders name them in ``events.kind``
(``sources/events/event_kinds.py``); these helpers are the one place the flows ask. An events frame
without ``kind`` (a frame built by hand, a snapshot made before kinds were) holds turns only.
"""

from __future__ import annotations

from typing import Final

import pandas as pd

from incidentkit.frames import EventKind
from incidentkit.sources.events.event_kinds import MARKERS

MARKER_KINDS: Final = frozenset(str(kind) for kind in MARKERS)
"""``compaction``, ``rewind``, ``checkpoint``: bookkeeping, never a turn nor an answer."""


def is_marker(events: pd.DataFrame) -> pd.Series:
    """Whether each event of ``events`` is a marker (a compaction, a rewind, a checkpoint)."""
    if "kind" not in events:
        return pd.Series(False, index=events.index, dtype=bool)
    return events["kind"].isin(MARKER_KINDS).astype(bool)


def is_kind(events: pd.DataFrame, kind: EventKind) -> pd.Series:
    """Whether each event of ``events`` is of ``kind`` (absent ``kind`` column: a turn)."""
    if "kind" not in events:
        return pd.Series(kind is EventKind.TURN, index=events.index, dtype=bool)
    return events["kind"].fillna(EventKind.TURN.value).eq(kind.value).astype(bool)


def turns(events: pd.DataFrame) -> pd.DataFrame:
    """``events`` without its markers (error events stay: they belong to their invocation)."""
    return events.loc[~is_marker(events)]


def marker_invocations(events: pd.DataFrame) -> pd.Index:
    """Invocation ids that hold markers and nothing else: a compaction's or a rewind's own id,
    never an invocation a user started."""
    named = events.loc[events["invocation_id"].notna()]
    if named.empty:
        return pd.Index([], dtype=object)
    only = is_marker(named).groupby(named["invocation_id"], sort=False).all()
    found: pd.Index = pd.Index(only.index[only.to_numpy(dtype=bool)], dtype=object)
    return found


def without_marker_invocations(
    frame: pd.DataFrame, events: pd.DataFrame, column: str = "invocation_id"
) -> pd.DataFrame:
    """``frame`` without the rows whose ``column`` is a marker's own invocation id."""
    return frame.loc[~frame[column].isin(marker_invocations(events))]
