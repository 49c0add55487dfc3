"""The latency cliff flow's baseline ("was the cliff a deploy?"): the p95 of the minutes
before the 03:10 cliff, from the source the incident's latency comes from, computed where it
lives (DuckDB over the event lines, SQLite or PostgreSQL over the ledger) or in pandas, with
the same numbers both ways and the findings' contract unchanged."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from conftest import pack_without

from incidentkit.errors import ParameterError
from incidentkit.flows import latency_cliff as lc
from incidentkit.simulate import simulate

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
CLIFF = FIXTURES / "latency_cliff"
BEFORE = "2026-11-29T03:05:00Z/2026-11-29T03:09:30Z"  # the support app's traffic before 03:10
APP = "support"


def _run(evidence: Path, **parameters: Any) -> tuple[lc.LatencyReport, dict[str, Any]]:
    incident, settings = lc.setup(evidence, app_name=APP, **parameters)
    report = lc.triage(incident, settings)
    return report, json.loads(lc.findings(report, incident, settings).to_json())


def _same_numbers(engine: lc.LatencyReport, loaded: lc.LatencyReport) -> None:
    a, b = engine.baseline, loaded.baseline
    assert a is not None and b is not None
    assert (a.source, a.runs, a.ended, a.errors) == (b.source, b.runs, b.ended, b.errors)
    for name in ("p50_ms", "p95_ms", "p99_ms"):
        assert getattr(a, name) == pytest.approx(getattr(b, name), abs=1e-3), name
    assert a.ended > 5 and not math.isnan(a.p95_ms)


def test_the_cliff_began_at_the_baselines_level_and_the_contract_holds() -> None:
    plain, without = _run(CLIFF)
    report, findings = _run(CLIFF, baseline=BEFORE)
    assert report.source == "diagnostics"  # a log file: loaded into pandas
    assert report.baseline is not None and report.baseline.ended == 9
    cliff = {item["id"]: item for item in findings["items"]}["latency_cliff/cliff"]
    assert (
        "Baseline, 2026-11-29 03:05 to 2026-11-29 03:09 UTC (loaded into pandas)"
        in (cliff["detail"])
    )
    assert "the change began at the cliff" in cliff["detail"]
    assert any("Check what was deployed" in note for note in report.notes)
    assert [(i["id"], i["rows"]) for i in findings["items"]] == [
        (i["id"], i["rows"]) for i in without["items"]
    ]
    assert plain.baseline is None and "Baseline" not in json.dumps(without)


def test_duckdb_over_the_event_lines_gives_the_pandas_baseline(tmp_path: Path) -> None:
    pack = pack_without(CLIFF, tmp_path, "diagnostics", "spans", "ledger")
    engine, findings = _run(pack, baseline=BEFORE)
    loaded, _ = _run(pack, baseline=BEFORE, baseline_engine=False)
    assert engine.source == "events"
    assert engine.baseline is not None
    assert "(computed in DuckDB over events.jsonl)" in engine.baseline.label
    _same_numbers(engine, loaded)
    assert "DuckDB over events.jsonl" in json.dumps(findings)


def test_a_database_ledger_gives_the_pandas_baseline(
    incident_db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pack = simulate("latency_cliff", tmp_path / "db-pack", into=incident_db_url)
    monkeypatch.setenv("INCIDENT_DB_URL", incident_db_url)
    bare = pack_without(pack, tmp_path, "diagnostics", "spans")
    engine, _ = _run(bare, baseline=BEFORE)
    loaded, _ = _run(bare, baseline=BEFORE, baseline_engine=False)
    assert engine.source == "ledger"
    assert engine.baseline is not None
    assert " over agent_run)" in engine.baseline.label
    assert engine.baseline.label.split("computed in ")[1].split(" ")[0] in ("SQLite", "PostgreSQL")
    _same_numbers(engine, loaded)


def test_baseline_settings_are_checked() -> None:
    with pytest.raises(ParameterError, match="baseline is not a duration"):
        lc.setup(CLIFF, app_name=APP, baseline="yesterday")
    with pytest.raises(ParameterError, match="baseline_engine is not true or false"):
        lc.setup(CLIFF, app_name=APP, baseline="1h", baseline_engine="yes")  # type: ignore[arg-type]
    _, settings = lc.setup(CLIFF, app_name=APP, baseline="1h", baseline_engine=False)
    assert settings.sources["baseline_engine"] == "parameter"
    assert str(settings.baseline).endswith("/2026-11-29T03:16:00.000001+00:00")


@pytest.mark.notebook
def test_the_notebook_compares_the_cliff_with_its_baseline(tmp_path: Path) -> None:
    from conftest import read_run

    _, findings, html = read_run("latency_cliff", CLIFF, tmp_path, app_name=APP, baseline=BEFORE)
    assert "the change began at the cliff" in html
    assert findings["evidence"]["parameters"]["baseline"].startswith("2026-11-29T03:05:00")
