"""Property tests: the vectorised event kinds and marker relations agree with a plain
per-event, per-session reading of ADK's rules (the reference below, one event at a time).

Sessions are drawn with events in any row order and any times (ties, missing times, a
compaction whose span is empty or reversed, a rewind before an invocation that is later or
absent, rewinds inside rewinds), so the derivation cannot lean on the order a loader gives.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from incidentkit.frames import TS, EventKind, build
from incidentkit.sources.events import event_kinds

KINDS = [kind.value for kind in EventKind]
INVOCATIONS = ["e-1", "e-2", "e-3", "e-4"]
SESSIONS = [("a", "u", "s1"), ("a", "u", "s2"), ("a", "v", "s1"), ("b", "u", "s1")]
MINUTE = 60_000_000_000

times = st.none() | st.integers(min_value=0, max_value=12)
event = st.fixed_dictionaries(
    {
        "session": st.sampled_from(SESSIONS),
        "invocation": st.sampled_from(INVOCATIONS),
        "kind": st.sampled_from(KINDS),
        "at": times,
        "start": times,
        "end": times,
        "before": st.sampled_from([*INVOCATIONS, "e-gone"]),
    }
)


def _minute(at: int | None) -> pd.Timestamp:
    return pd.NaT if at is None else pd.Timestamp(at * MINUTE, tz="UTC")


def _frame(drawn: list[dict[str, Any]], order: Sequence[int]) -> pd.DataFrame:
    """The drawn events, numbered within their sessions in drawn order, laid out in ``order``."""
    seq: dict[tuple[str, str, str], int] = {}
    rows = []
    for i, e in enumerate(drawn):
        app, user, session = e["session"]
        seq[e["session"]] = seq.get(e["session"], -1) + 1
        compaction, rewind = e["kind"] == "compaction", e["kind"] == "rewind"
        rows.append(
            {
                "event_id": f"ev{i}",
                "app_name": app,
                "user_id": user,
                "session_id": session,
                "invocation_id": e["invocation"],
                "seq": seq[e["session"]],
                "ts": _minute(e["at"]),
                "kind": e["kind"],
                "compaction_start": _minute(e["start"]) if compaction else pd.NaT,
                "compaction_end": _minute(e["end"]) if compaction else pd.NaT,
                "rewind_before": e["before"] if rewind else None,
            }
        )
    frame = build("events", [rows[i] for i in order])
    return frame.astype({"compaction_start": TS, "compaction_end": TS})


def _reference(frame: pd.DataFrame) -> tuple[list[Any], list[Any]]:
    """compacted_by and rewound_by, one session and one event at a time."""
    compacted: dict[str, Any] = {}
    rewound: dict[str, Any] = {}
    for _, session in frame.groupby(["app_name", "user_id", "session_id"]):
        log = session.sort_values("seq").to_dict("records")
        for e in log:
            covering = [
                c
                for c in log
                if c["kind"] == "compaction"
                and c["compaction_start"] is not pd.NaT
                and c["compaction_end"] is not pd.NaT
                and e["ts"] is not pd.NaT
                and c["compaction_start"] <= e["ts"] <= c["compaction_end"]
            ]
            marker = e["kind"] in ("compaction", "rewind", "checkpoint")
            latest = max(covering, key=lambda c: c["seq"]) if covering else None
            compacted[e["event_id"]] = None if marker or latest is None else latest["event_id"]
        # events/_rewind_events.py _apply_rewinds, walking back from the latest event
        first: dict[str, int] = {}
        for i, e in enumerate(log):
            first.setdefault(e["invocation_id"], i)
        i = len(log) - 1
        while i >= 0:
            e = log[i]
            if e["kind"] == "rewind":
                at = first.get(e["rewind_before"])
                if at is not None and at < i:
                    for undone in log[at:i]:
                        rewound[undone["event_id"]] = e["event_id"]
                    i = at
            i -= 1
    ids = frame["event_id"]
    return [compacted.get(x) for x in ids], [rewound.get(x) for x in ids]


def _text(values: Any) -> list[Any]:
    return [None if pd.isna(v) else v for v in pd.Series(values, dtype=object)]


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(event, max_size=24), st.randoms(use_true_random=False))
def test_relations_match_a_per_session_reading_of_adks_rules(
    drawn: list[dict[str, Any]], random: Any
) -> None:
    order = list(range(len(drawn)))
    random.shuffle(order)
    frame = _frame(drawn, order)
    got = event_kinds.relations(frame)
    compacted, rewound = _reference(frame)
    assert _text(got["compacted_by"]) == compacted
    assert _text(got["rewound_by"]) == rewound
    assert str(pd.Series(got["rewound_by"]).dtype) == "str"


RAW_FIELDS = [col for col in event_kinds.RAW if not col.startswith("compaction_")]
raw_event = st.fixed_dictionaries(
    {
        "has_content": st.booleans(),
        "error_code": st.sampled_from([None, "", "TimeoutError"]),
        "has_compaction": st.booleans(),
        "rewind_before": st.sampled_from([None, "", "e-1"]),
        "end_of_agent": st.booleans(),
        "has_agent_state": st.booleans(),
    }
)


def _kind(e: dict[str, Any]) -> str:
    """ADK's markers, tested one event at a time (the precedence of docs/frames.md)."""
    if e["has_compaction"]:
        return "compaction"
    if e["rewind_before"]:
        return "rewind"
    if not e["has_content"] and (e["end_of_agent"] or e["has_agent_state"]):
        return "checkpoint"
    if not e["has_content"] and e["error_code"]:
        return "error"
    return "turn"


@given(st.lists(raw_event, max_size=20))
def test_kinds_match_a_per_event_reading(drawn: list[dict[str, Any]]) -> None:
    raw: dict[str, Any] = {col: [e[col] for e in drawn] for col in RAW_FIELDS}
    raw["compaction_start"] = raw["compaction_end"] = [None] * len(drawn)
    got = event_kinds.kinds(raw)
    kinds = [_kind(e) for e in drawn]
    assert list(got["kind"]) == kinds
    before = [
        e["rewind_before"] if k == "rewind" else None for e, k in zip(drawn, kinds, strict=True)
    ]
    assert _text(got["rewind_before"]) == before
    markers = [k in ("compaction", "rewind", "checkpoint") for k in kinds]
    assert event_kinds.is_marker(got["kind"]).tolist() == markers
    assert np.all(pd.isna(pd.Series(got["compaction_start"])))
