"""``incidentkit run --help`` lists every registered flow with its one-line summary: what a
flow's ``flow.py`` declares is what a newcomer reads when choosing one."""

from __future__ import annotations

import pytest

from incidentkit import flows
from incidentkit.cli import build_parser
from incidentkit.flows import FLOWS, Flow


def _run_help(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    return capsys.readouterr().out


def _listed(text: str) -> dict[str, str]:
    """The flows block of the help: name -> its summary re-joined from its wrapped lines."""
    listed: dict[str, str] = {}
    name = ""
    for line in text.split("\nflows:\n", 1)[1].splitlines():
        head, _, rest = line.strip().partition(" ")
        if line.startswith("  ") and not line.startswith("   "):
            name, listed[head] = head, rest.strip()
        else:
            listed[name] += " " + line.strip()
    return listed


def test_every_flow_is_listed_with_its_summary(capsys: pytest.CaptureFixture[str]) -> None:
    listed = _listed(_run_help(capsys))
    assert listed == {name: flow.summary for name, flow in FLOWS.items()}


def test_a_registered_flow_is_listed_too(capsys: pytest.CaptureFixture[str]) -> None:
    toy = Flow(name="toy", notebook="toy.ipynb", summary="count an app's events", sections=())
    flows.register(toy)
    try:
        assert _listed(_run_help(capsys))["toy"] == "count an app's events"
    finally:
        flows._FLOWS.pop(toy.name)
