from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

import incidentkit as ik
from incidentkit.errors import ParameterError
from incidentkit.flows import orphans
from incidentkit.flows.common import log_context, resolve_as_of

CRASH = Path(__file__).resolve().parents[3] / "fixtures" / "crash_recovery"
TEMPLATES = {"sendInvoice": "send-invoice:{invoiceId}"}


def _pack(tmp_path: Path, edit: Callable[[str], str]) -> Path:
    """A copy of crash_recovery with its manifest edited."""
    pack = tmp_path / "pack"
    shutil.copytree(CRASH, pack)
    manifest = pack / "evidence.toml"
    manifest.write_text(edit(manifest.read_text(encoding="utf-8")), encoding="utf-8")
    return pack


def test_settings_come_from_the_app_profile_and_parameters_win() -> None:
    _, settings = orphans.setup(CRASH, app_name="invoicing")
    assert settings.app_name == "invoicing"
    assert settings.terminal_agent == "notify_agent"
    assert settings.key_templates == TEMPLATES
    assert settings.attempts_cap == 3
    assert settings.sources["terminal_agent"] == "[apps.invoicing]"
    assert settings.sources["attempts_cap"] == "default"
    assert settings.sources["as_of"] == "the window's end"
    _, given = orphans.setup(CRASH, app_name="invoicing", terminal_agent="x", attempts_cap=5)
    assert (given.terminal_agent, given.attempts_cap) == ("x", 5)
    assert given.sources["terminal_agent"] == given.sources["attempts_cap"] == "parameter"
    table = given.table()
    assert table.columns.tolist() == ["setting", "value", "from"]
    assert table.iloc[0].tolist() == ["app_name", "invoicing", "parameter"]


def test_the_app_comes_from_the_manifest_else_the_ledger_else_an_error(tmp_path: Path) -> None:
    apps = ", ".join(sorted(pd.read_csv(CRASH / "ledger.csv")["app_name"].unique()))
    listed = rf"the ledger holds {apps}; give -p app_name"
    with pytest.raises(ParameterError, match=listed):
        orphans.setup(CRASH)
    pinned = _pack(tmp_path / "a", lambda text: 'app_name = "invoicing"\n' + text)
    _, settings = orphans.setup(pinned)
    assert (settings.app_name, settings.sources["app_name"]) == ("invoicing", "manifest app_name")
    lines = (CRASH / "ledger.csv").read_text(encoding="utf-8").splitlines()
    one = _pack(tmp_path / "b", lambda text: text)
    kept = [lines[0], *(line for line in lines[1:] if ",invoicing," in line)]
    (one / "ledger.csv").write_text("\n".join(kept) + "\n", encoding="utf-8")
    _, settings = orphans.setup(one)
    assert settings.sources["app_name"] == "the only app in the ledger"


def test_a_missing_setting_names_the_key_and_the_section(tmp_path: Path) -> None:
    pack = _pack(tmp_path, lambda text: text.replace('terminal_agent = "notify_agent"\n', ""))
    with pytest.raises(
        ParameterError,
        match=r"needs terminal_agent for app 'invoicing'.*"
        r"\[apps\.invoicing\]",
    ):
        orphans.setup(pack, app_name="invoicing")


def test_an_app_the_ledger_does_not_hold_is_named_with_the_ones_it_does() -> None:
    with pytest.raises(
        ParameterError, match=r"app_name 'billing' matches nothing.* hold: expenses, invoicing"
    ):
        orphans.setup(CRASH, app_name="billing")


def test_an_empty_evidence_parameter_says_what_to_give() -> None:
    with pytest.raises(ParameterError, match="evidence is empty"):
        orphans.setup("")


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
    incident, settings = orphans.setup(CRASH, app_name="invoicing")
    sweep = orphans.triage(incident, settings)
    assert set(incident.runs["app_name"]) == {"invoicing"}
    table = orphans.action_table(sweep).data
    kinds = sweep.orphans.set_index("run_id")["action_kind"]
    ranked = [kinds.get(run, "NONE") for run in table["run_id"]]
    first = orphans.URGENCY.index(ranked[0])
    assert first == min(orphans.URGENCY.index(k) for k in ranked if k in orphans.URGENCY)
    assert orphans.most_urgent_run(sweep.orphans) == table["run_id"].iloc[0]


def test_findings_carry_the_incident_title_and_window() -> None:
    incident, settings = orphans.setup(CRASH, app_name="invoicing")
    sweep = orphans.triage(incident, settings)
    findings = orphans.findings(sweep, incident, settings)
    assert findings.evidence.title == incident.title
    assert findings.evidence.window is not None
    assert findings.summary["rejects"] == 0


def test_a_narrow_window_still_sees_the_whole_log_of_each_run(tmp_path: Path) -> None:
    """Runs still RUNNING started before the window; their events and journal must be read."""
    pack = _pack(
        tmp_path,
        lambda text: text.replace(
            'start = "2026-11-29T02:30:00.000Z"', 'start = "2026-11-29T03:00:00.500Z"'
        ),
    )
    incident, settings = orphans.setup(pack, app_name="invoicing")
    assert incident.filters.window is not None
    assert incident.events["ts"].min() >= incident.filters.window.start  # the window cuts
    sweep = orphans.triage(incident, settings)
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


def test_a_window_before_the_evidence_says_so_on_the_first_screen(tmp_path: Path) -> None:
    fixed = 'window = { start = "2026-11-29T02:30:00.000Z", end = "2026-11-29T03:05:00.000Z" }'
    later = 'window = { start = "2026-11-28T02:30:00.000Z", end = "2026-11-28T03:05:00.000Z" }'
    pack = _pack(tmp_path, lambda text: text.replace(fixed, later))
    assert (pack / "evidence.toml").read_text(encoding="utf-8").count(later) == 1
    evidence, settings = orphans.setup(pack, app_name="invoicing")
    found = orphans.findings(orphans.triage(evidence, settings), evidence, settings)
    notes = found.evidence.parameters["evidence_notes"]
    assert notes and "the window" in notes[0]
