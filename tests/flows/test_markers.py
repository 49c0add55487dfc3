"""The flows' one view of ADK 2.x markers: which events are turns, which invocation ids are a
marker's own."""

from __future__ import annotations

import pandas as pd

from incidentkit.flows._markers import (
    is_kind,
    is_marker,
    marker_invocations,
    turns,
    without_marker_invocations,
)
from incidentkit.frames import EventKind

KINDS = ["turn", "turn", "compaction", "rewind", "checkpoint", "error", None]
INVOCATIONS = ["e-1", "e-1", "c-1", "r-1", "e-1", "e-2", "e-2"]


def _events(kinds: list[str | None] = KINDS) -> pd.DataFrame:
    return pd.DataFrame(
        {"event_id": [f"ev{i}" for i in range(len(kinds))], "invocation_id": INVOCATIONS}
        | {"kind": pd.Series(kinds, dtype="string")}
    )


def test_markers_are_compactions_rewinds_and_checkpoints_only() -> None:
    events = _events()
    assert is_marker(events).tolist() == [False, False, True, True, True, False, False]
    assert turns(events)["event_id"].tolist() == ["ev0", "ev1", "ev5", "ev6"]


def test_a_missing_kind_is_a_turn() -> None:
    events = _events()
    assert is_kind(events, EventKind.TURN).tolist() == [
        *(True, True, False, False, False, False, True)
    ]
    assert is_kind(events, EventKind.ERROR).tolist() == [False] * 5 + [True, False]
    bare = events.drop(columns="kind")
    assert not is_marker(bare).any()
    assert is_kind(bare, EventKind.TURN).all() and not is_kind(bare, EventKind.ERROR).any()
    assert marker_invocations(bare).empty


def test_only_an_invocation_of_markers_alone_is_a_marker_invocation() -> None:
    events = _events()
    # e-1 holds a checkpoint besides its turns: a user's invocation all the same.
    assert sorted(marker_invocations(events)) == ["c-1", "r-1"]
    runs = pd.DataFrame({"invocation_id": ["e-1", "c-1", "e-2", "r-1", None]})
    kept = without_marker_invocations(runs, events)
    assert kept["invocation_id"].iloc[:2].tolist() == ["e-1", "e-2"]
    assert len(kept) == 3 and pd.isna(kept["invocation_id"].iloc[2])
