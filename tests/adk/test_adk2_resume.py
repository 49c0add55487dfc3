"""Resumed invocations, retried timeouts and ADK 2.x markers in the latency cliff and orphans
flows, on the stores real google-adk 2.x writes.

``adk2_world.build_resume`` SIGKILLs a resumable app's worker mid-tool in a child process and
resumes the invocation here ``PAUSE`` seconds later (ADK runs the call again with the same
function-call id; ``charge_card``'s own log and journal record both runs), then pauses an
invocation on a long-running approval answered ``PAUSE`` seconds later. The flows must time
each as segments with its pause explained (a crash, a person), report the charge as run twice
(and say when no journal can tell), and find no disagreement, open invocation or orphan; on
the retried timeout and the compacted and rewound sessions, count the runs ADK ran.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd
import pytest

from incidentkit.findings import Findings
from incidentkit.flows import latency_cliff, orphans
from incidentkit.flows.latency_cliff import LatencyReport
from incidentkit.flows.latency_cliff.latency import from_events

from .conftest import RESUME_PAUSE

pytestmark = [pytest.mark.adk, pytest.mark.xdist_group("adk2_worlds")]  # one worker builds them

PAUSE = RESUME_PAUSE
"""Seconds between the kill and the resume, and before the approval's answer: more than the
2 s at which ``latency_cliff`` compares sources."""


def latency(manifest: Path) -> tuple[LatencyReport, Findings]:
    evidence, settings = latency_cliff.setup(manifest)
    report = latency_cliff.triage(evidence, settings)
    return report, latency_cliff.findings(report, evidence, settings)


@pytest.fixture(scope="module")
def resumed(resume: Any) -> tuple[LatencyReport, Findings]:
    return latency(resume.store.manifest)


def items(found: Findings) -> dict[str, Any]:
    return {item.id: item for item in found.items}


def stamp(epoch: float) -> pd.Timestamp:
    return pd.Timestamp(epoch, unit="s", tz="UTC")


def test_the_crash_resumed_invocation_is_two_segments_and_the_pause_holds_the_crash(
    w: ModuleType, resume: Any, resumed: tuple[LatencyReport, Findings]
) -> None:
    report, _ = resumed
    first, again = resume.runs  # charge_card's own log: the worker's run, then this process's
    assert first.pid == resume.worker_pid != again.pid
    row = report.resumed.set_index("invocation_id").loc[resume.resumed]
    assert (row["segments"], row["cause"]) == (2, "crash_and_resume")
    pause = report.pauses.set_index("invocation_id").loc[resume.resumed]
    # The worker ran the tool and was killed inside the pause; ADK resumed it after.
    assert pause["paused_at"] <= stamp(first.at) <= stamp(resume.killed_at) <= pause["resumed_at"]
    assert pause["resumed_at"] <= stamp(again.at)
    assert pause["pause_ms"] >= PAUSE * 1000
    assert row["started_at"] <= stamp(first.at) and row["ended_at"] >= stamp(again.at)
    assert row["active_ms"] < PAUSE * 1000  # the pause is no latency
    timed = report.series.set_index("invocation_id").loc[resume.resumed]
    assert timed["ms"] == pytest.approx(row["active_ms"]) and not timed["open"]


def test_the_approval_is_a_pause_from_the_call_to_the_persons_answer(
    resume: Any, resumed: tuple[LatencyReport, Findings]
) -> None:
    report, found = resumed
    row = report.resumed.set_index("invocation_id").loc[resume.approval]
    assert (row["segments"], row["cause"]) == (2, "human_approval")
    assert resume.approval_call_id in row["detail"]
    assert row["pause_ms"] >= PAUSE * 1000  # the person took PAUSE seconds
    rows = items(found)["latency_cliff/resumed-invocations"].rows
    assert {r["invocation_id"]: r["cause"] for r in rows} == {
        resume.resumed: "crash_and_resume",
        resume.approval: "human_approval",
    }


def test_the_charge_adk_ran_twice_is_a_possible_duplicate_by_the_journal(
    w: ModuleType, resume: Any, resumed: tuple[LatencyReport, Findings]
) -> None:
    _, found = resumed
    item = items(found)["latency_cliff/calls-run-twice"]
    assert item.severity == "CRITICAL"
    assert {run.call_id for run in resume.runs} == {resume.charge_call_id}  # same id, twice
    (row,) = item.rows
    assert (row["invocation_id"], row["call_id"], row["tool"]) == (
        resume.resumed,
        resume.charge_call_id,
        "charge_card",
    )
    assert row["verdict"] == "ran_twice" and row["journal_key"] == w.CHARGE_KEY
    first, again = resume.runs
    assert stamp(first.at) <= pd.Timestamp(row["resumed_at"]) <= stamp(again.at)
    assert found.summary["calls_run_twice"] == 1 and found.summary["resumed_invocations"] == 2


def test_no_disagreement_no_open_invocation_no_orphan_and_the_runs_adk_ran(
    resume: Any, resumed: tuple[LatencyReport, Findings]
) -> None:
    _, found = resumed
    summary = found.summary
    assert summary["source_disagreements"] == 0
    assert summary["open_invocations"] == 0 and summary["orphaned_invocations"] == 0
    assert summary["runs"] == len(resume.model_calls)  # the two invocations ADK ran


def test_without_a_journal_nothing_tells(resume: Any, tmp_path: Path) -> None:
    folder = tmp_path / "resume"
    shutil.copytree(resume.store.folder, folder)
    manifest = folder / "evidence.toml"
    text = manifest.read_text(encoding="utf-8")
    manifest.write_text(text[: text.index("[journal]")], encoding="utf-8")
    _, found = latency(manifest)
    item = items(found)["latency_cliff/calls-run-twice"]
    assert item.severity == "WARNING"
    assert [r["verdict"] for r in item.rows] == ["no_journal"]
    assert "has no journal" in item.rows[0]["detail"]
    (folder / "journal.db").write_bytes(b"")  # a journal named but unreadable: a note, no stop
    manifest.write_text(text, encoding="utf-8")
    report, found = latency(manifest)
    assert [r["verdict"] for r in items(found)["latency_cliff/calls-run-twice"].rows] == [
        "no_journal"
    ]
    assert any("journal could not be read" in note for note in report.notes)


def test_the_orphans_flow_reports_the_same_call_and_no_orphan(w: ModuleType, resume: Any) -> None:
    evidence, settings = orphans.setup(
        resume.store.manifest,
        terminal_agent=w.NOTIFIER,
        key_templates={"charge_card": "charge:{order_id}"},
    )
    found = orphans.findings(orphans.triage(evidence, settings), evidence, settings)
    (row,) = items(found)["orphans/calls-run-twice"].rows
    assert (row["call_id"], row["verdict"]) == (resume.charge_call_id, "ran_twice")
    assert found.summary["orphans"] == 0 and found.summary["calls_run_twice"] == 1


def test_a_retried_timeout_is_no_open_invocation(w: ModuleType, timeout: Any) -> None:
    _, found = latency(timeout.store.manifest)
    assert timeout.tool_runs.count("CHF") == 2 and timeout.raised == ("TimeoutError",)
    assert found.summary["runs"] == len(timeout.model_calls)
    assert found.summary["open_invocations"] == 0 and found.summary["source_disagreements"] == 0
    assert found.summary["resumed_invocations"] == 0 and found.summary["calls_run_twice"] == 0
    evidence, _ = latency_cliff.setup(timeout.store.manifest)
    logged = from_events(evidence.events, evidence.calls, evidence.responses)
    assert set(logged["invocation_id"]) == {timeout.healthy, timeout.retried}
    assert not logged["open"].any()  # the unanswered first call was answered by its error
    evidence, settings = orphans.setup(
        timeout.store.manifest, terminal_agent=w.TIMEOUT_AGENT, key_templates={"x": "x:{y}"}
    )
    swept = orphans.findings(orphans.triage(evidence, settings), evidence, settings)
    assert swept.summary["orphans"] == 0 and swept.summary["calls_run_twice"] == 0


def test_markers_are_no_runs(compaction: Any, rewind: Any) -> None:
    _, found = latency(compaction.store.manifest)
    assert found.summary["runs"] == len(compaction.invocations)  # ADK's 12, not 16
    assert found.summary["source_disagreements"] == 0 and found.summary["open_invocations"] == 0
    _, found = latency(rewind.store.manifest)
    assert found.summary["runs"] == sum(len(ids) for ids in rewind.invocations.values())
    assert found.summary["source_disagreements"] == 0 and found.summary["open_invocations"] == 0
