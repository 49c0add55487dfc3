"""What a flow cannot conclude from lossy session evidence, said in its findings.

A Firestore export (ADK Java's ``FirestoreSessionService``) keeps no invocation ids, no
actions (no state deltas) and no call ids (:data:`incidentkit.sources.firestore.LIMITS`). A
flow run on it keeps what the ledger, spans, journal and logs still prove, drops the items and
summary counters that would rest on the missing facts (an orphan class needs the run's events;
a state verdict needs the deltas), and opens with an ``<flow>/evidence-limits`` item that says which
conclusions it withheld and why. The verdict is then ``INCOMPLETE_EVIDENCE``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from incidentkit.evidence import Evidence
from incidentkit.findings import Finding, Findings, Severity, Verdict
from incidentkit.sources import events, firestore

WITHHELD: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "orphans": (
        "no orphan classes: an orphan's class comes from the events of its invocation, and "
        "these events name none; crash loops, leases and duplicate effects (ledger and "
        "journal) still stand",
        (
            "orphans/not-started",
            "orphans/model-inflight",
            "orphans/tool-unanswered",
            "orphans/paused",
            "orphans/waiting",
            "orphans/actually-done",
            "orphans/unknown",
            "orphans/status-disagreements",
            "orphans/call-id-journal",
        ),
    ),
    "latency_cliff": (
        "no last-event shape of an open invocation: its events cannot be found without "
        "invocation ids; open invocations, the cliff and stuck threads (ledger, spans, dumps) "
        "still stand",
        ("latency_cliff/open-by-last-event",),
    ),
    "runaway": (
        "no model calls counted from the events (no invocation ids) and no loop exits (no "
        "state deltas or escalations): counts come from the ledger and spans only",
        ("runaway/loops",),
    ),
    "vanished_state": (
        "no state verdicts: without state deltas the kit cannot say which write set, "
        "overwrote or lost a key, so the per-key verdicts and the replay are withheld; the "
        "stored state is shown as it is, and overlapping invocations come from the ledger",
        ("vanished_state/keys", "vanished_state/replayed-state"),
    ),
    "session": (
        "no invocation boundaries in the events, no state deltas and no error codes: the "
        "transcript, the calls by name and the error responses are shown; overlapping "
        "invocations come from the ledger",
        (),
    ),
    "overview": (
        "no more than its card lines can: those for orphans and overlaps are only as good "
        "as the invocation ids these events lack, so open those flows for what they still tell",
        (),
    ),
}
"""Per flow: what it withholds on Firestore evidence, and the item ids that would rest on it."""

WITHHELD_COUNTS: Mapping[str, tuple[str, ...]] = {
    "orphans": ("orphans", "unanswered_calls", "calls", "status_disagreements"),
    "runaway": ("loops",),
    "vanished_state": (
        *("temp_prefix", "never_durable", "overwritten", "raced", "removed", "present"),
        "replay_differences",
    ),
    "session": ("invocations", "error_code_events"),
}
"""Per flow: summary counters resting on the same facts (a name also covers ``name.*``); they
are left out of the summary rather than shown as counts the evidence cannot give."""


def _withheld_count(flow: str, name: str) -> bool:
    return any(name == key or name.startswith(key + ".") for key in WITHHELD_COUNTS.get(flow, ()))


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
    return f"{_LOSSY}. This flow gives {WITHHELD[flow][0]}."


def with_limits(findings: Findings, evidence: Evidence) -> Findings:
    """``findings`` as they stand on lossy events: the items resting on missing facts dropped,
    an ``<flow>/evidence-limits`` item first, the verdict INCOMPLETE_EVIDENCE. Unchanged when
    the events keep what the flow needs."""
    if not is_lossy(evidence):
        return findings
    flow = findings.flow
    withheld, ids = WITHHELD.get(flow, ("", ()))
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
