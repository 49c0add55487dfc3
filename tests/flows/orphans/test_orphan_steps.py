from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import incidentkit as ik
from incidentkit.errors import ParameterError
from incidentkit.flows import orphans
from incidentkit.flows.common import log_context, resolve_as_of

CRASH = Path(__file__).resolve().parents[3] / "fixtures" / "crash_recovery"
TEMPLATES = {"sendInvoice": "send-invoice:{invoiceId}"}


def test_empty_as_of_means_the_end_of_the_window() -> None:
    incident = ik.open_evidence(CRASH)
    assert incident.filters.window is not None
    assert resolve_as_of("", incident) == incident.filters.window.end
    assert resolve_as_of("2026-11-29T04:00:00+01:00", incident) == pd.Timestamp(
        "2026-11-29T03:00:00Z"
    )


def test_empty_as_of_without_a_window_is_refused(tmp_path: Path) -> None:
    (tmp_path / "evidence.toml").write_text('[ledger]\npath = "ledger.csv"\n')
    with pytest.raises(ParameterError, match="-p as_of"):
        resolve_as_of("", ik.open_evidence(tmp_path))


def test_the_app_filter_scopes_the_sweep_and_ranks_actions() -> None:
    incident = ik.open_evidence(CRASH, app_name="invoicing")
    sweep = orphans.sweep(incident, terminal_agent="notify_agent", key_templates=TEMPLATES)
    assert set(incident.runs["app_name"]) == {"invoicing"}
    table = orphans.action_table(sweep).data
    kinds = sweep.orphans.set_index("run_id")["action_kind"]
    ranked = [kinds.get(run, "NONE") for run in table["run_id"]]
    first = orphans.URGENCY.index(ranked[0])
    assert first == min(orphans.URGENCY.index(k) for k in ranked if k in orphans.URGENCY)
    assert orphans.most_urgent_run(sweep.orphans) == table["run_id"].iloc[0]


def test_findings_carry_the_incident_title_and_window() -> None:
    incident = ik.open_evidence(CRASH, app_name="invoicing")
    sweep = orphans.sweep(incident, terminal_agent="notify_agent", key_templates=TEMPLATES)
    findings = orphans.findings(sweep, incident)
    assert findings.evidence.title == incident.title
    assert findings.evidence.window is not None
    assert findings.summary["rejects"] == 0


def test_a_narrow_window_still_sees_the_whole_log_of_each_run(tmp_path: Path) -> None:
    """Runs still RUNNING started before the window; their events and journal must be read."""
    import json
    import shutil

    pack = tmp_path / "pack"
    shutil.copytree(CRASH, pack)
    manifest = pack / "evidence.toml"
    text = manifest.read_text()
    manifest.write_text(
        text.replace('start = "2026-11-29T02:30:00.000Z"', 'start = "2026-11-29T03:00:00.500Z"')
    )
    incident = ik.open_evidence(pack, app_name="invoicing")
    assert incident.filters.window is not None
    assert incident.events["ts"].min() >= incident.filters.window.start  # the window cuts
    sweep = orphans.sweep(incident, terminal_agent="notify_agent", key_templates=TEMPLATES)
    truth = json.loads((CRASH / "truth.json").read_text())["expected"]
    classes = sweep.orphans.set_index("run_id")["orphan_class"]
    for run in truth["orphans"]:
        assert classes[run["run_id"]] == run["orphan_class"], run["name"]


def test_the_log_is_read_once_when_the_window_already_covers_every_run() -> None:
    incident = ik.open_evidence(CRASH, app_name="invoicing")
    assert incident.filters.window is not None
    at = incident.filters.window.end
    assert log_context(incident, incident.runs, at) is incident
    earlier = at - pd.Timedelta(minutes=5)  # a sweep before the window ends must not see later
    narrowed = log_context(incident, incident.runs, earlier)
    assert narrowed is not incident
    assert narrowed.events["ts"].max() <= earlier
