"""The overview flow: the triage card, every flow's cheap
check on every app of the incident, ordered by the reported symptom; and slow death, the
classes that grow between heap histograms.

- ``card``: :data:`SYMPTOMS` (what each symptom opens first), :func:`triage_card` (every
  flow's declared check, each in its own folder's module);
- ``jvm_checks``: the overview's own checks, classes that grow and the heap after GC;
- ``growth``: :func:`growing_classes` between ``jcmd GC.class_histogram`` dumps;
- ``triage``: :func:`triage_overview` and :class:`OverviewReport`; ``findings``; ``steps``
  (with ``card_engine``, the card computed in the database: :mod:`incidentkit.flows.engine_card`).
"""

from incidentkit.flows.overview.card import CHECKS, SEVERITY_RANK, SYMPTOMS, Profile, triage_card
from incidentkit.flows.overview.findings import overview_findings
from incidentkit.flows.overview.steps import (
    SECTIONS,
    coverage,
    findings,
    first_evidence,
    setup,
    table,
    triage,
)
from incidentkit.flows.overview.triage import OverviewReport, triage_overview

__all__ = [
    "CHECKS",
    "SECTIONS",
    "SEVERITY_RANK",
    "SYMPTOMS",
    "OverviewReport",
    "Profile",
    "coverage",
    "findings",
    "first_evidence",
    "overview_findings",
    "setup",
    "table",
    "triage",
    "triage_card",
    "triage_overview",
]
