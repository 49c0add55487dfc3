"""The rows the real BigQuery Agent Analytics plugin wrote, read as evidence, against the ADK
store of the very same run (``adk2_world.build_analytics`` and ``build_analytics_markers``).

The plugin's rows are saved as ``bq extract`` writes them (JSON columns as text, and as nested
objects) and as Parquet; each gives the same frames, and those frames tell what the ADK store
tells: the events ADK stored (less what the table never holds), the model calls ADK made, the
invocations its ``max_llm_calls`` stopped. Like the other ADK tests these fail, never skip,
without the adk extra.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd
import pytest

import incidentkit as ik
from incidentkit.cli import main
from incidentkit.evidence import Evidence
from incidentkit.flows.common import frames_of
from incidentkit.flows.runaway.flow import FLOW
from incidentkit.flows.runaway.triage import RunawayReport, triage_runaway
from incidentkit.flows.vanished_state import steps as vanished_state
from incidentkit.sources.events.bigquery_analytics import FORMAT

pytestmark = [pytest.mark.adk, pytest.mark.xdist_group("adk2_worlds")]  # one worker builds them
FRAMES = ("events", "calls", "responses", "state_writes")
AS_OF = pd.Timestamp("2100-01-01", tz="UTC")
VARIANTS = ("agent_events.jsonl", "agent_events.nested.jsonl", "agent_events.parquet")


def manifest(folder: Path, data: str, *, diagnostics: bool = True) -> Path:
    """A manifest reading ``data`` (a file of ``folder``) in [events], and in [diagnostics]."""
    name = f"evidence.{data.replace('.', '-')}.{'both' if diagnostics else 'events'}.toml"
    text = f'title = "BigQuery rows: {data}"\n\n[events]\npath = "{data}"\n'
    if diagnostics:
        text += f'\n[diagnostics]\npath = "{data}"\nformat = "{FORMAT}"\n'
    (folder / name).write_text(text, encoding="utf-8")
    return folder / name


def runaway_report(evidence: Evidence) -> RunawayReport:
    return triage_runaway(frames_of(evidence, FLOW.reads), as_of=AS_OF)


def turns(frame: pd.DataFrame) -> list[tuple[Any, ...]]:
    """Events as the store and the table both tell them: no id (a row without one names the
    plugin's) and no time (the plugin's clock runs a little after ADK's)."""
    columns = ["session_id", "seq", "invocation_id", "author", "kind", "text", "error_code"]
    columns += ["transfer_to_agent", "final_response", "total_tokens"]
    shown = frame[columns].astype(object)
    return [tuple(row) for row in shown.where(shown.notna(), None).itertuples(index=False)]


def test_every_export_gives_the_same_frames(analytics: Any) -> None:
    folder = analytics.analytics.folder
    read = [ik.open_evidence(manifest(folder, data)) for data in VARIANTS]
    for evidence in read:
        assert evidence.rejects.empty
    for name in (*FRAMES, "diagnostics"):
        first = read[0].frame(name).drop(columns=["location", "line"], errors="ignore")
        for other in read[1:]:
            got = other.frame(name).drop(columns=["location", "line"], errors="ignore")
            pd.testing.assert_frame_equal(got, first)


def test_the_rows_are_the_events_adk_stored(analytics: Any) -> None:
    table = ik.open_evidence(manifest(analytics.analytics.folder, VARIANTS[0]))
    store = ik.open_evidence(analytics.runaway.store.manifest)
    assert turns(table.frame("events")) == turns(store.frame("events"))
    stored = set(store.frame("events")["event_id"])
    named = table.frame("events")["event_id"]
    assert named.isin(stored).sum() >= 4  # the rows that name the stored event join to it
    for name, key in (("calls", ["name", "args_key"]), ("responses", ["name", "response"])):
        got, want = table.frame(name), store.frame(name)
        assert got[["invocation_id", *key]].values.tolist() == (
            want[["invocation_id", *key]].values.tolist()
        )
    assert table.frame("calls")["call_id"].isna().all()  # the table keeps no call ids


def test_the_state_writes_are_the_stored_ones_but_the_redacted(analytics: Any) -> None:
    table = ik.open_evidence(manifest(analytics.analytics.folder, VARIANTS[2]))
    store = ik.open_evidence(analytics.runaway.store.manifest)
    columns = ["invocation_id", "author", "key", "scope", "value", "removed"]
    want = store.frame("state_writes")[columns]
    want = want.loc[want["key"].ne("api_key")]  # logged as [REDACTED]: no value
    assert table.frame("state_writes")[columns].values.tolist() == want.values.tolist()
    warned = table.source("events").warnings
    assert "api_key" in " ".join(warned["raw"].dropna())


def test_runaway_counts_what_adk_made_and_finds_the_same_limit_hits(analytics: Any) -> None:
    store = runaway_report(ik.open_evidence(analytics.runaway.store.manifest))
    made = {i.invocation_id: i.model_calls for i in analytics.runaway.invocations}
    for diagnostics in (False, True):
        evidence = ik.open_evidence(
            manifest(analytics.analytics.folder, VARIANTS[0], diagnostics=diagnostics)
        )
        report = runaway_report(evidence)
        counted = report.counted.set_index("invocation_id")
        assert counted["model_calls"].to_dict() == made
        assert counted["source"].eq("diagnostics" if diagnostics else "events").all()
        assert report.disagreements.empty
        assert set(report.hits["invocation_id"]) == set(store.hits["invocation_id"])
        assert analytics.runaway.runaway.invocation_id in set(report.hits["invocation_id"])
        assert report.configured == store.configured


def test_the_diagnostics_are_the_plugin_s_run_times(analytics: Any) -> None:
    evidence = ik.open_evidence(manifest(analytics.analytics.folder, VARIANTS[0]))
    lines = evidence.frame("diagnostics")
    rows = analytics.analytics.rows
    for invocation in analytics.runaway.invocations:
        mine = lines.loc[lines["invocation_id"].eq(invocation.invocation_id)]
        (end,) = mine.loc[mine["kind"].eq("run.end")].itertuples()
        logged = next(
            r["latency_ms"]["total_ms"]
            for r in rows
            if r["invocation_id"] == invocation.invocation_id
            and r["event_type"] in ("INVOCATION_COMPLETED", "INVOCATION_ERROR")
        )
        assert (end.ms, end.llm_calls) == (logged, invocation.model_calls)
        assert end.outcome == ("error" if invocation.limit_hit else "ok")
        assert mine["kind"].eq("run.error").sum() == int(invocation.limit_hit)


def test_markers_reach_the_table_as_checkpoints_only(markers: Any) -> None:
    table = ik.open_evidence(manifest(markers.analytics.folder, VARIANTS[0]))
    store = ik.open_evidence(markers.store.manifest).frame("events")
    events = table.frame("events")
    assert set(events["kind"]) == {"turn", "checkpoint"}
    kept = store.loc[~store["kind"].isin(["compaction", "rewind"])]  # never in the table
    assert kept["kind"].tolist() == events["kind"].tolist()
    assert kept["author"].tolist() == events["author"].tolist()
    checkpoints = events.loc[events["kind"].eq("checkpoint")]
    assert not checkpoints["final_response"].any()
    assert set(checkpoints["event_id"]) <= set(store["event_id"])


def test_inspect_names_the_format_and_reads_every_row(
    analytics: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = analytics.analytics.folder
    for data in (VARIANTS[0], VARIANTS[2]):
        assert main(["inspect", str(manifest(folder, data)), "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["rejects"] == [] and report["all_rejected"] == []
        assert {(f["source"], f["format"], f["how"]) for f in report["formats"]} == {
            ("events", FORMAT, "detected"),
            ("diagnostics", FORMAT, "given"),
        }


def test_a_redacted_key_gets_no_verdict(analytics: Any) -> None:
    path = manifest(analytics.analytics.folder, VARIANTS[0])
    session = analytics.runaway.invocations[0].session_id
    incident, settings = vanished_state.setup(
        path, session_id=session, keys=["api_key", "ticket", "temp:scratch"]
    )
    found = vanished_state.findings(vanished_state.triage(incident, settings), incident, settings)
    limits = found.items[0]
    assert (limits.id, limits.severity) == ("vanished_state/evidence-limits", "INFO")
    assert "api_key" in limits.title and "No verdict on api_key, temp:scratch" in limits.detail
    (keys,) = [item for item in found.items if item.id == "vanished_state/keys"]
    assert [row["key"] for row in keys.rows] == ["ticket"]


@pytest.mark.notebook
def test_run_all_on_the_rows(analytics: Any, w: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "out"
    path = manifest(analytics.analytics.folder, VARIANTS[0])
    argv = ["run", "all", "--evidence", str(path), "--out", str(out), "--quiet"]
    assert main([*argv, "-p", "app_name", w.LIMIT_APP]) == 1  # the runaway needs action
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    ran = {name: flow for name, flow in summary["flows"].items() if flow["error"] is None}
    assert {"runaway", "latency_cliff", "overview"} <= set(ran)
    findings = json.loads((out / "runaway" / "findings.json").read_text(encoding="utf-8"))
    ids = [item["id"] for item in findings["items"]]
    assert ids[0] == "runaway/evidence-limits"
    (hit,) = [item for item in findings["items"] if item["id"] == "runaway/hit-limit"]
    assert analytics.runaway.runaway.invocation_id in {row["invocation_id"] for row in hit["rows"]}


def test_a_baseline_over_the_rows_is_not_pushed_to_duckdb(analytics: Any) -> None:
    """DuckDB's baseline reads ADK event lines: the plugin's rows are loaded as frames."""
    from incidentkit import baselines

    folder = analytics.analytics.folder
    for variant in VARIANTS:
        spec = ik.open_evidence(manifest(folder, variant)).manifest.sources["events"]
        assert not baselines.pushable(spec), variant
