"""A flow added the way ``docs/adding-a-flow.md`` says, end to end: one folder, its registry
entry in ``_declared()`` and one notebook, written into a copy of the kit, then the real CLI
(``run all``, ``postmortem``) on the Firestore fixture. The toy runs under ``run all`` beside
the kit's flows, its check is a line of the triage card, its findings reach the postmortem
draft with the roles and impact it declares, and on Firestore evidence its declared limits
withhold what they say. Nothing outside the folder, the registry and the notebook names it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import papermill
import pytest

from incidentkit.findings import Findings, Verdict

ROOT = Path(__file__).resolve().parents[2]
FIRESTORE = ROOT / "fixtures" / "vanished_state-firestore"
APP = "shop"
TOP = 3
"""The toy's own setting, given to ``run all``: each count keeps 3 rows (the app has 4 authors)."""
pytestmark = pytest.mark.notebook

# ------------------------------------------------------------------------- the toy flow's folder

FLOW_PY = '''
"""The toy flow, as the rest of the kit knows it."""

from __future__ import annotations

from incidentkit.flows.plugin import CardChecks, EvidenceLimits, Flow, PostmortemHooks
from incidentkit.flows.toy.settings import ToySettings

FLOW = Flow(
    name="toy",
    notebook="toy.ipynb",
    summary="count an app's events per invocation and per author",
    sections=("events",),
    settings=ToySettings,
    limits=EvidenceLimits(
        withheld="the events per author only: per invocation needs invocation ids",
        withheld_items=("toy/by-invocation",),
        withheld_counts=("invocations",),
    ),
    postmortem=PostmortemHooks(
        module="incidentkit.flows.toy.postmortem",
        roles={"toy/by-author": "Root cause", "toy/by-invocation": "Mechanism"},
        action_types={"toy/by-author": "prevent"},
        timed=False,
    ),
    card=(CardChecks(checks=("toy-events",), module="incidentkit.flows.toy.card"),),
)
'''

SETTINGS_PY = '''
"""The toy flow's settings (:mod:`incidentkit.flows.settings`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from incidentkit.flows.settings import FlowSettings, Whole, setting

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True, kw_only=True)
class ToySettings(FlowSettings):
    """The app's events up to ``as_of``, and how many rows each count keeps."""

    as_of: pd.Timestamp
    top: int = setting(Whole(1, fix="give how many rows a count keeps, e.g. -p top 5"), default=10)
    quiet_below: int = setting(
        Whole(1, fix="give how few events make an invocation quiet, e.g. quiet_below = 2"),
        profile=True,
        default=1,
    )
'''

TRIAGE_PY = '''
"""The toy flow's pure triage: an app's events counted per invocation and per author."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd


@dataclass(frozen=True)
class ToyReport:
    """How many events each invocation and each author wrote, most first."""

    by_invocation: pd.DataFrame
    by_author: pd.DataFrame


def _counted(events: pd.DataFrame, column: str) -> pd.DataFrame:
    counts = events.groupby(column, dropna=False).size().rename("events").reset_index()
    return counts.sort_values("events", ascending=False, kind="stable").reset_index(drop=True)


def count_events(events: pd.DataFrame) -> ToyReport:
    """Events per invocation (events without one count together) and per author."""
    return ToyReport(_counted(events, "invocation_id"), _counted(events, "author"))
'''

FINDINGS_PY = '''
"""The toy flow's findings: its item ids and row fields are its contract."""

from __future__ import annotations

from typing import Unpack

import pandas as pd

from incidentkit.findings import (
    ROW_LIMIT,
    Finding,
    Findings,
    FindingsContext,
    Severity,
    TimeLike,
    rows_of,
)
from incidentkit.flows.toy.triage import ToyReport

BY_INVOCATION = "toy/by-invocation"
BY_AUTHOR = "toy/by-author"


def _item(
    item_id: str, frame: pd.DataFrame, column: str, action: str, limit: int | None
) -> Finding | None:
    if frame.empty:
        return None
    top = frame.iloc[0]
    return Finding(
        item_id,
        Severity.WARNING,
        f"{len(frame)} {column}(s) wrote {int(frame['events'].sum())} event(s); the most: "
        f"{top[column]} ({int(top['events'])})",
        f"The app's events counted per {column}.",
        action,
        rows_of(frame, [column, "events"], limit=limit),
        len(frame),
    )


def toy_findings(
    report: ToyReport, *, as_of: TimeLike | None = None, **context: Unpack[FindingsContext]
) -> Findings:
    """The findings of :func:`~incidentkit.flows.toy.triage.count_events`."""
    limit = context.get("row_limit", ROW_LIMIT)
    items = (
        _item(
            BY_AUTHOR, report.by_author, "author", "Bound what the busiest author writes.", limit
        ),
        _item(
            BY_INVOCATION,
            report.by_invocation,
            "invocation_id",
            "Read the busiest invocation first.",
            limit,
        ),
    )
    summary = {
        "events": int(report.by_author["events"].sum()),
        "authors": len(report.by_author),
        "invocations": len(report.by_invocation),
    }
    return Findings.build("toy", items, summary, as_of=as_of, **context)
'''

STEPS_PY = '''
"""The toy flow's steps: what its notebook's cells call, one call per cell."""

from __future__ import annotations

import os
from typing import Any

from incidentkit.evidence import Evidence
from incidentkit.findings import Findings
from incidentkit.flows.common import begin, findings_context
from incidentkit.flows.evidence_limits import with_limits
from incidentkit.flows.settings import resolve
from incidentkit.flows.toy.findings import toy_findings
from incidentkit.flows.toy.flow import FLOW as DECLARED
from incidentkit.flows.toy.settings import ToySettings
from incidentkit.flows.toy.triage import ToyReport, count_events

FLOW = "toy"
SECTIONS = DECLARED.sections


def setup(
    evidence: Evidence | str | os.PathLike[str],
    *,
    app_name: str = "",
    as_of: object = "",
    top: int = 0,
) -> tuple[Evidence, ToySettings]:
    """The incident narrowed to its app, read up to as_of, and the flow's settings."""
    incident, found = begin(FLOW, evidence, app_name=app_name, as_of=as_of)
    return incident, resolve(ToySettings, incident, found, top=top)


def triage(evidence: Evidence, settings: ToySettings) -> ToyReport:
    """The app's events counted."""
    return count_events(evidence.events)


def table(report: ToyReport, view: str) -> Any:
    """One count (``"by_invocation"``, ``"by_author"``) for people."""
    from incidentkit.report import table as people_table

    return people_table(getattr(report, view))


def findings(report: ToyReport, evidence: Evidence, settings: ToySettings) -> Findings:
    """The flow's findings, with the incident's title, window, settings and rejects."""
    context = findings_context(evidence, settings, SECTIONS)
    found = toy_findings(report, as_of=settings.as_of, row_limit=settings.top, **context)
    return with_limits(found, evidence)
'''

CARD_PY = '''
"""The toy flow's cheap check on the triage card: the app's events."""

from __future__ import annotations

from incidentkit.flows.card_lines import CardContext, CardLine, card_line, not_checked


def card_lines(context: CardContext) -> list[CardLine]:
    """WARNING when the app wrote events; NOT_CHECKED without any."""
    events = context.frames.events
    if events.empty:
        return [not_checked("toy-events", "toy", "event log", "no event of this app")]
    title = f"{len(events)} event(s) by {events['author'].nunique()} author(s)"
    return [card_line("toy-events", "WARNING", len(events), title, "toy", "event log")]
'''

POSTMORTEM_PY = '''
"""What the toy findings give a postmortem draft (a PostmortemModule)."""

from __future__ import annotations

from incidentkit.findings import Finding
from incidentkit.flows.toy.findings import BY_AUTHOR
from incidentkit.postmortem.collect import FlowFindings
from incidentkit.postmortem.impact import Claim
from incidentkit.postmortem.proof import counter, item_ref
from incidentkit.postmortem.timeline import Moment


def impact(ff: FlowFindings) -> dict[str, Claim]:
    """The events it counted."""
    events = ff.findings.summary.get("events", 0)
    return {
        "events": Claim(f"{events} toy events", (counter(ff, "events"), item_ref(ff, BY_AUTHOR)))
    }


def timeline(ff: FlowFindings) -> list[Moment]:
    """None: the toy counts."""
    return []


def triggers(ff: FlowFindings) -> list[str]:
    """None beyond its items' roles."""
    return []


def detection(ff: FlowFindings) -> list[str]:
    """An alert on events per author."""
    return [f"- toy: an alert on events per author fires first {item_ref(ff, BY_AUTHOR).text()}"]


def action_note(ff: FlowFindings, item: Finding) -> str:
    """A note after the author's action."""
    return " (toy note)" if item.id == BY_AUTHOR else ""
'''

INIT_PY = '''
"""The toy flow: an app's events counted per invocation and per author."""

from incidentkit.flows.toy.steps import SECTIONS, findings, setup, table, triage
from incidentkit.flows.toy.triage import ToyReport, count_events

__all__ = ["SECTIONS", "ToyReport", "count_events", "findings", "setup", "table", "triage"]
'''

FOLDER = {
    "__init__.py": INIT_PY,
    "flow.py": FLOW_PY,
    "settings.py": SETTINGS_PY,
    "triage.py": TRIAGE_PY,
    "findings.py": FINDINGS_PY,
    "steps.py": STEPS_PY,
    "card.py": CARD_PY,
    "postmortem.py": POSTMORTEM_PY,
}

PARAMETERS = """\
evidence: str = ""  # required: the incident's evidence.toml, or the folder holding it
app_name: str = ""  # the app to count; empty: the manifest's app_name, else the one app
as_of: str = ""  # the moment judged (UTC); empty: the window's end, else the last record
top: int = 0  # rows each count keeps; 0: 10
findings_path: str = "findings.json"  # where the findings are recorded"""

CELLS = (
    ("markdown", "# Events, counted\n\nAn app's events per invocation and per author."),
    ("parameters", PARAMETERS),
    (
        "load",
        "from incidentkit import report\nfrom incidentkit.flows import toy\n\n"
        "incident, settings = toy.setup(evidence, app_name=app_name, as_of=as_of, top=top)",
    ),
    ("load", "report.table(settings.table())"),
    ("markdown", "## 1. The counts"),
    ("triage", "counts = toy.triage(incident, settings)"),
    ("triage", 'toy.table(counts, "by_author")'),
    ("triage", 'toy.table(counts, "by_invocation")'),
    ("markdown", "## 2. Verdict"),
    ("findings", "findings = toy.findings(counts, incident, settings)"),
    ("findings", "report.record(findings, findings_path)"),
)

IMPORT = "    from incidentkit.flows.toy.flow import FLOW as TOY"
"""The registry entry, with ``TOY`` added to the tuple ``_declared()`` returns."""


def _notebook() -> nbformat.NotebookNode:
    nb: nbformat.NotebookNode = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "display_name": "Python 3",
        "language": "python",
        "name": "python3",
    }
    nb.metadata["language_info"] = {"name": "python"}
    nb.cells = [
        nbformat.v4.new_markdown_cell(text)
        if tag == "markdown"
        else nbformat.v4.new_code_cell(text, metadata={"tags": [tag]})
        for tag, text in CELLS
    ]
    return nb


def add_toy(kit: Path, *, register: bool = True) -> None:
    """Add the toy flow to the kit copied into ``kit``, as the doc says: its folder, its
    notebook, and (``register``) its entry in ``_declared()``."""
    folder = kit / "incidentkit" / "flows" / "toy"
    folder.mkdir()
    for name, text in FOLDER.items():
        (folder / name).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    nbformat.write(_notebook(), str(kit / "notebooks" / "toy.ipynb"))
    if not register:
        return
    registry = kit / "incidentkit" / "flows" / "__init__.py"
    text = registry.read_text(encoding="utf-8")
    imports, returns, tail = text.partition("\n\n    return (")
    listed, close, rest = tail.partition(")\n")
    assert returns and close, "_declared() imports each flow's FLOW and returns them as a tuple"
    lines = imports.split("\n")  # the import beside the others, in their order
    declared = [k for k, line in enumerate(lines) if line.startswith("    from incidentkit.")]
    lines.insert(1 + max(k for k in declared if lines[k] < IMPORT), IMPORT)
    registry.write_text("\n".join(lines) + f"{returns}{listed}, TOY{close}{rest}", encoding="utf-8")


def copy_kit(into: Path) -> Path:
    """The checkout's package and notebooks, copied into ``into``."""
    skip = shutil.ignore_patterns("__pycache__")
    for part in ("incidentkit", "notebooks"):
        shutil.copytree(ROOT / part, into / part, ignore=skip)
    return into


def incidentkit(kit: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI of the kit in ``kit`` (a subprocess: the kernels it starts import that kit)."""
    env = {**os.environ, "PYTHONPATH": str(kit)}
    return subprocess.run(
        [sys.executable, "-m", "incidentkit.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=kit,
        check=False,
        timeout=900,
    )


# --------------------------------------------------------------------------------------- the run


@dataclass(frozen=True)
class Run:
    kit: Path
    out: Path
    code: int
    summary: dict[str, Any]
    draft: str

    def findings(self, flow: str) -> Findings:
        return Findings.read(self.out / flow / "findings.json")


QUIET_BELOW = 2
"""The toy's own profile key, ``quiet_below``, in the evidence's ``[apps.shop]``."""


def with_profile_key(into: Path) -> Path:
    """The Firestore fixture with the toy's own key in the app's profile: the manifest takes
    a key a registered flow declares, and no other."""
    evidence = into / "evidence"
    shutil.copytree(FIRESTORE, evidence)
    manifest = evidence / "evidence.toml"
    text = manifest.read_text(encoding="utf-8")
    header = f"[apps.{APP}]\n"
    assert header in text
    manifest.write_text(
        text.replace(header, f"{header}quiet_below = {QUIET_BELOW}\n"), encoding="utf-8"
    )
    return evidence


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The kit with the toy added, ``run all`` on the Firestore fixture for one app, and the
    postmortem draft of its folder."""
    kit = copy_kit(tmp_path_factory.mktemp("kit"))
    add_toy(kit)
    out = kit.parent / "out"
    done = incidentkit(
        kit,
        *("run", "all", "--evidence", str(with_profile_key(kit.parent)), "--out", str(out)),
        *("-p", "app_name", APP, "-p", "top", str(TOP)),
    )
    assert done.returncode in (0, 1, 2), done.stderr  # every flow reached its verdict
    draft = incidentkit(kit, "postmortem", str(out))
    assert draft.returncode == 0, draft.stderr
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    return Run(kit, out, done.returncode, summary, draft.stdout)


def test_run_all_runs_the_toy_beside_the_kit_s_flows(run: Run) -> None:
    flows = run.summary["flows"]
    assert "toy" in flows and "toy" not in run.summary["skipped"]
    toy = flows["toy"]
    assert toy["verdict"] == "INCOMPLETE_EVIDENCE" and toy["error"] is None, toy
    assert (toy["report"], toy["findings"]) == ("toy/toy.html", "toy/findings.json")
    assert toy["parameters"] == {"app_name": APP, "top": str(TOP)}  # its own, only to it
    assert all("top" not in flows[name]["parameters"] for name in flows if name != "toy")
    assert toy["top_finding"]["id"].startswith("toy/")
    assert list(flows)[-1] == "overview"  # the card still runs last, after the toy
    assert run.code == run.summary["exit_code"] == 2  # no flow failed (Firestore: incomplete)
    assert all(flow["error"] is None for flow in flows.values())
    index = (run.out / "index.html").read_text(encoding="utf-8")
    assert '<a href="toy/toy.html">toy</a>' in index
    assert (run.out / "toy" / "toy.ipynb").is_file()


def test_the_toy_counts_the_app_s_events(run: Run) -> None:
    found = run.findings("toy")
    parameters = found.evidence.parameters
    assert found.flow == "toy" and (parameters["app_name"], parameters["top"]) == (APP, TOP)
    assert parameters["settings_from"]["top"] == "parameter"
    assert parameters["quiet_below"] == QUIET_BELOW  # the toy's own profile key
    assert parameters["settings_from"]["quiet_below"] == f"[apps.{APP}]"
    by_author = next(item for item in found.items if item.id == "toy/by-author")
    assert len(by_author.rows) == TOP < found.summary["authors"] == by_author.count
    assert by_author.title.startswith(f"{by_author.count} author(s) wrote ")
    assert f"wrote {found.summary['events']} event(s); the most: " in by_author.title
    counts = [row["events"] for row in by_author.rows]
    assert counts == sorted(counts, reverse=True) and sum(counts) < found.summary["events"]


def test_the_triage_card_has_the_toy_s_line_linked_to_its_report(run: Run) -> None:
    card = next(item for item in run.findings("overview").items if item.id == "overview/card")
    lines = [row for row in card.rows if row["check"] == "toy-events"]
    assert len(lines) == 1
    line = lines[0]
    assert (line["flow"], line["severity"], line["app"]) == ("toy", "WARNING", APP)
    assert line["count"] == run.findings("toy").summary["events"]  # the same events, counted
    assert (line["link"], line["report_verdict"]) == ("../toy/toy.html", "INCOMPLETE_EVIDENCE")
    assert line["command"].startswith("incidentkit run toy --evidence ")
    assert line["command"].endswith(f"--out out/toy -p app_name {APP}")


def test_on_firestore_evidence_the_toy_withholds_what_it_declares(run: Run) -> None:
    found = run.findings("toy")
    assert found.verdict is Verdict.INCOMPLETE_EVIDENCE
    assert [item.id for item in found.items] == ["toy/evidence-limits", "toy/by-author"]
    limits = found.items[0].detail
    assert "This flow gives the events per author only: per invocation needs" in limits
    assert "Withheld: toy/by-invocation." in limits  # written by the toy, then dropped
    assert "invocations" not in found.summary and {"events", "authors"} <= set(found.summary)


def _section(text: str, title: str) -> str:
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_postmortem_draft_reads_the_toy_as_it_declares(run: Run) -> None:
    causes = _section(run.draft, "Root cause and trigger")
    toy = causes.split("### toy (INCOMPLETE_EVIDENCE)\n", 1)[1].split("\n### ", 1)[0]
    lines = [line for line in toy.splitlines() if line.startswith("- **")]
    assert [line.split("**")[1] for line in lines] == ["Root cause", "Evidence"]  # as declared
    assert lines[0].endswith(f"→ `toy/by-author`, rows 1–{TOP})")
    assert lines[1].endswith("→ `toy/evidence-limits`, rows 1–4)")  # the export's four limits
    actions = _section(run.draft, "Action items")
    assert "| prevent | Bound what the busiest author writes. (toy note) | _owner_ |" in actions
    events = run.findings("toy").summary["events"]
    impact = _section(run.draft, "Impact")
    assert (
        f"- **Events**: toy: {events} toy events ([toy/findings.json](toy/findings.json) → "
        f"summary.events; `toy/by-author`, rows 1–{TOP})"
    ) in impact
    assert "Not counted" not in impact
    assert "- toy: an alert on events per author fires first (" in _section(run.draft, "Detection")
    untimed = re.search(r"The ([\w, ]+) findings carry no times", _section(run.draft, "Timeline"))
    assert untimed is not None and "toy" in untimed[1].split(", ")


def test_the_toy_notebook_keeps_the_notebook_rules(run: Run) -> None:
    """The checks of ``tests/test_notebooks.py``, on the toy's notebook."""
    spec = importlib.util.spec_from_file_location(
        "notebook_rules", ROOT / "tests" / "test_notebooks.py"
    )
    assert spec is not None and spec.loader is not None
    rules = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rules)
    path = run.kit / "notebooks" / "toy.ipynb"
    rules.test_committed_without_outputs(path)
    rules.test_cells_are_tagged_and_parameters_come_first(path)
    rules.test_cells_are_thin(path)
    declared = papermill.inspect_notebook(str(path))
    assert {name: p["inferred_type_name"] for name, p in declared.items()} == {
        **dict.fromkeys(("evidence", "app_name", "as_of"), "str"),
        "top": "int",
        "findings_path": "str",
    }
    assert all(p["help"] for p in declared.values())


def test_without_its_registry_line_the_folder_is_no_flow(tmp_path: Path) -> None:
    """The folder and the notebook alone add nothing: the registry entry makes it a flow."""
    kit = copy_kit(tmp_path / "kit")
    add_toy(kit, register=False)
    done = incidentkit(kit, "run", "toy", "--evidence", str(FIRESTORE), "--out", str(tmp_path))
    assert done.returncode == 3 and "unknown flow: 'toy'" in done.stderr, done.stderr
    read = incidentkit(kit, "inspect", str(with_profile_key(tmp_path)))
    assert read.returncode == 3, read.stderr  # no flow declares the key: the manifest refuses it
    assert f"[apps.{APP}] has unknown keys: ['quiet_below']" in read.stderr, read.stderr
