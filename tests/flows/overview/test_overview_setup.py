"""The overview flow's settings: the symptom (with the closest one for a typo), the app and
as_of by the rule every flow shares."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from incidentkit.errors import ParameterError
from incidentkit.flows.overview import steps
from incidentkit.flows.overview.card import SYMPTOMS

CRASH = Path(__file__).resolve().parents[3] / "fixtures" / "crash_recovery"


@pytest.mark.parametrize(("typo", "meant"), [("crashed", "crash"), ("Slowness", "slow")])
def test_an_unknown_symptom_gets_the_closest_one(typo: str, meant: str) -> None:
    with pytest.raises(ParameterError, match=rf"did you mean {typo.lower()} → {meant}\?"):
        steps.setup(CRASH, symptom=typo)
    assert set(SYMPTOMS) == {"spinner", "slow", "cost", "forgot", "crash", "errors", "restarts"}
    with pytest.raises(ParameterError, match="give one of spinner, slow"):
        steps.setup(CRASH, symptom="purple")


def test_as_of_follows_the_rule_every_flow_shares() -> None:
    _, settings = steps.setup(CRASH)
    assert settings.as_of == pd.Timestamp("2026-11-29T03:05:00Z")
    assert settings.sources["as_of"] == "the window's end"
    _, stale = steps.setup(CRASH, as_of="2026-12-06T15:00:00Z")
    assert stale.as_of < pd.Timestamp("2026-11-29T03:05:00Z")  # judged at the evidence's end
    assert "ages judged at its end" in stale.sources["as_of"]


def test_an_app_the_evidence_never_names_is_refused_with_the_closest() -> None:
    with pytest.raises(ParameterError, match=r"did you mean invoicng → invoicing\?"):
        steps.setup(CRASH, app_name="invoicng")


def test_a_missing_recording_is_said_once_and_missing_samples_apart() -> None:
    from incidentkit.flows.overview.triage import OverviewReport

    def shown(report: OverviewReport, view: str) -> str:
        return str(steps.table(report, view)._repr_markdown_())

    empty = pd.DataFrame()
    none = OverviewReport(pd.Timestamp("2026-11-29", tz="UTC"), None, empty, empty)
    assert "no `[jfr]` section" in shown(none, "heap") and shown(none, "leaks") == ""
    heap = pd.DataFrame({"recording": ["r.jfr"], "gcs": [4]})
    recorded = OverviewReport(none.as_of, None, empty, empty, heap=heap)
    assert "No old-object samples in the recording" in shown(recorded, "leaks")
