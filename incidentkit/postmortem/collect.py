"""Reading an incident's findings: ``OUT/findings.json``, ``OUT/*/findings.json`` and the
``summary.json`` of a ``run all``, each checked against its schema."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import msgspec

from incidentkit.errors import ParameterError
from incidentkit.findings import Finding, Findings, Verdict, misshapen
from incidentkit.flows import FLOWS
from incidentkit.flows.plugin import PostmortemHooks, PostmortemModule

EVIDENCE_ITEMS = ("/rejects", "/evidence-limits")
"""Endings of the item ids that speak of the evidence, not of the incident, in every flow (a
flow declares its own such items Evidence: ``roles``)."""
RUN_ERROR = "run/error"
"""The item of a run that stopped before its verdict (``incidentkit.runner.failed_findings``)."""

RUN_ALL_SCHEMA = "incidentkit.run-all/v1"
"""The schema of ``run all``'s ``summary.json`` (``incidentkit.batch.SUMMARY_SCHEMA``)."""
MAX_TIMEOUT_S = 366 * 86400.0
"""The longest ``client_timeout_s`` the draft computes with (a year); longer is not read."""
_NO_HOOKS = PostmortemHooks()
"""The hooks of a flow that declares none."""


@dataclass(frozen=True)
class FlowFindings:
    """One findings document of the incident: where it lies (relative to OUT) and what it says."""

    rel: str
    findings: Findings
    report: str | None = None  # the flow's HTML report beside it, relative to OUT

    @property
    def flow(self) -> str:
        return self.findings.flow

    @property
    def hooks(self) -> PostmortemHooks:
        """What the flow declares to the draft (:data:`incidentkit.flows.FLOWS`); a flow the
        registry does not know, or one declaring nothing, gets the defaults."""
        flow = FLOWS.get(self.flow)
        return _NO_HOOKS if flow is None or flow.postmortem is None else flow.postmortem

    def module(self) -> PostmortemModule | None:
        """The flow's postmortem module (imported on first use), else None."""
        return self.hooks.functions()

    @property
    def failed(self) -> Finding | None:
        """The :data:`RUN_ERROR` item of a run that stopped before its verdict, else None."""
        return next((i for i in self.findings.items if i.id == RUN_ERROR), None)

    @property
    def navigates(self) -> bool:
        """Whether the flow declares it is a triage card (``navigates``), not a diagnosis."""
        return self.hooks.navigates

    @property
    def clean(self) -> bool:
        """Whether the flow found nothing that needs action (verdict CLEAN)."""
        return self.findings.verdict is Verdict.CLEAN

    @property
    def rejects(self) -> Finding | None:
        """The flow's ``*/rejects`` item, else None."""
        return next((i for i in self.findings.items if i.id.endswith("/rejects")), None)

    @property
    def limits(self) -> Finding | None:
        """The flow's ``*/evidence-limits`` item (evidence that cannot tell it all), else None."""
        return next((i for i in self.findings.items if i.id.endswith("/evidence-limits")), None)

    @property
    def timeout(self) -> float | None:
        """The ``client_timeout_s`` parameter in seconds, else None (also when it is not a
        number, or not above 0 and up to :data:`MAX_TIMEOUT_S`)."""
        value = self.findings.evidence.parameters.get("client_timeout_s")
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value) if 0 < value <= MAX_TIMEOUT_S else None  # NaN compares False

    def item(self, item_id: str) -> tuple[int, Finding] | None:
        return next(((n, i) for n, i in enumerate(self.findings.items) if i.id == item_id), None)

    def rows(self, item_id: str) -> tuple[dict[str, Any], ...]:
        found = self.item(item_id)
        return () if found is None else found[1].rows


def collect_findings(out: Path) -> tuple[FlowFindings, ...]:
    """Every findings document in ``out`` and in its subfolders (``out/*/findings.json``)."""
    folder = Path(out)
    if not folder.is_dir():
        raise ParameterError(
            "OUT is not a folder",
            value=str(folder),
            fix="give the --out folder of `incidentkit run FLOW` or of `incidentkit run all`",
        )
    paths = sorted([*folder.glob("findings.json"), *folder.glob("*/findings.json")])
    if not paths:
        raise ParameterError(
            "no findings.json in OUT or in its subfolders",
            value=str(folder),
            fix="run a flow first (incidentkit run FLOW --evidence PATH --out OUT), then give "
            "that OUT",
        )
    found = []
    for path in paths:
        rel = path.relative_to(folder).as_posix()
        try:
            findings = Findings.read(path)
        except (ParameterError, OSError, UnicodeDecodeError) as err:
            raise ParameterError(
                f"cannot read {rel}",
                value=str(err),
                fix="give a findings.json that incidentkit wrote, or run the flow again",
            ) from err
        page = path.parent / f"{findings.flow}.html"
        report = page.relative_to(folder).as_posix() if page.is_file() else None
        found.append(FlowFindings(rel, findings, report))
    return tuple(found)


class FlowRun(msgspec.Struct):
    """One flow of ``summary.json`` (``docs/scheduling.md``)."""

    exit_code: int | None = None
    status: str | None = None
    verdict: str | None = None
    error: str | None = None
    findings: str | None = None
    report: str | None = None
    notebook: str | None = None
    top_finding: dict[str, Any] | None = None
    parameters: dict[str, Any] | None = None
    seconds: float | None = None


class RunSummary(msgspec.Struct):
    """``run all``'s ``summary.json`` (``incidentkit.run-all/v1``); unknown keys are ignored."""

    schema: Literal["incidentkit.run-all/v1"]
    generated_by: str
    exit_code: int
    flows: dict[str, Any]  # name -> FlowRun, checked one by one to name the one that is wrong
    status: str | None = None
    pending: list[str] = msgspec.field(default_factory=list)
    skipped: dict[str, str] = msgspec.field(default_factory=dict)
    error: str | None = None
    evidence: str | None = None
    title: str | None = None
    as_of: str | None = None
    window: tuple[str, str] | None = None
    parameters: dict[str, Any] | None = None
    started_at: str | None = None
    finished_at: str | None = None
    stale: dict[str, Any] | None = None


def read_summary(out: Path) -> RunSummary | None:
    """``out/summary.json`` checked against its schema, or None when there is none."""
    path = Path(out) / "summary.json"
    if not path.is_file():
        return None
    fix = "give the OUT of `incidentkit run all` as it wrote it, or run it again"
    at = "$"
    try:
        summary = msgspec.json.decode(path.read_bytes(), type=RunSummary)
        for name, flow in summary.flows.items():
            at = f"$.flows[{name!r}]"
            summary.flows[name] = msgspec.convert(flow, FlowRun)
    except msgspec.ValidationError as err:
        raise misshapen("summary.json", err, RUN_ALL_SCHEMA, "docs/scheduling.md", at=at) from err
    except (msgspec.DecodeError, OSError, RecursionError) as err:
        raise ParameterError("cannot read summary.json", value=str(err), fix=fix) from err
    return summary
