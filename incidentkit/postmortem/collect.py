"""Reading an incident's findings: ``OUT/findings.json`` and ``OUT/*/findings.json``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from incidentkit.errors import ParameterError
from incidentkit.findings import Finding, Findings, Verdict

ORPHAN_ITEMS = tuple(
    f"orphans/{kind}"
    for kind in (
        "not-started",
        "model-inflight",
        "tool-unanswered",
        "paused",
        "actually-done",
        "unknown",
    )
)
"""The orphans flow's items of orphaned runs, one per orphan class."""
EVIDENCE_ITEMS = (
    *("/rejects", "/no-latency-source", "/no-model-calls", "/empty-ledger"),
    "/evidence-limits",
)
"""Endings of the item ids that speak of the evidence, not of the incident."""
NAVIGATION_FLOWS = frozenset({"overview"})
"""Flows whose findings point to the other flows (which to open first), not to a fix: the draft
leaves them out of the root cause, the detection and the action items."""


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
    def failed(self) -> Finding | None:
        """The ``run/error`` item of a run that stopped before its verdict, else None."""
        return next((i for i in self.findings.items if i.id == "run/error"), None)

    @property
    def navigates(self) -> bool:
        """Whether the flow is a triage card (:data:`NAVIGATION_FLOWS`), not a diagnosis."""
        return self.flow in NAVIGATION_FLOWS

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
        """The ``client_timeout_s`` parameter in seconds, else None."""
        value = self.findings.evidence.parameters.get("client_timeout_s")
        return float(value) if isinstance(value, int | float) else None

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
