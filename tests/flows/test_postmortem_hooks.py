"""A flow tells the postmortem draft what its findings mean (``Flow.postmortem``): the roles and
action types of its items, and a module that counts, dates and detects. A toy flow registered
with hooks shows each of them in a draft; one registered without hooks reaches a draft as a
flow the registry does not know. The draft's own modules name no flow.

This test module is the toy flow's postmortem module: ``impact``, ``timeline``, ``triggers``,
``detection`` and ``action_note`` below are its hooks (``module=__name__``).
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from incidentkit import flows
from incidentkit.findings import Finding, Findings, Provenance, Severity, Verdict
from incidentkit.flows import FLOWS, Flow
from incidentkit.flows.plugin import PostmortemHooks, PostmortemModule
from incidentkit.postmortem import Claim, FlowFindings, Moment, postmortem_command
from incidentkit.postmortem.proof import counter, item_ref
from incidentkit.postmortem.text import time

ROOT = Path(__file__).resolve().parents[2]
POSTMORTEM = ROOT / "incidentkit" / "postmortem"

STALLS = "toy/stalls"  # declared Root cause, prevent
ALARM = "toy/alarm"  # declared process
STEPS = "toy/steps"  # declared one action per row (column "step"), prevent
OTHER = "toy/other"  # declared nothing: Contributing, mitigate
HOOKS = PostmortemHooks(
    module=__name__,
    roles={STALLS: "Root cause", STEPS: "Mechanism"},
    action_types={STALLS: "prevent", ALARM: "process", STEPS: "prevent"},
    per_row={STEPS: "step"},
)


def _toy(postmortem: PostmortemHooks | None) -> Flow:
    return Flow(
        name="toy",
        notebook="toy.ipynb",
        summary="a flow added the way docs/adding-a-flow.md says",
        sections=("events",),
        postmortem=postmortem,
    )


@pytest.fixture
def registered(request: pytest.FixtureRequest) -> Iterator[Flow]:
    """The toy flow in the registry for one test, with the hooks the test gives (or none)."""
    toy = flows.register(_toy(request.param))
    try:
        yield toy
    finally:
        flows._FLOWS.pop(toy.name)


# ------------------------------------------------------------------ the toy's postmortem module


def impact(ff: FlowFindings) -> dict[str, Claim]:
    stalled = ff.findings.summary.get("stalled", 0)
    return {
        "runs": Claim(
            f"{stalled} toy runs stalled", (item_ref(ff, STALLS), counter(ff, "stalled"))
        ),
        "toy queues": Claim("1 toy queue full", (item_ref(ff, STALLS, [1]),)),
        "users": Claim("the toy rows carry no user id", missing=True),
    }


def timeline(ff: FlowFindings) -> list[Moment]:
    row = ff.rows(STALLS)[0]
    at = time(row["at"])
    assert at is not None
    return [Moment(at, f"the toy queue {row['queue']} fills", (item_ref(ff, STALLS, [1]),))]


def triggers(ff: FlowFindings) -> list[str]:
    return [f"- **Trigger**: a burst of toy work {item_ref(ff, STALLS, [1]).text()}"]


def detection(ff: FlowFindings) -> list[str]:
    return [f"- toy: an alert on the toy queue's depth fires first {item_ref(ff, ALARM).text()}"]


def action_note(ff: FlowFindings, item: Finding) -> str:
    return " (toy note)" if item.id == STALLS else ""


# -------------------------------------------------------------------------------------- drafts


def _toy_findings(out: Path) -> Path:
    """A toy findings.json in ``out``: an item of each kind of declaration, and one undeclared."""
    items = (
        Finding(
            STALLS,
            Severity.CRITICAL,
            "toy runs stalled",
            "the toy queue filled",
            "Bound the toy queue",
            ({"queue": "q-7", "at": "2026-11-29T03:10:00Z"},),
        ),
        Finding(ALARM, Severity.WARNING, "no toy alarm", "nothing alerted", "Add a toy alarm"),
        Finding(
            STEPS,
            Severity.WARNING,
            "toy fix",
            "two steps",
            "Apply each step",
            ({"step": "Drain the toy queue"}, {"step": "Resize the toy pool"}),
        ),
        Finding(OTHER, Severity.WARNING, "a toy side effect", "it happened", "Undo the toy effect"),
    )
    evidence = Provenance(
        window=("2026-11-29T03:00:00Z", "2026-11-29T03:20:00Z"), as_of="2026-11-29T03:20:00Z"
    )
    found = Findings("toy", Verdict.ACTION_NEEDED, {"stalled": 3}, items, evidence)
    found.write(out / "findings.json")
    return out


def _section(text: str, title: str) -> str:
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _actions(text: str) -> list[tuple[str, str]]:
    """(type, action) of each row of the Action items table."""
    rows = [
        line for line in _section(text, "Action items").splitlines() if re.match(r"\| \d+ ", line)
    ]
    return [(cells[2].strip(), cells[3].strip()) for cells in (row.split("|") for row in rows)]


@pytest.mark.parametrize("registered", [HOOKS], indirect=True)
def test_a_flow_with_hooks_gives_its_roles_actions_alerts_impact_and_times(
    registered: Flow, tmp_path: Path
) -> None:
    text = postmortem_command(_toy_findings(tmp_path), fmt="md")
    causes = _section(text, "Root cause and trigger")
    assert "### toy (ACTION_NEEDED)" in causes
    lines = [line for line in causes.splitlines() if line.startswith("- **")]
    assert [line.split("**")[1] for line in lines] == [
        "Trigger",  # the module's trigger line comes first
        "Root cause",
        "Mechanism",
        "Contributing",
        "Contributing",
    ]
    assert lines[0].startswith("- **Trigger**: a burst of toy work (")
    assert lines[1].startswith("- **Root cause**: toy runs stalled. the toy queue filled (")
    assert f"`{STALLS}`" in lines[1] and f"`{STEPS}`" in lines[2]
    assert f"`{ALARM}`" in lines[3] and f"`{OTHER}`" in lines[4]
    assert _actions(text) == [
        ("mitigate", "Undo the toy effect"),
        ("prevent", "Bound the toy queue (toy note)"),
        ("prevent", "Drain the toy queue"),
        ("prevent", "Resize the toy pool"),
        ("process", "Add a toy alarm"),
    ]
    detection = _section(text, "Detection")
    assert "- toy: an alert on the toy queue's depth fires first (" in detection
    assert "The findings name no alert" not in detection
    impact = _section(text, "Impact")
    assert "- **Runs affected**: 3 toy runs stalled ([findings.json](findings.json) → " in impact
    assert "- **Toy queues**: 1 toy queue full" in impact
    assert "- **Users affected**: n/a — the toy rows carry no user id" in impact
    assert "Not counted" not in impact
    timeline = _section(text, "Timeline")
    assert "| 2026-11-29T03:10:00.000Z | the toy queue q-7 fills | (" in timeline
    assert "carry no times" not in timeline


@pytest.mark.parametrize(
    "registered", [PostmortemHooks(navigates=True, timed=False)], indirect=True
)
def test_a_flow_that_navigates_is_left_out_of_the_diagnosis(
    registered: Flow, tmp_path: Path
) -> None:
    text = postmortem_command(_toy_findings(tmp_path), fmt="md")
    assert "- toy: ACTION_NEEDED" in _section(text, "Summary")  # its card stays in the summary
    assert "### toy" not in _section(text, "Root cause and trigger")
    assert _actions(text) == []
    assert "- The findings name no alert." in _section(text, "Detection")
    assert "The toy findings carry no times (counts only)." in _section(text, "Timeline")


@pytest.mark.parametrize("registered", [None], indirect=True)
def test_a_flow_without_hooks_reaches_the_draft_as_an_unknown_flow(
    registered: Flow, tmp_path: Path
) -> None:
    text = postmortem_command(_toy_findings(tmp_path), fmt="md")
    causes = [
        line for line in _section(text, "Root cause and trigger").splitlines() if "**" in line
    ]
    assert len(causes) == 4 and all(line.startswith("- **Contributing**: ") for line in causes)
    actions = _actions(text)
    assert [kind for kind, _ in actions] == ["mitigate"] * 4 + ["prevent"]
    assert actions[1] == ("mitigate", "Add a toy alarm")
    assert actions[2] == ("mitigate", "Apply each step")  # not one item per row
    assert actions[4][1].startswith("TODO(author): prevention for toy: ")
    assert "(toy note)" not in text
    impact = _section(text, "Impact")
    assert (
        impact.strip().splitlines()[0]
        == "- n/a — this draft reads no toy findings: nothing to count"
    )
    assert "- The findings name no alert." in _section(text, "Detection")
    assert "the toy queue q-7 fills" not in text
    flows._FLOWS.pop("toy")  # the same findings, of a flow the registry does not know
    try:
        assert postmortem_command(tmp_path, fmt="md") == text
    finally:
        flows.register(registered)


def test_a_flow_with_hooks_beside_one_without_says_which_was_not_counted(tmp_path: Path) -> None:
    flows.register(_toy(HOOKS))
    try:
        for name in ("toy", "mystery"):
            (tmp_path / name).mkdir()
            _toy_findings(tmp_path / name)
        doc = tmp_path / "mystery" / "findings.json"
        doc.write_text(doc.read_text().replace('"flow": "toy"', '"flow": "mystery"'))
        impact = _section(postmortem_command(tmp_path, fmt="md"), "Impact")
    finally:
        flows._FLOWS.pop("toy")
    assert "- **Runs affected**: 3 toy runs stalled" in impact  # the one flow counted
    assert "- Not counted: mystery (this draft reads no such findings)" in impact


# ------------------------------------------------------------------- the kit's flows' hooks


@pytest.mark.parametrize("name", list(FLOWS))
def test_each_flow_declares_hooks_for_its_own_items_and_a_module_of_the_protocol(
    name: str,
) -> None:
    hooks = FLOWS[name].postmortem
    assert hooks is not None
    declared = {*hooks.roles, *hooks.action_types, *hooks.per_row}
    assert all(item.startswith(f"{name}/") for item in declared), declared
    module = hooks.functions()
    if hooks.navigates:  # a triage card: counts, dates and detects nothing itself
        assert module is None
        return
    assert module is not None and module.__name__ == f"incidentkit.flows.{name}.postmortem"
    for member, wanted in inspect.getmembers(PostmortemModule, inspect.isfunction):
        if member.startswith("_"):
            continue
        got = inspect.signature(getattr(module, member))
        assert list(got.parameters) == list(inspect.signature(wanted).parameters)[1:], member


def _code_strings(path: Path) -> list[str]:
    """The string literals of a module, without its docstrings."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


@pytest.mark.parametrize("module", sorted(p.name for p in POSTMORTEM.glob("*.py")))
def test_the_draft_names_no_flow(module: str) -> None:
    names = "|".join(FLOWS)
    named = [
        text
        for text in _code_strings(POSTMORTEM / module)
        if re.search(rf"(?<![\w.])({names})(/|$)", text) or text.strip() in FLOWS
    ]
    assert not named
