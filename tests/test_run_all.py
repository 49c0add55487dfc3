"""``incidentkit run all``: every flow the evidence supports, in parallel, with an index.

One shared ``run all`` (three notebooks) backs most tests; the flow registry is narrowed to the
five flows whose notebooks these tests know, so a flow being written elsewhere cannot change
them (the mechanism reads FLOWS, whatever it holds).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from incidentkit import batch
from incidentkit.cli import main
from incidentkit.findings import Findings
from incidentkit.flows import FLOWS

ROOT = Path(__file__).resolve().parent.parent
CRASH = ROOT / "fixtures" / "crash_recovery"
HEALTHY = ROOT / "fixtures" / "healthy"
KNOWN = ("orphans", "latency_cliff", "runaway", "vanished_state", "session")
pytestmark = [pytest.mark.notebook, pytest.mark.xdist_group("run_all")]  # one shared run


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    """``run all`` on crash_recovery whose window is relative (the same 35 minutes, given as
    ``last``), judged at its end: orphans, latency_cliff and runaway run, the two one-session
    flows are skipped (no session_id)."""
    base = tmp_path_factory.mktemp("run_all")
    pack = base / "pack"
    shutil.copytree(CRASH, pack)
    manifest = pack / "evidence.toml"
    text = manifest.read_text(encoding="utf-8")
    fixed = 'window = { start = "2026-11-29T02:30:00.000Z", end = "2026-11-29T03:05:00.000Z" }'
    assert fixed in text
    manifest.write_text(text.replace(fixed, 'window = { last = "35min" }'), encoding="utf-8")
    out = base / "out"
    argv = [
        *("run", "all", "--evidence", str(pack), "--out", str(out)),
        *("--as-of", "2026-11-29T03:05:00Z", "-p", "app_name", "invoicing"),
        *("-p", "attempts_cap", "3", "--quiet"),
    ]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(batch, "FLOWS", {name: FLOWS[name] for name in KNOWN})
        code = main(argv)
    yield code, out


def summary_of(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    return data


def test_the_exit_code_is_the_worst_flow_s(shared: tuple[int, Path]) -> None:
    code, out = shared
    summary = summary_of(out)
    assert summary["schema"] == "incidentkit.run-all/v1"
    assert set(summary["flows"]) == {"orphans", "latency_cliff", "runaway"}
    codes = {name: flow["exit_code"] for name, flow in summary["flows"].items()}
    assert codes["orphans"] == 1  # the crash leaves orphans to act on
    assert code == summary["exit_code"] == max(codes.values())
    for flow in summary["flows"].values():
        verdict = Findings.read(out / flow["findings"]).verdict.value
        assert flow["verdict"] == verdict
        assert (
            flow["exit_code"] == {"CLEAN": 0, "ACTION_NEEDED": 1, "INCOMPLETE_EVIDENCE": 2}[verdict]
        )


def test_flows_without_their_evidence_or_parameter_are_skipped_with_the_reason(
    shared: tuple[int, Path],
) -> None:
    _, out = shared
    skipped = summary_of(out)["skipped"]
    assert skipped == {"vanished_state": "needs -p session_id", "session": "needs -p session_id"}
    assert not (out / "session").exists()


def test_each_flow_writes_its_files_under_out_and_the_summary_names_them_relative(
    shared: tuple[int, Path],
) -> None:
    _, out = shared
    for name, flow in summary_of(out)["flows"].items():
        assert flow["report"] == f"{name}/{name}.html"
        assert flow["findings"] == f"{name}/findings.json"
        assert flow["notebook"] == f"{name}/{name}.ipynb"
        for kind in ("report", "findings", "notebook"):
            assert (out / flow[kind]).is_file()
        assert flow["error"] is None and flow["seconds"] > 0


def test_a_parameter_goes_only_to_the_flows_that_declare_it(shared: tuple[int, Path]) -> None:
    _, out = shared
    flows = summary_of(out)["flows"]
    assert flows["orphans"]["parameters"]["attempts_cap"] == "3"
    assert "attempts_cap" not in flows["runaway"]["parameters"]
    for flow in flows.values():  # --as-of and app_name go to every flow (they all declare them)
        assert flow["parameters"]["as_of"] == "2026-11-29T03:05:00Z"
        assert flow["parameters"]["app_name"] == "invoicing"


def test_a_relative_window_ends_at_the_run_s_as_of_inside_each_flow(
    shared: tuple[int, Path],
) -> None:
    _, out = shared
    summary = summary_of(out)
    assert summary["as_of"] == "2026-11-29T03:05:00Z"
    assert summary["window"] == ["2026-11-29T02:30:00Z", "2026-11-29T03:05:00Z"]
    assert summary["stale"] is None  # the evidence reaches as_of
    findings = json.loads((out / "orphans" / "findings.json").read_text(encoding="utf-8"))
    assert findings["evidence"]["window"] == ["2026-11-29T02:30:00Z", "2026-11-29T03:05:00Z"]
    truth = json.loads((CRASH / "truth.json").read_text(encoding="utf-8"))
    assert findings["summary"]["orphans"] == len(truth["expected"]["orphans"])
    assert not any(item["id"] == "run/stale-evidence" for item in findings["items"])


def test_the_index_links_every_flow_with_its_verdict_and_top_finding(
    shared: tuple[int, Path],
) -> None:
    import html

    _, out = shared
    page = (out / "index.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page
    for name, flow in summary_of(out)["flows"].items():
        assert f'href="{name}/{name}.html"' in page
        assert f'href="{name}/findings.json"' in page
        assert flow["verdict"] in page
        assert html.escape(flow["top_finding"]["title"]) in page
    assert "needs -p session_id" in page
    orphans = summary_of(out)["flows"]["orphans"]["top_finding"]
    assert orphans["severity"] == "CRITICAL"


def test_an_ambiguous_app_is_a_failed_flow_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(batch, "FLOWS", {"orphans": FLOWS["orphans"]})
    out = tmp_path / "out"
    assert main(["run", "all", "--evidence", str(HEALTHY), "--out", str(out), "--quiet"]) == 3
    flow = summary_of(out)["flows"]["orphans"]
    assert flow["exit_code"] == 3 and "app_name is empty" in flow["error"]
    assert flow["top_finding"]["id"] == "run/error"
    assert Findings.read(out / "orphans" / "findings.json").items[0].id == "run/error"
    assert 'href="orphans/orphans.html"' in (out / "index.html").read_text(encoding="utf-8")


def test_a_parameter_no_flow_declares_refuses_the_run_with_a_summary(tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = ["run", "all", "--evidence", str(HEALTHY), "--out", str(out), "-p", "app_nam", "x"]
    assert main(argv) == 3
    summary = summary_of(out)
    assert summary["exit_code"] == 3 and "app_nam" in summary["error"]
    assert "did you mean app_nam → app_name" in summary["error"]
    assert summary["flows"] == {}
    assert main([*argv[:6], "-p", "evidence", "elsewhere"]) == 3  # set by the runner


@pytest.mark.parametrize(
    ("flow", "sections", "given", "reason"),
    [
        ("orphans", {"events", "spans"}, {}, "needs [ledger] in the manifest"),
        ("orphans", {"ledger"}, {}, None),
        ("latency_cliff", {"threads"}, {}, None),
        (
            "runaway",
            {"journal", "threads"},
            {},
            "needs one of [diagnostics], [spans], [ledger], [events] in the manifest",
        ),
        ("vanished_state", {"ledger"}, {"session_id": "s"}, "needs [events] in the manifest"),
        ("vanished_state", {"events"}, {}, "needs -p session_id"),
        ("session", {"events"}, {"session_id": " "}, "needs -p session_id"),
        ("session", {"events"}, {"session_id": "s-1"}, None),
    ],
)
def test_which_flows_the_evidence_supports(
    flow: str, sections: set[str], given: dict[str, str], reason: str | None
) -> None:
    assert batch.skip_reason(FLOWS[flow], sections, given) == reason


def test_every_registered_flow_gets_a_rule() -> None:
    """A flow added to FLOWS later runs by the same rule: one of its own sections."""
    every = {"ledger", "events", "journal", "spans", "diagnostics", "threads"}
    for flow in FLOWS.values():
        given = {name: "x" for name in flow.required}
        assert batch.skip_reason(flow, every, given) is None
        assert batch.skip_reason(flow, set(), given) is not None or not flow.sections
