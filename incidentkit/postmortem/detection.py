"""The Detection section: per flow, which alert saw the incident or would have seen it sooner
(each flow's postmortem module says it: ``detection``)."""

from __future__ import annotations

from collections.abc import Sequence

from incidentkit.postmortem.collect import FlowFindings
from incidentkit.postmortem.text import TODO


def _lines(ff: FlowFindings) -> list[str]:
    """The flow's detection lines; none from a flow without a postmortem module."""
    module = ff.module()
    return [] if module is None else module.detection(ff)


def detection(sources: Sequence[FlowFindings]) -> list[str]:
    """The Detection section's lines, from every flow whose run reached a verdict other than
    CLEAN (a CLEAN flow had nothing to detect, nothing to stop sooner)."""
    lines = [
        line
        for ff in sources
        if ff.failed is None and not ff.clean and not ff.navigates
        for line in _lines(ff)
    ]
    return [
        *(lines or ["- The findings name no alert."]),
        "",
        f"> {TODO} how was the incident detected (alert, ticket, customer report), when, and "
        "how long after it began?",
    ]
