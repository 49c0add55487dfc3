"""ADK 2.x markers in the session flow, on small hand-built frames: each marker line labelled
for what it is, rewound events marked, marker invocations neither counted nor drawn as
invocations, and no overlap from a marker."""

from __future__ import annotations

from typing import Any

import pandas as pd

from incidentkit.flows.common import Frames
from incidentkit.flows.session import dump_text, session_dump, session_findings
from incidentkit.flows.session.swimlane import plot_swimlane
from incidentkit.flows.session.triage import triage_session
from incidentkit.flows.vanished_state.state import SessionRef
from incidentkit.frames import build

SID = "s"
T0 = pd.Timestamp("2026-11-29T14:00:00Z")


def at(seconds: float) -> pd.Timestamp:
    return T0 + pd.Timedelta(seconds=seconds)


def event(n: int, inv: str, second: float, author: str, **fields: Any) -> dict[str, Any]:
    return {
        "event_id": f"e{n}",
        "app_name": "shop",
        "user_id": "u",
        "session_id": SID,
        "invocation_id": inv,
        "seq": n,
        "ts": at(second),
        "author": author,
        **fields,
    }


def marked_session() -> list[dict[str, Any]]:
    """Three invocations; a compaction of i-1 and the start of i-2 (stamped while i-2 runs,
    under its own id), a rewind before i-3 (undoing it), a checkpoint, an error event."""
    return [
        event(0, "i-1", 0, "user", final_response=True),
        event(1, "i-1", 1, "agent", final_response=True, compacted_by="e4"),
        event(2, "i-2", 2, "user", compacted_by="e4"),
        event(3, "i-2", 3, "agent", kind="checkpoint"),
        event(4, "c-1", 3.5, "user", kind="compaction", compaction_start=at(0),
              compaction_end=at(2)),
        event(5, "i-2", 4, "agent", kind="error", error_code="TimeoutError"),
        event(6, "i-2", 5, "agent", final_response=True),
        event(7, "i-3", 6, "user", rewound_by="e9"),
        event(8, "i-3", 7, "agent", final_response=True, rewound_by="e9"),
        event(9, "r-1", 8, "user", kind="rewind", rewind_before="i-3"),
    ]  # fmt: skip


def frames() -> Frames:
    events = build("events", marked_session())
    writes = build(
        "state_writes",
        [{"event_id": "e9", "session_id": SID, "key": "plan", "value": None, "removed": True}],
    )
    return Frames(events=events, state_writes=writes)


def dump() -> pd.DataFrame:
    f = frames()
    return session_dump(f.events, f.calls, f.responses, f.state_writes, SID)


def test_each_marker_is_labelled_for_what_it_is() -> None:
    rows = dump().set_index("event_id")
    assert rows["kind"].tolist() == [
        *("turn", "turn", "turn", "checkpoint", "compaction", "error", "turn"),
        *("turn", "turn", "rewind"),
    ]
    assert rows.loc["e4", "label"] == (
        "compaction of 14:00:00.000Z–14:00:02.000Z: 3 event(s) summarised, 2 covered (a later "
        "summary covers the rest; a summary ADK wrote, not a turn)"
    )
    assert rows.loc["e9", "label"] == (
        "rewind undoing invocation(s) i-3 (rewind_before_invocation_id i-3; not a user turn)"
    )
    assert rows.loc["e3", "label"] == (
        "checkpoint of agent agent (end_of_agent / agent_state; not a turn)"
    )
    assert rows.loc["e5", "label"] == "error with no content: TimeoutError from agent"
    assert rows["label"].isna().sum() == 6  # the turns
    assert rows["rewound_by"].eq("e9").sum() == 2 and rows.loc["e1", "compacted_by"] == "e4"


def test_the_dump_text_names_each_marker_and_marks_the_undone_events() -> None:
    lines = dump_text(dump()).splitlines()
    assert lines[4] == (
        "2026-11-29T14:00:03.500Z inv=c-1 compaction of 14:00:00.000Z–14:00:02.000Z: 3 event(s) "
        "summarised, 2 covered (a later summary covers the rest; a summary ADK wrote, not a turn)"
    )
    assert lines[9] == (
        "2026-11-29T14:00:08.000Z inv=r-1 rewind undoing invocation(s) i-3 "
        "(rewind_before_invocation_id i-3; not a user turn) delta=[plan]"
    )
    assert lines[5].endswith("err=TimeoutError final=false (error with no content: TimeoutError "
                             "from agent)")  # fmt: skip
    assert lines[7].endswith(" final=false rewound_by=e9") and "author=user" in lines[7]
    assert not any("author=user" in line for line in (lines[4], lines[9]))
    assert lines[0].endswith("final=true")  # a turn's line is as it was


def test_a_rewind_that_undid_nothing_says_so() -> None:
    rows = marked_session()
    for row in rows:
        row.pop("rewound_by", None)
    events = build("events", rows)
    shown = session_dump(
        events, build("calls", []), build("responses", []), build("state_writes", []), SID
    )
    assert shown["label"].iloc[-1].startswith("rewind that undid nothing")


def test_marker_invocations_are_no_invocations_and_make_no_overlap() -> None:
    ref = SessionRef("shop", "u", SID)
    report = triage_session(frames(), ref, as_of=at(60))
    assert set(report.ranges["invocation_id"]) == {"i-1", "i-2", "i-3"}
    assert report.overlaps.empty  # the compaction at 3.5 s lies inside i-2
    found = session_findings(report)
    summary = found.summary
    assert summary["invocations"] == 3 and summary["events"] == 10
    assert (summary["compactions"], summary["rewinds"], summary["checkpoints"]) == (1, 1, 1)
    assert summary["rewound_events"] == 2 and summary["overlapping_invocations"] == 0
    (events,) = [item for item in found.items if item.id == "session/events"]
    assert events.title == (
        f"session {SID}: 10 stored event(s) in 3 invocation(s); 1 compaction(s), 1 rewind(s), "
        "1 checkpoint(s), 2 event(s) undone by a rewind"
    )
    assert {"kind", "label", "compacted_by", "rewound_by"} <= set(events.rows[0])
    as_turns = frames()
    turns = Frames(events=as_turns.events.assign(kind="turn"), state_writes=as_turns.state_writes)
    plain = session_findings(triage_session(turns, ref, as_of=at(60)))
    assert plain.summary["invocations"] == 5 and plain.summary["overlapping_invocations"] == 1


def test_the_swimlane_draws_markers_in_their_own_lane_and_no_marker_invocation() -> None:
    report = triage_session(frames(), SessionRef("shop", "u", SID), as_of=at(60))
    ax = plot_swimlane(report.session, report.ranges, set())
    lanes = [label.get_text() for label in ax.get_yticklabels()]
    assert lanes == ["invocations", "user", "agent", "markers"]
    drawn = ax.get_legend()
    assert drawn is not None
    legend = [text.get_text() for text in drawn.get_texts()]
    for shown in ("compacted span", "event: compaction", "event: rewind", "event: rewound"):
        assert shown in legend
    assert "event: checkpoint" in legend and "event: error" in legend
    only_agent = Frames(events=report.session.events.loc[lambda e: e["author"].ne("user")])
    ax = plot_swimlane(only_agent, report.ranges.iloc[0:0], set())
    assert [label.get_text() for label in ax.get_yticklabels()] == ["agent"]
