"""Resumed invocations on small hand-built frames: segments and pauses (``flows/_resume.py``),
the calls ADK ran again after a crash and what the journal says, and the latency cliff flow
timing a resumed invocation as segments, judging an end on the last turn, and leaving the
markers' own invocations out."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from incidentkit.findings import Severity
from incidentkit.flows._resume import Cause, RunTwice, calls_run_twice, resumes
from incidentkit.flows.latency_cliff import Frames, latency_findings, triage_latency
from incidentkit.flows.latency_cliff.latency import from_events
from incidentkit.frames import build, empty

T0 = pd.Timestamp("2026-12-06T20:00:00Z")


def at(seconds: float) -> pd.Timestamp:
    return T0 + pd.Timedelta(seconds=seconds)


class Story:
    """Events, calls, responses, root spans and diagnostics lines of one session, in order."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.calls: list[dict[str, Any]] = []
        self.responses: list[dict[str, Any]] = []
        self.roots: list[dict[str, Any]] = []
        self.lines: list[dict[str, Any]] = []

    def event(self, inv: str, t: float, author: str, **fields: Any) -> dict[str, Any]:
        event = {
            "event_id": f"ev-{len(self.events)}",
            "app_name": "shop",
            "user_id": "u1",
            "session_id": "s1",
            "invocation_id": inv,
            "seq": len(self.events),
            "ts": at(t),
            "author": author,
            "kind": "turn",
            **fields,
        }
        self.events.append(event)
        return event

    def user(self, inv: str, t: float) -> Story:
        self.event(inv, t, "user", text="charge order A-1", final_response=True)
        return self

    def answer(self, inv: str, t: float) -> Story:
        self.event(inv, t, "cashier", text="done", final_response=True)
        return self

    def checkpoint(self, inv: str, t: float) -> Story:
        self.event(inv, t, "cashier", kind="checkpoint")
        return self

    def marker(self, inv: str, t: float, kind: str) -> Story:
        self.event(inv, t, "user", kind=kind)
        return self

    def error(self, inv: str, t: float) -> Story:
        self.event(inv, t, "cashier", kind="error", error_code="TimeoutError", final_response=True)
        return self

    def call(self, inv: str, t: float, call_id: str, *, long_running: bool = False) -> Story:
        tool = "request_approval" if long_running else "charge_card"
        ids = (call_id,) if long_running else ()
        event = self.event(
            inv, t, "cashier", long_running_tool_ids=ids, final_response=long_running
        )
        self.calls.append(
            {
                **{k: event[k] for k in ("event_id", "session_id", "invocation_id", "seq", "ts")},
                "author": "cashier",
                "call_id": call_id,
                "name": tool,
                "args": {"order_id": "A-1"},
                "long_running": long_running,
            }
        )
        return self

    def response(self, inv: str, t: float, call_id: str, *, author: str = "cashier") -> Story:
        event = self.event(inv, t, author)
        self.responses.append(
            {
                **{k: event[k] for k in ("event_id", "session_id", "invocation_id", "seq", "ts")},
                "author": author,
                "call_id": call_id,
                "name": "charge_card",
                "response": {"ok": True},
            }
        )
        return self

    def root(self, inv: str, start: float, end: float) -> Story:
        self.roots.append(
            {
                "trace_id": f"{len(self.roots):032x}",
                "span_id": f"{len(self.roots):016x}",
                "name": "invoke_workflow checkout",
                "kind": "invocation",
                "start": at(start),
                "end": at(end),
                "duration_ms": (end - start) * 1000,
                "invocation_id": inv,
                "session_id": "s1",
            }
        )
        return self

    def line(self, kind: str, inv: str, t: float) -> Story:
        self.lines.append(
            {
                "kind": kind,
                "invocation_id": inv,
                "ts": at(t),
                "session_id": "s1",
                "app_name": "shop",
            }
        )
        return self

    def frames(self) -> Frames:
        return Frames(
            events=build("events", self.events),
            calls=build("calls", self.calls) if self.calls else empty("calls"),
            responses=build("responses", self.responses) if self.responses else empty("responses"),
            spans=build("spans", self.roots) if self.roots else empty("spans"),
            diagnostics=build("diagnostics", self.lines) if self.lines else empty("diagnostics"),
        )


def crash(pause: float = 3.0) -> Story:
    """e-1: the worker logs the user message and the charge call, dies (no spans); ADK resumes
    the invocation ``pause`` seconds later, runs the call again and answers."""
    back = 1.2 + pause
    return (
        Story()
        .user("e-1", 0)
        .checkpoint("e-1", 0.05)
        .call("e-1", 0.2, "c1")
        .root("e-1", back, back + 0.5)
        .response("e-1", back + 0.1, "c1")
        .answer("e-1", back + 0.2)
        .checkpoint("e-1", back + 0.25)
    )


def journal(created: float, updated: float, call_id: str = "c1") -> pd.DataFrame:
    return build(
        "journal",
        [
            {
                "key": "charge:A-1",
                "invocation_id": "e-1",
                "function_call_id": call_id,
                "status": "DONE",
                "created_at": at(created),
                "updated_at": at(updated),
            }
        ],
    )


def found(story: Story) -> Any:
    f = story.frames()
    return resumes(f.events, f.calls, f.responses, f.spans, f.diagnostics)


def test_a_crash_resumed_invocation_is_two_segments_and_its_call_ran_twice() -> None:
    got = found(crash())
    pause = got.pauses.iloc[0]
    assert len(got.pauses) == 1 and pause["cause"] == Cause.CRASH_AND_RESUME
    assert (pause["paused_at"], pause["resumed_at"]) == (at(0.2), at(4.2))  # last event, root
    assert "exported none" in pause["detail"]
    row = got.invocations.iloc[0]
    assert (row["invocation_id"], row["segments"], row["cause"]) == ("e-1", 2, "crash_and_resume")
    assert (row["started_at"], row["ended_at"]) == (at(0), at(4.7))
    assert row["pause_ms"] == pytest.approx(4000) and row["active_ms"] == pytest.approx(700)
    f = crash().frames()
    twice = calls_run_twice(got.pauses, f.calls, f.responses, journal(0.3, 4.35)).iloc[0]
    assert (twice["call_id"], twice["tool"], twice["verdict"]) == ("c1", "charge_card", "ran_twice")
    assert (twice["called_at"], twice["resumed_at"]) == (at(0.2), at(4.2))
    assert twice["journal_key"] == "charge:A-1" and twice["journal_status"] == "DONE"
    assert "ran in both processes" in twice["detail"]


@pytest.mark.parametrize(
    ("entry", "verdict", "words"),
    [
        (journal(0.3, 0.4), RunTwice.RAN_ONCE, "the first run only"),
        (journal(4.3, 4.35), RunTwice.RAN_ONCE, "the second run only"),
        (journal(0.3, 4.35, call_id="c-other"), RunTwice.NO_JOURNAL, "no journal entry has"),
        (empty("journal"), RunTwice.NO_JOURNAL, "no journal entry has"),
        (None, RunTwice.NO_JOURNAL, "the evidence has no journal"),
    ],
)
def test_what_the_journal_says_of_a_call_adk_ran_again(
    entry: pd.DataFrame | None, verdict: RunTwice, words: str
) -> None:
    f = crash().frames()
    got = calls_run_twice(found(crash()).pauses, f.calls, f.responses, entry)
    assert got["verdict"].tolist() == [verdict.value]
    assert words in got["detail"].iloc[0]


def test_a_human_approval_is_one_pause_from_the_call_to_the_answer() -> None:
    story = (
        Story()
        .user("e-2", 0)
        .call("e-2", 0.1, "lr-1", long_running=True)
        .checkpoint("e-2", 0.15)
        .root("e-2", 0, 0.2)
        .root("e-2", 4.9, 5.5)  # the person's answer starts the second run
        .response("e-2", 5.0, "lr-1", author="user")
        .answer("e-2", 5.2)
    )
    got = found(story)
    assert len(got.pauses) == 1  # the spans' gap (0.2 to 4.9) is the same pause
    pause = got.pauses.iloc[0]
    assert pause["cause"] == Cause.HUMAN_APPROVAL
    assert (pause["paused_at"], pause["resumed_at"]) == (at(0.1), at(5.0))
    assert "lr-1" in pause["detail"]
    assert got.invocations["segments"].tolist() == [2]
    f = story.frames()
    assert calls_run_twice(got.pauses, f.calls, f.responses, None).empty  # a person answered
    story.roots.clear()  # with no spans at all, the answer alone shows the pause
    assert found(story).pauses["cause"].tolist() == ["human_approval"]


def test_run_starts_of_one_invocation_are_its_segments() -> None:
    story = (
        Story()
        .line("run.start", "e-3", 0)
        .user("e-3", 0.01)
        .call("e-3", 0.2, "c3")
        .line("tool.start", "e-3", 0.25)
        .line("run.start", "e-3", 9)
        .response("e-3", 9.1, "c3")
        .answer("e-3", 9.2)
        .line("run.end", "e-3", 9.3)
    )
    pause = found(story).pauses.iloc[0]
    assert (pause["paused_at"], pause["resumed_at"], pause["cause"]) == (
        at(0.25),
        at(9),
        "crash_and_resume",
    )
    story.root("e-3", 8.99, 9.4)  # the spans see the same crash: still one pause
    both = found(story).pauses
    assert len(both) == 1 and both["paused_at"].iloc[0] == at(0.2)


def test_one_run_is_no_resume() -> None:
    story = (
        Story()
        .user("e-4", 0)
        .answer("e-4", 0.5)
        .checkpoint("e-4", 0.55)  # 50 ms past the root's end: within the clocks' slack
        .root("e-4", 0, 0.5)
        .user("e-5", 1)  # no span of its own (sampled): nothing to tell
        .answer("e-5", 10)
        .marker("m-1", 11, "compaction")  # a marker's own invocation: never resumed
        .marker("m-1", 30, "compaction")
        .root("m-1", 29, 29.5)
    )
    got = found(story)
    assert got.pauses.empty and got.invocations.empty


def test_an_end_is_judged_on_the_last_turn_and_a_marker_is_no_run() -> None:
    story = (
        Story()
        .user("e-1", 0)
        .answer("e-1", 1)
        .checkpoint("e-1", 1.1)  # a resumable app closes every agent with a checkpoint
        .marker("m-1", 2, "compaction")
        .user("e-2", 3)
        .call("e-2", 3.1, "c-first")  # times out: the node stores an error, then retries
        .error("e-2", 3.3)
        .call("e-2", 3.4, "c-second")
        .response("e-2", 3.5, "c-second")
        .answer("e-2", 3.6)
        .user("e-3", 5)
        .call("e-3", 5.1, "c-hung")  # no response, no error: still waiting
    )
    f = story.frames()
    got = from_events(f.events, f.calls, f.responses).set_index("invocation_id")
    assert got.index.tolist() == ["e-1", "e-2", "e-3"]
    assert got["open"].to_dict() == {"e-1": False, "e-2": False, "e-3": True}
    assert got.loc["e-1", "ms"] == pytest.approx(1000)  # first to last turn


def test_the_flow_times_a_resumed_invocation_as_segments() -> None:
    story = crash(pause=3.0)
    story.user("e-9", 10).answer("e-9", 10.4).root("e-9", 10, 10.5)
    report = triage_latency(
        story.frames(), as_of=at(600), client_timeout_s=60, journal=journal(0.3, 4.35)
    )
    assert report.disagreements.empty  # the spans saw only the last segment: no disagreement
    assert report.open.empty
    timed = report.series.set_index("invocation_id")
    assert timed.loc["e-1", "ms"] == pytest.approx(700)  # 4.7 s in all, 4 s of it a pause
    assert timed.loc["e-1", "started_at"] == at(0)
    assert report.resumed["invocation_id"].tolist() == ["e-1"]
    assert report.calls_run_twice["verdict"].tolist() == ["ran_twice"]
    doc = latency_findings(report)
    items = {item.id: item for item in doc.items}
    assert items["latency_cliff/resumed-invocations"].severity is Severity.INFO
    assert items["latency_cliff/calls-run-twice"].severity is Severity.CRITICAL
    assert items["latency_cliff/calls-run-twice"].rows[0]["verdict"] == "ran_twice"
    assert "latency_cliff/source-disagreements" not in items
    assert doc.summary["resumed_invocations"] == 1 and doc.summary["calls_run_twice"] == 1
    assert doc.summary["runs"] == 2 and doc.summary["open_invocations"] == 0


@pytest.mark.parametrize(
    ("entry", "severity"),
    [(None, Severity.WARNING), (journal(0.3, 0.4), Severity.INFO)],
)
def test_the_calls_run_twice_item_is_as_grave_as_the_journal_says(
    entry: pd.DataFrame | None, severity: Severity
) -> None:
    report = triage_latency(crash().frames(), as_of=at(600), journal=entry)
    items = {item.id: item for item in latency_findings(report).items}
    assert items["latency_cliff/calls-run-twice"].severity is severity
