"""``incidentkit demo``: every flow on every bundled incident, and pages whose every link opens
a file; ``postmortem`` and ``actions`` on its folders through the command line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from incidentkit.cli import main
from incidentkit.demo import demo_packs, pack_parameters
from incidentkit.errors import ParameterError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
pytestmark = pytest.mark.xdist_group("demo")  # one worker builds the shared demo


@pytest.fixture
def demo(demo_out: Path) -> Path:
    """The demo's folder (conftest's ``demo_out``, built once): these tests only read it."""
    return demo_out


def links(page: Path) -> list[str]:
    return re.findall(r'href="([^"#]+)"', page.read_text(encoding="utf-8"))


@pytest.mark.notebook
def test_every_link_of_every_page_opens_a_file(demo: Path) -> None:
    pages = [
        demo / "index.html",
        *(demo / pack / "index.html" for pack in demo_packs(FIXTURES).names),
    ]
    for page in pages:
        found = links(page)
        assert found, page
        for link in found:
            assert (page.parent / link).is_file(), (page, link)


@pytest.mark.notebook
def test_every_flow_the_packs_support_ran_to_a_verdict(demo: Path) -> None:
    for pack in demo_packs(FIXTURES).names:
        summary = json.loads((demo / pack / "summary.json").read_text())
        failed = {f: run["error"] for f, run in summary["flows"].items() if run["exit_code"] > 2}
        assert not failed, (pack, failed)
        assert "overview" in summary["flows"], pack
    vanished = json.loads((demo / "vanished_state" / "summary.json").read_text())
    assert {"vanished_state", "session"} <= set(vanished["flows"])  # its session was given


@pytest.mark.notebook
def test_the_overview_links_each_line_to_the_report_run_all_wrote(demo: Path) -> None:
    findings = json.loads((demo / "latency_cliff" / "overview" / "findings.json").read_text())
    card = next(item for item in findings["items"] if item["id"] == "overview/card")
    linked = [row for row in card["rows"] if row["link"]]
    assert {row["flow"] for row in linked} >= {"latency_cliff", "runaway", "orphans"}
    for row in linked:
        assert (demo / "latency_cliff" / "overview" / row["link"]).is_file(), row["link"]
        assert row["report_verdict"] in ("CLEAN", "ACTION_NEEDED", "INCOMPLETE_EVIDENCE")


@pytest.mark.notebook
def test_postmortem_and_actions_read_a_run_all_folder(
    demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["postmortem", str(demo / "latency_cliff")]) == 0
    draft = capsys.readouterr().out
    assert draft.startswith("# Postmortem draft") and "## Timeline" in draft
    assert "2026-11-29T03:10:00.000Z" in draft  # the cliff, from the findings
    assert main(["actions", str(demo / "crash_recovery"), "--kind", "REDRIVE"]) == 0
    rows = capsys.readouterr().out.strip().splitlines()
    expected = json.loads((FIXTURES / "crash_recovery" / "truth.json").read_text())["expected"]
    redrive = [o for o in expected["orphans"] if str(o.get("action")).upper() == "REDRIVE"]
    assert len(rows) == len(redrive) + 1  # a header and a row per run to re-drive
    assert main(["actions", str(demo / "crash_recovery"), "--kind", "NOPE"]) == 3


def test_each_pack_names_its_app_and_the_vanished_pack_its_session() -> None:
    packs = demo_packs(FIXTURES)
    crash = pack_parameters(FIXTURES / "crash_recovery", packs.apps.get("crash_recovery"))
    assert crash == {"app_name": "invoicing"}
    assert all((FIXTURES / pack / "evidence.toml").is_file() for pack in packs.names)
    vanished = pack_parameters(FIXTURES / "vanished_state")
    truth = json.loads((FIXTURES / "vanished_state" / "truth.json").read_text())["expected"]
    assert vanished["session_id"] == truth["session_id"]
    assert json.loads(vanished["keys"]) == [k["key"] for k in truth["keys"]]


def test_the_demo_page_takes_the_card_line_from_the_flow_that_navigates(tmp_path: Path) -> None:
    """The registry says which flow's top finding is the triage card's first line."""
    from incidentkit.demo import _told
    from incidentkit.flows import FLOWS

    [card] = [n for n, f in FLOWS.items() if f.postmortem and f.postmortem.navigates]
    flows = {name: {"top_finding": {"title": f"{name} says"}} for name in FLOWS}
    (tmp_path / "summary.json").write_text(json.dumps({"title": "T", "flows": flows}))
    assert _told(tmp_path) == ("T", f"{card} says")


def test_a_missing_or_misshapen_pack_list_says_which_file(tmp_path: Path) -> None:
    with pytest.raises(ParameterError, match="cannot be read"):
        demo_packs(tmp_path)
    (tmp_path / "demo.toml").write_text('packs = "crash_recovery"\n', encoding="utf-8")
    with pytest.raises(ParameterError, match="not a list of pack names"):
        demo_packs(tmp_path)
