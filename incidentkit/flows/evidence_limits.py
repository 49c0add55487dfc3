"""What a flow cannot conclude from lossy session evidence, said in its findings.

A Firestore export (ADK Java's ``FirestoreSessionService``) keeps no invocation ids, no
actions (no state deltas) and no call ids (:data:`incidentkit.sources.events.firestore.LIMITS`). A
flow run on it keeps what the ledger, spans, journal and logs still prove, drops the items and
summary counters that would rest on the missing facts (an orphan class needs the run's events;
a state verdict needs the deltas), and opens with an ``<flow>/evidence-limits`` item that says which
conclusions it withheld and why. The verdict is then ``INCOMPLETE_EVIDENCE``.

The BigQuery Agent Analytics table keeps invocations, calls, answers and deltas, but not all
of them (:data:`incidentkit.sources.events.bigquery_analytics.LIMITS`): a flow run on it keeps its
findings and verdict, opens with an INFO ``<flow>/evidence-limits`` item naming what the table
hid or lost here (keys logged as ``[REDACTED]``, invocations without ``INVOCATION_COMPLETED``:
open or dropped by the plugin, truncated text), and gives no verdict on a key whose writes
were logged as ``[REDACTED]``.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from incidentkit.evidence import Evidence
from incidentkit.findings import Finding, Findings, Severity, Verdict, verdict_of
from incidentkit.flows import FLOWS, EvidenceLimits
from incidentkit.frames import rejects_frame
from incidentkit.sources import events
from incidentkit.sources.events import bigquery_analytics, firestore


def _limits(flow: str) -> EvidenceLimits:
    """What ``flow`` declares of lossy evidence (a flow the registry lacks: the defaults)."""
    found = FLOWS.get(flow)
    return found.limits if found is not None else EvidenceLimits()


def _withheld_count(flow: str, name: str) -> bool:
    counts = _limits(flow).withheld_counts
    return any(name == key or name.startswith(key + ".") for key in counts)


def is_lossy(evidence: Evidence) -> bool:
    """Whether the evidence's events come from a store that keeps no invocation ids (asked of
    the manifest's ``[events]``, without loading them)."""
    spec = evidence.sources.get("events")
    return spec is not None and events.export_format(spec) == firestore.FORMAT


_LOSSY = (
    "The events come from a Firestore export, which keeps no invocation ids, actions, call "
    "ids or error codes"
)


def note(evidence: Evidence, flow: str) -> str | None:
    """The line a flow's notes open with on lossy events (None when the events are whole)."""
    if not is_lossy(evidence):
        return None
    return f"{_LOSSY}. This flow gives {_limits(flow).withheld}."


def with_limits(findings: Findings, evidence: Evidence) -> Findings:
    """``findings`` as they stand on lossy events: the items resting on missing facts dropped,
    an ``<flow>/evidence-limits`` item first, the verdict INCOMPLETE_EVIDENCE. On the BigQuery
    Agent Analytics table, the limits it shows here said first (:func:`with_table_limits`).
    Unchanged when the events keep what the flow needs."""
    if is_analytics(evidence):
        return with_table_limits(findings, evidence)
    if not is_lossy(evidence):
        return findings
    flow = findings.flow
    declared = _limits(flow)
    withheld, ids = declared.withheld, declared.withheld_items
    dropped = [item for item in findings.items if item.id in ids]
    kept = [item for item in findings.items if item.id not in ids]
    rows = tuple({"limit": limit, "source": firestore.FORMAT} for limit in firestore.LIMITS)
    item = Finding(
        f"{flow}/evidence-limits",
        Severity.WARNING,
        f"{_LOSSY}: some conclusions are withheld",
        f"This flow gives {withheld}."
        + (
            f" Withheld: {', '.join(sorted({d.id for d in dropped}))}."
            if dropped
            else " Nothing it found rested on the missing facts."
        ),
        "Read what the ledger, spans and logs prove here. For a full verdict, keep sessions "
        "in a store that records invocations and actions (ADK's VertexAiSessionService or a "
        "database session service).",
        rows=rows,
    )
    summary = {k: v for k, v in findings.summary.items() if not _withheld_count(flow, k)}
    return replace(
        findings, verdict=Verdict.INCOMPLETE_EVIDENCE, summary=summary, items=(item, *kept)
    )


# -- the BigQuery Agent Analytics table ------------------------------------------------------------


def is_analytics(evidence: Evidence) -> bool:
    """Whether ``[events]`` is the BigQuery Agent Analytics table (asked without loading it)."""
    spec = evidence.sources.get("events")
    return spec is not None and events.export_format(spec) == bigquery_analytics.FORMAT


def hidden_keys(evidence: Evidence) -> frozenset[str]:
    """The state keys the table logged only as ``[REDACTED]``: no verdict rests on them."""
    if not is_analytics(evidence):
        return frozenset()
    return bigquery_analytics.hidden_keys(_warnings(evidence))


def _warnings(evidence: Evidence) -> pd.DataFrame:
    loaded = evidence.source("events")
    return loaded.warnings if loaded is not None else rejects_frame([], "warnings")


def with_table_limits(findings: Findings, evidence: Evidence) -> Findings:
    """``findings`` on the BigQuery Agent Analytics table: an INFO ``<flow>/evidence-limits``
    item first, with what the table hid or lost here; the verdicts on keys logged as
    ``[REDACTED]`` withheld. The verdict stands."""
    flow = findings.flow
    warnings = _warnings(evidence)
    found = bigquery_analytics.limit_rows(warnings)
    rows = tuple(found.values())
    hidden = bigquery_analytics.hidden_keys(warnings)
    items = [_without_keys(item, hidden) for item in findings.items]
    withheld = sorted(
        {
            str(row.get("key"))
            for item in findings.items
            if item.id == f"{flow}/keys"
            for row in item.rows
            if row.get("key") in hidden
        }
    )
    declared = _limits(flow)
    relevant = tuple(found) if declared.table_limits is None else declared.table_limits
    shown = [str(found[name]["here"]) for name in relevant if found[name]["here"]]
    title = "The events come from the BigQuery Agent Analytics table: " + (
        "; ".join(shown) if shown else "nothing it hides or loses shows here"
    )
    means = declared.table_means
    detail = f"For this flow: {means}." + (
        f" No verdict on {', '.join(withheld)}: logged as [REDACTED]." if withheld else ""
    )
    item = Finding(
        f"{flow}/evidence-limits",
        Severity.INFO,
        title,
        detail,
        "Keep the ADK session store as evidence beside the table where the limits matter; "
        "to lose no rows, raise BigQueryLoggerConfig.queue_max_size and watch the plugin's "
        "get_drop_stats().",
        rows=rows,
    )
    kept = tuple(found for found in items if found is not None)
    verdict = findings.verdict
    if verdict is Verdict.ACTION_NEEDED:  # it may have rested on a withheld key
        verdict = verdict_of(kept, incomplete=False)
    return replace(findings, verdict=verdict, items=(item, *kept))


def _without_keys(item: Finding, hidden: frozenset[str]) -> Finding | None:
    """``item`` less its rows about keys in ``hidden`` (a key-verdict item only); None when
    nothing else is left."""
    if not hidden or not item.id.endswith("/keys"):
        return item
    kept = tuple(row for row in item.rows if row.get("key") not in hidden)
    if len(kept) == len(item.rows):
        return item
    if not kept:
        return None
    briefs = "; ".join(str(row.get("brief") or row.get("key")) for row in kept[:4])
    lost = any(row.get("verdict") != "PRESENT" for row in kept)
    return replace(
        item,
        severity=Severity.WARNING if lost else Severity.INFO,
        title=f"{len(kept)} key(s) judged (those logged as [REDACTED] withheld): {briefs}",
        detail=" ".join(f"{row.get('key')}: {row.get('why')}" for row in kept),
        rows=kept,
        count=len(kept),
    )
