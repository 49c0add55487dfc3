"""A flow's cheap check is declared in its folder (``Flow.card``): the triage card runs every
declared check, orders a new flow's lines among the kit's by severity, turns a check's error
into NOT_CHECKED lines, and names no flow itself."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from importlib import import_module
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from incidentkit import flows
from incidentkit.errors import ParameterError
from incidentkit.flows import FLOWS, Flow
from incidentkit.flows.card_lines import SEVERITY_RANK, CardContext, CardLine, card_line
from incidentkit.flows.common import Frames
from incidentkit.flows.overview.card import CHECKS, Profile, triage_card
from incidentkit.flows.plugin import CardChecks
from incidentkit.frames import build

PACKAGE = Path(__file__).resolve().parents[2] / "incidentkit" / "flows"
T0 = pd.Timestamp("2026-12-01T10:00:00Z")


def toy_warning(context: CardContext) -> list[CardLine]:
    """The toy flow's check: one WARNING line, counting the app's events."""
    count = len(context.frames.events)
    return [card_line("toy-check", "WARNING", count, "toy title", "toy", "event log")]


def toy_fails(context: CardContext) -> list[CardLine]:
    """A toy check on evidence it cannot read."""
    raise ParameterError("toy evidence is odd", value=len(context.frames.events))


WARNS = CardChecks(checks=("toy-check",), module=__name__, function="toy_warning")
"""The toy check, declared as a flow's ``flow.py`` would (its module: this test module)."""


def toy(*card: CardChecks) -> Flow:
    return Flow(
        name="toy",
        notebook="toy.ipynb",
        summary="a flow added the way docs/adding-a-flow.md says",
        sections=("events",),
        card=card,
    )


@pytest.fixture
def registered() -> Iterator[list[Flow]]:
    """Flows registered by one test, removed from the registry after it."""
    added: list[Flow] = []
    try:
        yield added
    finally:
        for flow in added:
            flows._FLOWS.pop(flow.name, None)


def register(added: list[Flow], flow: Flow) -> None:
    added.append(flows.register(flow))


def events() -> pd.DataFrame:
    """A run max_llm_calls stopped (over-call-limit: CRITICAL) and a finished one."""

    def log(invocation: str, *kinds: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {
                "event_id": f"{invocation}-{i}",
                "app_name": "app",
                "session_id": f"s-{invocation}",
                "invocation_id": invocation,
                "seq": i,
                "ts": T0 + pd.Timedelta(seconds=i),
                "author": "agent",
                "kind": "turn",
                "total_tokens": 15,
                **kind,
            }
            for i, kind in enumerate(kinds)
        ]

    user, call = {"author": "user", "total_tokens": None}, {"text": "calling"}
    limit = {
        "kind": "error",
        "error_code": "LlmCallsLimitExceededError",
        "error_message": "Max number of llm calls limit of `4` exceeded",
        "final_response": True,
        "total_tokens": None,
    }
    done = {"text": "done", "final_response": True}
    rows = [*log("e-stop", user, call, call, call, call, limit), *log("e-ok", user, call, done)]
    return build("events", rows)


def card(symptom: str | None = None) -> pd.DataFrame:
    return triage_card(
        Frames(events=events()),
        as_of=T0 + pd.Timedelta(hours=1),
        profile=Profile(max_llm_calls=4),
        symptom=symptom,
    )


def test_a_new_flows_check_is_a_line_on_the_card_ordered_by_severity(
    registered: list[Flow],
) -> None:
    before = card()
    register(registered, toy(WARNS))
    after = card()
    mine = after.loc[after["flow"].eq("toy")]
    assert list(mine["check"]) == ["toy-check"]
    assert (mine.iloc[0]["severity"], mine.iloc[0]["count"]) == ("WARNING", 9)
    assert mine.iloc[0]["title"] == "toy title"
    ranks = list(after["severity"].map(SEVERITY_RANK))
    assert ranks == sorted(ranks)  # the kit's CRITICAL line before it, the INFO ones after
    # a check CHECKS does not list comes after the kit's lines of its severity
    at = int(mine.index[0])
    earlier, later = set(after.loc[: at - 1, "severity"]), set(after.loc[at + 1 :, "severity"])
    assert "CRITICAL" in earlier and earlier <= {"CRITICAL", "WARNING"}
    assert "INFO" in later and later <= {"INFO", "NOT_CHECKED"}
    # the kit's lines are the same, in the same order
    kit = after.loc[after["flow"].ne("toy")].reset_index(drop=True)
    pd.testing.assert_frame_equal(kit, before)


def test_a_symptom_lists_its_checks_before_a_new_flows_line(registered: list[Flow]) -> None:
    register(registered, toy(WARNS))
    found = card("cost")
    at = int(found.index[found["check"].eq("toy-check")][0])
    asked = found["check"].isin(("over-call-limit", "latency-cliff", "quiet-errors"))
    assert asked.iloc[:at].all() and not asked.iloc[at:].any()


def test_a_check_that_raises_is_not_checked_for_every_check_it_declares(
    registered: list[Flow],
) -> None:
    declared = CardChecks(checks=("toy-a", "toy-b"), module=__name__, function="toy_fails")
    register(registered, toy(declared))
    found = card()
    mine = found.loc[found["flow"].eq("toy")]
    assert sorted(mine["check"]) == ["toy-a", "toy-b"]
    assert set(mine["severity"]) == {"NOT_CHECKED"}
    assert set(mine["title"]) == {"not checked: ParameterError: toy evidence is odd: 9"}
    assert set(found["check"]) == {*CHECKS, "toy-a", "toy-b"}  # the card goes on


def test_a_flow_that_declares_no_check_has_no_line(registered: list[Flow]) -> None:
    before = card()
    register(registered, toy())
    after = card()
    assert not after["flow"].eq("toy").any()
    pd.testing.assert_frame_equal(after, before)


def test_each_kit_flow_declares_checks_of_the_card_that_resolve() -> None:
    declared = [check for flow in FLOWS.values() for c in flow.card for check in c.checks]
    assert sorted(declared) == sorted(CHECKS)  # each check of the card, declared once
    for flow in FLOWS.values():
        for c in flow.card:
            assert c.module.startswith(f"incidentkit.flows.{flow.name}.")  # in its own folder
            assert callable(getattr(import_module(c.module), c.function))


def test_declaring_a_check_imports_none() -> None:
    """``flow.py`` stays light: the card's modules load when a card is built."""
    modules = sorted({c.module for flow in FLOWS.values() for c in flow.card})
    code = (
        "import sys, incidentkit.flows.overview.card\n"
        f"print([m for m in {modules!r} if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def _literals(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


@pytest.mark.parametrize("module", ["card_lines.py", "overview/card.py"])
def test_the_card_names_no_other_flow(module: str) -> None:
    """The card and its shared lines name no flow (the orphans check shares its flow's name:
    a check's name, which the card's order lists)."""
    others = set(FLOWS) - {"overview"}
    allowed = set(CHECKS) if module == "overview/card.py" else set()
    named = {text for text in _literals(PACKAGE / module) if text in others - allowed}
    assert not named
