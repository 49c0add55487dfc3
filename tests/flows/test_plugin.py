"""A flow is a plugin: its folder's ``flow.py`` declares it, the registry collects it, and the
modules that serve every flow (the evidence limits) read the declaration, never a flow name."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from importlib import import_module
from pathlib import Path

import pytest

from incidentkit import flows
from incidentkit.evidence import open_evidence
from incidentkit.findings import Finding, Findings, Severity, Verdict
from incidentkit.flows import FLOWS, EvidenceLimits, Flow, evidence_limits

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "incidentkit" / "flows"
FIRESTORE = ROOT / "fixtures" / "vanished_state-firestore"
SHARED = ("__init__.py", "plugin.py", "evidence_limits.py")
"""Modules of ``incidentkit/flows`` that serve every flow: they may name none."""


@pytest.mark.parametrize("name", list(FLOWS))
def test_each_flow_is_declared_in_its_own_folder(name: str) -> None:
    declared = import_module(f"incidentkit.flows.{name}.flow").FLOW
    assert declared is FLOWS[name] and declared.name == name
    assert (ROOT / "notebooks" / declared.notebook).is_file()


def _string_literals(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


@pytest.mark.parametrize("module", SHARED)
def test_the_shared_flow_modules_name_no_flow(module: str) -> None:
    literals = _string_literals(PACKAGE / module)
    named = {text for text in literals for name in FLOWS if name in text.split("/")}
    assert not named


TOY = Flow(
    name="toy",
    notebook="toy.ipynb",
    summary="a flow added the way docs/adding-a-flow.md says",
    sections=("events",),
    limits=EvidenceLimits(
        withheld="no toy verdicts: they rest on invocation ids",
        withheld_items=("toy/by-invocation",),
        withheld_counts=("invocations",),
    ),
)


@pytest.fixture
def toy() -> Iterator[Flow]:
    """The toy flow in the registry for one test."""
    flows.register(TOY)
    try:
        yield TOY
    finally:
        flows._FLOWS.pop(TOY.name)


def _toy_findings() -> Findings:
    items = tuple(
        Finding(item_id, Severity.WARNING, "a finding", "why", "what to do")
        for item_id in ("toy/by-invocation", "toy/by-ledger")
    )
    return Findings("toy", Verdict.ACTION_NEEDED, {"invocations": 3, "runs": 2}, items)


def test_a_registered_flow_withholds_what_its_declaration_says(toy: Flow) -> None:
    evidence = open_evidence(FIRESTORE)
    assert evidence_limits.note(evidence, toy.name) is not None
    assert toy.limits.withheld in (evidence_limits.note(evidence, toy.name) or "")
    found = evidence_limits.with_limits(_toy_findings(), evidence)
    assert [item.id for item in found.items] == ["toy/evidence-limits", "toy/by-ledger"]
    assert found.verdict is Verdict.INCOMPLETE_EVIDENCE
    assert dict(found.summary) == {"runs": 2}
    assert "Withheld: toy/by-invocation" in found.items[0].detail


def test_a_flow_that_declares_no_limits_still_says_what_the_evidence_lacks() -> None:
    """A flow the registry does not know (or one declaring nothing) gets the defaults, never a
    KeyError: its findings stand, under an item that says the evidence lost facts."""
    found = evidence_limits.with_limits(_toy_findings(), open_evidence(FIRESTORE))
    assert found.items[0].id == "toy/evidence-limits"
    assert EvidenceLimits().withheld in found.items[0].detail
    assert [item.id for item in found.items[1:]] == ["toy/by-invocation", "toy/by-ledger"]


@pytest.mark.parametrize("name", list(FLOWS))
def test_each_flow_declares_the_frames_it_reads(name: str) -> None:
    """The frames a flow's steps load come from its declaration, and each is a frame a
    manifest section produces."""
    from incidentkit.evidence import FRAME_SOURCES

    declared = FLOWS[name]
    assert declared.reads and set(declared.reads) <= set(FRAME_SOURCES)
    assert len(set(declared.reads)) == len(declared.reads)
    steps = (PACKAGE / name / "steps.py").read_text(encoding="utf-8")
    assert "\nREADS = " not in steps  # one fact in one place: flow.py
