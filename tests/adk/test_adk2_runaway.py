"""The runaway flow and the triage card on real google-adk 2.x stores (``adk2_world``), against
what ADK did while it ran: the model calls its agents made (never a compaction, checkpoint or
error event), the summariser's tokens as the compaction cost, the invocations
``max_llm_calls`` stopped (and not the one that made exactly the limit's calls), and the
BigQuery Agent Analytics rows of a run giving the findings its ADK store gives. Like the
other ADK tests these fail, never skip, without the adk extra.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd
import pytest

import incidentkit as ik
from incidentkit.flows import overview as ov
from incidentkit.flows import runaway as ra
from incidentkit.flows.common import frames_of
from incidentkit.flows.runaway.flow import FLOW
from incidentkit.flows.runaway.triage import RunawayReport, triage_runaway
from incidentkit.sources.events.bigquery_analytics import FORMAT

pytestmark = [pytest.mark.adk, pytest.mark.xdist_group("adk2_worlds")]  # one worker builds them
AS_OF = pd.Timestamp("2100-01-01", tz="UTC")
PAUSE = 1.0
"""Seconds between the worker's death and the resume (the resumed run's spans begin well after
the dead worker's last stored call)."""


def report_of(manifest: Path, **options: Any) -> RunawayReport:
    return triage_runaway(frames_of(ik.open_evidence(manifest), FLOW.reads), as_of=AS_OF, **options)


def calls_of(report: RunawayReport) -> dict[str, int]:
    counted = report.counted.set_index("invocation_id")["model_calls"]
    return {str(k): int(v) for k, v in counted.items()}


def findings_of(manifest: Path, **parameters: Any) -> dict[str, Any]:
    incident, settings = ra.setup(manifest, **parameters)
    found = ra.findings(ra.triage(incident, settings), incident, settings).to_dict()
    return {"summary": found["summary"], **{item["id"]: item for item in found["items"]}}


def bigquery(folder: Path, *, diagnostics: bool) -> Path:
    """A manifest reading the plugin's rows (``bq extract`` JSON lines) as the events, and
    as the diagnostics lines when ``diagnostics``."""
    name = f"evidence.runaway.{'both' if diagnostics else 'events'}.toml"
    text = '[events]\npath = "agent_events.jsonl"\n'
    if diagnostics:
        text += f'\n[diagnostics]\npath = "agent_events.jsonl"\nformat = "{FORMAT}"\n'
    (folder / name).write_text(text, encoding="utf-8")
    return folder / name


# --- compaction: the summariser's calls are no model call, its tokens are the compaction cost ---


def test_compaction_counts_adk_s_model_calls_and_invocations(compaction: Any) -> None:
    report = report_of(compaction.store.manifest)
    assert calls_of(report) == dict(compaction.model_calls)
    assert set(report.counted["invocation_id"]) == set(compaction.invocations)
    assert not {c.invocation_id for c in compaction.compactions} & set(
        report.counted["invocation_id"]
    )
    assert report.disagreements.empty and report.hits.empty


def test_compaction_cost_is_the_summaries_usage_and_no_invocation_s(
    compaction: Any, w: ModuleType
) -> None:
    stored = {row["id"]: row["event_data"] for row in compaction.store.events()}
    summaries = [stored[c.event_id] for c in compaction.compactions]
    usage = [s["usage_metadata"] for s in summaries]
    report = report_of(compaction.store.manifest, price_per_1k_tokens=2.0)
    [row] = report.compactions.to_dict("records")
    assert row["session_id"] == compaction.session_id
    assert row["compactions"] == len(compaction.compactions) == compaction.summariser_calls
    assert row["prompt_tokens"] == sum(u["prompt_token_count"] for u in usage)
    assert row["output_tokens"] == sum(u["candidates_token_count"] for u in usage)
    assert row["total_tokens"] == sum(u["total_token_count"] for u in usage)
    assert row["total_tokens"] == compaction.summariser_calls * sum(w.SUMMARY_USAGE)
    assert row["cost"] == pytest.approx(row["total_tokens"] / 1000 * 2.0)
    covered = {e for c in compaction.compactions for e in c.covered_events} - set(stored.keys())
    assert not covered  # every event a summary covered is stored
    raw = {e for c in compaction.compactions for e in c.covered_events} - {
        c.event_id for c in compaction.compactions
    }
    assert row["events_covered"] == len(raw)
    times = [pd.Timestamp(s["timestamp"], unit="s", tz="UTC").round("us") for s in summaries]
    assert (row["first"], row["last"]) == (min(times), max(times))
    agent_tokens = sum(compaction.model_calls.values()) * sum(w.AGENT_USAGE)
    assert report.total_tokens == agent_tokens
    found = findings_of(compaction.store.manifest, price_per_1k_tokens=2.0)
    assert found["summary"]["compaction_tokens"] == row["total_tokens"]
    assert found["summary"]["tokens"] == agent_tokens
    item = found["runaway/compaction-cost"]
    assert item["severity"] == "INFO" and item["rows"][0]["total_tokens"] == row["total_tokens"]


# --- resume: checkpoints are no model call; the dead worker's spans are no final count ----------


def test_resume_counts_adk_s_model_calls_without_the_checkpoints(resume: Any) -> None:
    assert all(resume.checkpoints[i] > 0 for i in resume.model_calls)  # there are checkpoints
    report = report_of(resume.store.manifest)
    assert calls_of(report) == dict(resume.model_calls)
    assert report.disagreements.empty
    assert set(report.sources) == {"events", "spans"}


# --- a retried tool timeout: its error event is no model call -----------------------------------


def test_a_retried_timeout_s_error_event_is_no_model_call(timeout: Any) -> None:
    report = report_of(timeout.store.manifest)
    assert calls_of(report) == dict(timeout.model_calls)
    assert report.disagreements.empty
    steps = report_of(timeout.store.manifest).sequence
    assert "TimeoutError" not in set(steps.loc[steps["model_call"].notna(), "what"])


# --- max_llm_calls: a hit is the refusal, never a count at the limit ----------------------------


def test_the_limit_is_hit_by_exactly_the_invocations_adk_stopped(
    runaway: Any, w: ModuleType
) -> None:
    stopped = {i.invocation_id for i in runaway.invocations if i.limit_hit}
    at_limit = {i.invocation_id for i in runaway.invocations if i.model_calls == w.LIMIT}
    assert at_limit - stopped  # an invocation made exactly the limit's calls and ended well
    report = report_of(runaway.store.manifest)
    assert set(report.hits["invocation_id"]) == stopped
    assert calls_of(report) == {i.invocation_id: i.model_calls for i in runaway.invocations}
    assert report.configured == w.LIMIT
    flagged = report.counted.set_index("invocation_id")["hit_limit"]
    assert set(flagged.index[flagged]) == stopped
    found = findings_of(runaway.store.manifest)
    assert {row["invocation_id"] for row in found["runaway/hit-limit"]["rows"]} == stopped
    assert found["summary"]["hit_limit"] == len(stopped)
    explicit = report_of(runaway.store.manifest, max_llm_calls=w.LIMIT)  # set in the profile
    assert set(explicit.hits["invocation_id"]) == stopped


def _same(report: RunawayReport) -> dict[str, Any]:
    """What the runaway findings rest on, as the table and the store both can tell it."""
    loops = report.loops[["invocation_id", "kind", "tool", "repeats", "error_string"]]
    return {
        "counted": calls_of(report),
        "hits": report.hits[["invocation_id", "model_calls", "limit"]].values.tolist(),
        "loops": loops.astype(object).values.tolist(),
        "configured": report.configured,
        "recommended": report.recommended,
        "tokens": report.total_tokens,
        "cost": report.cost[["invocation_id", "tokens"]].values.tolist(),
    }


@pytest.mark.parametrize("diagnostics", [False, True])
def test_the_table_gives_the_runaway_findings_of_the_store(
    analytics: Any, diagnostics: bool
) -> None:
    store = report_of(analytics.runaway.store.manifest)
    table = report_of(bigquery(analytics.analytics.folder, diagnostics=diagnostics))
    assert _same(table) == _same(store)
    stopped = {i.invocation_id for i in analytics.runaway.invocations if i.limit_hit}
    assert set(table.hits["invocation_id"]) == stopped
    assert table.disagreements.empty
    assert table.source == ("diagnostics" if diagnostics else "events")


# --- the triage card on every world -------------------------------------------------------------


def card_of(manifest: Path) -> dict[str, dict[str, Any]]:
    incident, settings = ov.setup(manifest)
    card = ov.triage(incident, settings).card
    return {
        str(row["check"]): {str(k): v for k, v in row.items()} for row in card.to_dict("records")
    }


def test_the_card_routes_each_world_by_what_adk_did(
    compaction: Any,
    rewind: Any,
    resume: Any,
    timeout: Any,
    runaway: Any,
    analytics: Any,
    markers: Any,
) -> None:
    stopped = {i.invocation_id for i in runaway.invocations if i.limit_hit}
    worlds: Mapping[str, tuple[Path, int, int]] = {  # world: manifest, limit hits, error events
        "compaction": (compaction.store.manifest, 0, 0),
        "rewind": (rewind.store.manifest, 0, 0),
        "resume": (resume.store.manifest, 0, 0),
        "timeout": (timeout.store.manifest, 0, len(timeout.raised)),
        "runaway": (runaway.store.manifest, len(stopped), len(stopped)),
        "analytics": (analytics.runaway.store.manifest, len(stopped), len(stopped)),
        "bigquery": (
            bigquery(analytics.analytics.folder, diagnostics=False),
            len(stopped),
            len(stopped),
        ),
        "markers": (markers.store.manifest, 0, 0),
    }
    for name, (manifest, hits, errors) in worlds.items():
        lines = card_of(manifest)
        over = lines["over-call-limit"]
        assert over["count"] == hits, (name, over["title"])
        assert over["severity"] == ("CRITICAL" if hits else "INFO"), (name, over["title"])
        quiet = lines["quiet-errors"]
        assert quiet["count"] == errors, (name, quiet["title"])
        recovered = errors - hits  # the timeout the agent retried: a run that did not fail
        assert quiet["title"].startswith(
            f"{recovered} event(s) with an error code on runs that did not fail"
        ), (name, quiet["title"])
        assert quiet["severity"] == ("WARNING" if recovered else "INFO"), (name, quiet["title"])
        if hits:
            assert f"of {hits} run(s) maxLlmCalls stopped" in quiet["title"], name
        for check in ("open-past-timeout", "dead-worker", "overlapping-invocations"):
            assert lines[check]["count"] == 0, (name, check, lines[check]["title"])
