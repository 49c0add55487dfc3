"""The runaway flow on the simulated incident (ADK Java and ADK Python) and on healthy traffic,
step by step and through real papermill runs from files, SQLite and PostgreSQL, against the
pack's truth."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import INCIDENT_DB_PASSWORD, pack_without, read_run

from incidentkit.errors import ParameterError
from incidentkit.findings import Findings
from incidentkit.flows import runaway as ra
from incidentkit.flows.runaway import counts
from incidentkit.manifest import Window
from incidentkit.simulate import simulate

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
RUNAWAY = FIXTURES / "runaway"
HEALTHY = FIXTURES / "healthy"
TRUTH: dict[str, Any] = json.loads((RUNAWAY / "truth.json").read_text())["expected"]
APP = TRUTH["app_name"]
ITEM_FIELDS = {
    "runaway/model-calls": {
        *("invocations", "p50", "p95", "p99", "max", "healthy_p99"),
        *("recommended_max_llm_calls", "configured_max_llm_calls", "source", "sources_agree"),
    },
    "runaway/hit-limit": {"invocation_id", "run_id", "model_calls", "limit", "evidence"},
    "runaway/loops": {
        *("invocation_id", "kind", "agents", "tool", "args", "repeats", "error_string"),
        *("iterations", "model_calls", "hit_limit"),
    },
    "runaway/cost": {"invocation_id", "tokens", "share", "cost"},
}


def _items(findings: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["id"]: item for item in findings["items"]}


def assert_matches_truth(findings: dict[str, Any], *, limit_from: str) -> None:
    """The findings.json of a run on the runaway pack say what truth.json says."""
    items = _items(findings)
    for fid, fields in ITEM_FIELDS.items():
        assert set(items[fid]["rows"][0]) == fields, fid  # the contract, exactly
    [calls] = items["runaway/model-calls"]["rows"]
    assert calls["healthy_p99"] == TRUTH["llm_calls"]["p99"]
    assert calls["recommended_max_llm_calls"] == TRUTH["recommended_max_llm_calls"]
    assert calls["configured_max_llm_calls"] == TRUTH["max_llm_calls"]
    assert calls["max"] == TRUTH["max_llm_calls"]
    assert findings["evidence"]["parameters"]["app_name"] == APP
    assert limit_from in items["runaway/model-calls"]["title"]
    [hit] = items["runaway/hit-limit"]["rows"]
    [expected] = TRUTH["limit_hits"]
    assert (hit["invocation_id"], hit["model_calls"], hit["limit"]) == (
        expected["invocation_id"],
        expected["llm_calls"],
        TRUTH["max_llm_calls"],
    )
    assert hit["run_id"]
    loops = {row["kind"]: row for row in items["runaway/loops"]["rows"]}
    assert set(loops) == {
        "transfer_ping_pong",
        "repeated_identical_call",
        "loop_agent_exit_never_written",
    }
    pong, repeat, loop = (
        loops["transfer_ping_pong"],
        loops["repeated_identical_call"],
        loops["loop_agent_exit_never_written"],
    )
    assert pong["invocation_id"] == TRUTH["ping_pong"]["invocation_id"]
    assert pong["agents"] == sorted(TRUTH["ping_pong"]["agents"])
    assert (pong["tool"], pong["repeats"], pong["hit_limit"]) == (None, None, False)
    want = TRUTH["repeated_call"]
    assert (repeat["invocation_id"], repeat["tool"], repeat["args"], repeat["repeats"]) == (
        want["invocation_id"],
        want["tool"],
        want["args"],
        want["repeats"],
    )
    assert want["error_text"] in repeat["error_string"]
    assert repeat["agents"] == ["stock_agent"]  # the agent that repeats the call
    assert loop["invocation_id"] == TRUTH["loop"]["invocation_id"]
    assert (loop["hit_limit"], loop["model_calls"]) == (True, TRUTH["max_llm_calls"])
    assert loop["iterations"] == TRUTH["max_llm_calls"] // 2
    title = items["runaway/loops"]["title"]
    assert TRUTH["loop"]["agent"] in title and TRUTH["loop"]["exit_key"] in title
    assert "stock_agent called check_stock(" in title
    for fix in ("Ping-pong:", "Repeat:", "Loop:"):  # each kind found has its fix
        assert fix in items["runaway/loops"]["action"]
    hit_title = items["runaway/hit-limit"]["title"]
    assert f"{hit['invocation_id']} (loop_agent_exit_never_written)" in hit_title
    recommended = TRUTH["recommended_max_llm_calls"]
    assert f"set RunConfig maxLlmCalls to {recommended}" in items["runaway/hit-limit"]["action"]
    assert f"Set RunConfig maxLlmCalls to {recommended}" in items["runaway/model-calls"]["action"]
    cost = {row["invocation_id"]: row for row in items["runaway/cost"]["rows"]}
    assert set(cost) == {pong["invocation_id"], repeat["invocation_id"], loop["invocation_id"]}
    assert cost[loop["invocation_id"]]["tokens"] > cost[pong["invocation_id"]]["tokens"] > 0
    assert 0.5 < sum(row["share"] for row in cost.values()) < 1
    assert findings["summary"]["flagged"] == 3


def _steps(evidence: Path | str, **parameters: Any) -> dict[str, Any]:
    incident, settings = ra.setup(evidence, **parameters)
    report = ra.triage(incident, settings)
    return json.loads(ra.findings(report, incident, settings).to_json())


def test_the_steps_on_the_runaway_pack_match_its_truth() -> None:
    findings = _steps(RUNAWAY, app_name=APP)
    assert (findings["flow"], findings["verdict"]) == ("runaway", "ACTION_NEEDED")
    assert_matches_truth(findings, limit_from="the limit error's message")
    settings = findings["evidence"]["parameters"]
    assert settings["loop_exit_keys"] == [TRUTH["loop"]["exit_key"]]
    assert settings["settings_from"]["loop_exit_keys"] == f"[apps.{APP}]"


def test_the_adk_python_pack_hits_the_limit_by_its_stored_error_event(tmp_path: Path) -> None:
    pack = simulate("runaway", tmp_path / "pack", events_format="adk-python")
    findings = _steps(pack, app_name=APP)
    assert_matches_truth(findings, limit_from="the limit error's message")
    [hit] = _items(findings)["runaway/hit-limit"]["rows"]
    assert "error event LlmCallsLimitExceededError" in hit["evidence"]


def test_a_configured_limit_far_above_the_recommendation_needs_action() -> None:
    findings = _steps(HEALTHY, app_name="support", max_llm_calls=500)
    assert findings["verdict"] == "ACTION_NEEDED"
    item = _items(findings)["runaway/model-calls"]
    assert item["severity"] == "WARNING" and "Set RunConfig maxLlmCalls" in item["action"]
    near = _steps(HEALTHY, app_name="support", max_llm_calls=40)  # under 3 x the recommendation
    assert near["verdict"] == "CLEAN"


@pytest.mark.parametrize("app", ["support", "invoicing", "travel", "expenses"])
def test_every_app_of_the_healthy_pack_is_clean(app: str) -> None:
    findings = _steps(HEALTHY, app_name=app)
    assert findings["verdict"] == "CLEAN", [i["id"] for i in findings["items"]]
    assert set(_items(findings)) == {"runaway/model-calls"}
    assert findings["summary"]["flagged"] == 0


def _without(tmp_path: Path, *sections: str) -> Path:
    """A copy of the pack whose manifest leaves ``sections`` out."""
    return pack_without(RUNAWAY, tmp_path, *sections)


def test_without_the_plugin_log_the_events_count_and_the_spans_show_the_hit(
    tmp_path: Path,
) -> None:
    incident, settings = ra.setup(_without(tmp_path, "diagnostics"), app_name=APP)
    report = ra.triage(incident, settings)
    assert report.source == "events"
    assert any("No diagnostics run.end lines" in note for note in report.notes)
    [hit] = report.hits.to_dict("records")
    assert "status ERROR" in hit["evidence"] and "diagnostics" not in hit["evidence"]
    assert hit["model_calls"] == TRUTH["max_llm_calls"]


def test_without_events_no_loop_is_seen_and_the_notes_say_why(tmp_path: Path) -> None:
    findings = _steps(_without(tmp_path, "events", "journal"), app_name=APP)
    items = _items(findings)
    assert "runaway/loops" not in items
    assert len(items["runaway/hit-limit"]["rows"]) == 1
    incident, settings = ra.setup(tmp_path / "pack", app_name=APP)
    assert any("No event log" in note for note in ra.triage(incident, settings).notes)


def test_a_baseline_window_gives_the_distribution_and_the_window_the_rows() -> None:
    whole = "2026-11-29T16:00:00Z/2026-11-29T16:40:00Z"  # the pack's traffic, past as_of too
    findings = _steps(
        RUNAWAY, app_name=APP, as_of="2026-11-29T16:15:00Z", baseline=whole, baseline_engine=False
    )
    items = _items(findings)
    assert "baseline" in items["runaway/model-calls"]["detail"]
    assert "loaded into pandas" in items["runaway/model-calls"]["detail"]
    [calls] = items["runaway/model-calls"]["rows"]
    assert calls["healthy_p99"] == TRUTH["llm_calls"]["p99"]  # the whole pack's traffic
    assert {row["invocation_id"] for row in items["runaway/loops"]["rows"]} == {
        TRUTH["ping_pong"]["invocation_id"],
        TRUTH["loop"]["invocation_id"],
    }  # the repeat started at 16:21, after as_of
    before = _items(
        _steps(
            RUNAWAY,
            app_name=APP,
            as_of="2026-11-29T16:15:00Z",
            baseline="1h",
            baseline_engine=False,
        )
    )
    assert before["runaway/model-calls"]["rows"][0]["invocations"] < calls["invocations"]


def test_a_baseline_in_the_engine_counts_as_the_events_do_but_sees_loops_only_in_the_window() -> (
    None
):
    """DuckDB over events.jsonl: the counts of the model-authored events; the repeat (16:21,
    after as_of) carries no flag the engine can see, so it counts as healthy there."""
    whole = "2026-11-29T16:00:00Z/2026-11-29T16:40:00Z"
    incident, settings = ra.setup(
        RUNAWAY, app_name=APP, as_of="2026-11-29T16:15:00Z", baseline=whole
    )
    engine = ra.triage(incident, settings)
    assert "computed in DuckDB over events.jsonl" in engine.baseline
    base = incident.narrowed(replace(incident.filters, window=Window.parse(*whole.split("/"))))
    by_events = counts.from_events(base.events, base.responses)
    assert sorted(engine.baseline_counted["model_calls"]) == sorted(by_events["model_calls"])
    seen = set(engine.flagged["invocation_id"])
    healthy = by_events.loc[
        by_events["ended"]
        & ~by_events["invocation_id"].isin(seen)
        & by_events["model_calls"].lt(engine.configured)
    ]
    assert TRUTH["repeated_call"]["invocation_id"] in set(healthy["invocation_id"])
    assert engine.healthy_p99 == pytest.approx(np.quantile(healthy["model_calls"], 0.99))
    loaded = ra.triage(
        *ra.setup(
            RUNAWAY,
            app_name=APP,
            as_of="2026-11-29T16:15:00Z",
            baseline=whole,
            baseline_engine=False,
        )
    )
    assert engine.hits.equals(loaded.hits) and engine.loops.equals(loaded.loops)


def test_a_limit_at_the_recommendation_is_kept() -> None:
    recommended = TRUTH["recommended_max_llm_calls"]
    findings = _steps(RUNAWAY, app_name=APP, max_llm_calls=recommended)
    items = _items(findings)
    assert items["runaway/model-calls"]["severity"] == "INFO"  # not far above: nothing to do
    assert "keep the limit" in items["runaway/hit-limit"]["action"]
    [hit] = items["runaway/hit-limit"]["rows"]  # the loop exceeds it; the 9-call loops do not
    assert hit["invocation_id"] == TRUTH["loop"]["invocation_id"]
    assert f"exceed the configured limit {recommended}" in hit["evidence"]


def test_only_the_kinds_found_get_their_fix() -> None:
    """At 16:10 the ping-pong is over and the loop is running; the repeat (16:21) is to come."""
    items = _items(_steps(RUNAWAY, app_name=APP, as_of="2026-11-29T16:10:00Z"))
    assert {row["kind"] for row in items["runaway/loops"]["rows"]} == {
        "transfer_ping_pong",
        "loop_agent_exit_never_written",
    }
    action = items["runaway/loops"]["action"]
    assert "Ping-pong:" in action and "Loop:" in action and "Repeat:" not in action
    assert "runaway/hit-limit" not in items  # the loop has not reached 500 yet


def test_an_app_the_logs_never_name_is_refused_with_the_apps_they_do(tmp_path: Path) -> None:
    pack = _without(tmp_path, "ledger")
    with pytest.raises(
        ParameterError,
        match=rf"app_name 'suport' matches nothing: 0 events, 0 diagnostics lines of app "
        rf"'suport'; the event log and the diagnostics log hold: {APP}\b.*"
        rf"did you mean suport → {APP}\?",
    ):
        ra.setup(pack, app_name="suport")
    assert ra.setup(pack, app_name=APP)[1].app_name == APP


def test_settings_errors_name_the_value_and_the_fix() -> None:
    with pytest.raises(ParameterError, match="baseline is not a duration"):
        ra.setup(RUNAWAY, app_name=APP, baseline="last week")
    with pytest.raises(ParameterError, match="baseline ends before it starts"):
        ra.setup(RUNAWAY, app_name=APP, baseline="2026-11-29T16:00Z/2026-11-28T16:00Z")
    with pytest.raises(ParameterError, match="max_llm_calls is not a whole number"):
        ra.setup(RUNAWAY, app_name=APP, max_llm_calls=-3)
    with pytest.raises(ParameterError, match="loop_exit_keys is not a list"):
        ra.setup(RUNAWAY, app_name=APP, loop_exit_keys=[""])
    with pytest.raises(ParameterError, match="min_repeats is not a whole number of at least 2"):
        ra.setup(RUNAWAY, app_name=APP, min_repeats=1)
    with pytest.raises(ParameterError, match="price_per_1k_tokens is not a positive"):
        ra.setup(RUNAWAY, app_name=APP, price_per_1k_tokens=-1.0)
    _, settings = ra.setup(RUNAWAY, app_name=APP, max_llm_calls=90, min_repeats=5)
    assert (settings.max_llm_calls, settings.min_repeats) == (90, 5)
    assert settings.sources["max_llm_calls"] == "parameter"


def test_money_comes_with_a_price() -> None:
    findings = _steps(RUNAWAY, app_name=APP, price_per_1k_tokens=0.5)
    item = _items(findings)["runaway/cost"]
    assert "at 0.5 per 1k tokens" in item["title"]
    for row in item["rows"]:
        assert row["cost"] == pytest.approx(row["tokens"] / 1000 * 0.5)


@pytest.mark.notebook
def test_the_notebook_on_the_runaway_pack_from_files_matches_truth(tmp_path: Path) -> None:
    code, findings, html = read_run("runaway", RUNAWAY, tmp_path, app_name=APP)
    assert code == 1 and findings["verdict"] == "ACTION_NEEDED"
    assert_matches_truth(findings, limit_from="the limit error's message")
    Findings.from_json(json.dumps(findings))  # the document reads back
    head = html[: html.index('id="Runaway-model-calls"')]  # the first screen: the summary
    for fact in (
        "hit maxLlmCalls 500",
        "review_loop",
        "review:approved",
        "check_stock",
        "try again later",
        "orders_agent, refunds_agent",
        f"{TRUTH['recommended_max_llm_calls']} recommended",
        "tokens",
    ):
        assert fact in head, fact


@pytest.mark.notebook
def test_the_notebook_on_the_runaway_pack_from_a_database_matches_truth(
    incident_db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = incident_db_url
    pack = simulate("runaway", tmp_path / "pack", into=url)
    monkeypatch.setenv("INCIDENT_DB_URL", url)
    code, findings, html = read_run("runaway", pack, tmp_path / "out", app_name=APP)
    assert code == 1
    assert_matches_truth(findings, limit_from="the limit error's message")
    assert INCIDENT_DB_PASSWORD not in html


@pytest.mark.notebook
def test_the_notebook_on_a_healthy_window_is_clean_and_exits_0(tmp_path: Path) -> None:
    code, findings, html = read_run("runaway", HEALTHY, tmp_path, app_name="support")
    assert (code, findings["verdict"]) == (0, "CLEAN")
    assert "No rows" in html


def test_a_baseline_in_a_database_equals_the_one_duckdb_computes_from_the_files(
    incident_db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same pack in SQLite or PostgreSQL: the database computes the baseline, and its
    distribution is DuckDB's over the pack's JSON lines."""
    pack = simulate("runaway", tmp_path / "pack", into=incident_db_url)
    monkeypatch.setenv("INCIDENT_DB_URL", incident_db_url)
    whole = "2026-11-29T16:00:00Z/2026-11-29T16:40:00Z"
    in_db = _steps(pack, app_name=APP, as_of="2026-11-29T16:15:00Z", baseline=whole)
    in_files = _steps(RUNAWAY, app_name=APP, as_of="2026-11-29T16:15:00Z", baseline=whole)
    detail = _items(in_db)["runaway/model-calls"]["detail"]
    assert " over adk_event: model-authored events" in detail
    assert "computed in SQLite" in detail or "computed in PostgreSQL" in detail
    assert (
        "computed in DuckDB over events.jsonl" in _items(in_files)["runaway/model-calls"]["detail"]
    )
    [db_row] = _items(in_db)["runaway/model-calls"]["rows"]
    [file_row] = _items(in_files)["runaway/model-calls"]["rows"]
    assert db_row == file_row


@pytest.mark.notebook
def test_the_notebook_says_where_its_baseline_was_computed(tmp_path: Path) -> None:
    whole = "2026-11-29T16:00:00Z/2026-11-29T16:40:00Z"
    _, found, html = read_run("runaway", RUNAWAY, tmp_path / "a", app_name=APP, baseline=whole)
    assert "computed in DuckDB over events.jsonl" in html
    assert found["evidence"]["parameters"]["baseline_engine"] is True
    _, loaded, _ = read_run(
        "runaway", RUNAWAY, tmp_path / "b", app_name=APP, baseline=whole, baseline_engine=False
    )
    assert loaded["evidence"]["parameters"]["baseline_engine"] is False
    assert "loaded into pandas" in _items(loaded)["runaway/model-calls"]["detail"]


def test_a_window_with_no_row_of_the_app_says_so_on_the_first_screen(tmp_path: Path) -> None:
    from incidentkit.report import summary_html

    pack = _without(tmp_path)
    manifest = pack / "evidence.toml"
    text = manifest.read_text(encoding="utf-8")
    start = text.index("window = ")
    line = text[start : text.index("\n", start)]
    earlier = 'window = { start = "2026-11-28T16:00:00Z", end = "2026-11-28T16:40:00Z" }'
    manifest.write_text(text.replace(line, earlier), encoding="utf-8")
    findings = _steps(pack, app_name=APP)  # a quiet window is no error
    [note] = findings["evidence"]["parameters"]["evidence_notes"]
    assert note.startswith(
        f"the window 2026-11-28T16:00:00.000Z .. 2026-11-28T16:40:00.000Z holds no row of app "
        f"'{APP}' in "
    )
    first = summary_html(Findings.from_json(json.dumps(findings))).partition("<table")[0]
    assert "<b>Note:</b> the window 2026-11-28T16:00:00.000Z" in first
    assert "evidence_notes" not in _steps(RUNAWAY, app_name=APP)["evidence"]["parameters"]
