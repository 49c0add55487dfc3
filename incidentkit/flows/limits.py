"""What a flow cannot conclude from lossy session evidence, said in its findings.

A Firestore export (ADK Java's ``FirestoreSessionService``) keeps no invocation ids, no
actions (no state deltas) and no call ids (:data:`incidentkit.sources.firestore.LIMITS`). A
flow run on it keeps what the ledger, spans, journal and logs still prove, drops the items and
summary counters that would rest on the missing facts (an orphan class needs the run's events;
a state verdict needs the deltas), and opens with an ``<flow>/evidence-limits`` item that says which
conclusions it withheld and why. The verdict is then ``INCOMPLETE_EVIDENCE``.

The BigQuery Agent Analytics table keeps invocations, calls, answers and deltas, but not all
of them (:data:`incidentkit.sources.bigquery_analytics.LIMITS`): a flow run on it keeps its
findings and verdict, opens with an INFO ``<flow>/evidence-limits`` item naming what the table
hid or lost here (keys logged as ``[REDACTED]``, invocations without ``INVOCATION_COMPLETED``:
open or dropped by the plugin, truncated text), and gives no verdict on a key whose writes
were logged as ``[REDACTED]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pandas as pd

from incidentkit.evidence import Evidence
from incidentkit.findings import Finding, Findings, Severity, Verdict, verdict_of
from incidentkit.frames import rejects_frame
from incidentkit.sources import bigquery_analytics, events, firestore

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
        *("rewound", "replay_differences"),
    ),
    "session": (
        *("invocations", "error_code_events"),
        *("compactions", "rewinds", "checkpoints", "rewound_events"),
    ),
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
    an ``<flow>/evidence-limits`` item first, the verdict INCOMPLETE_EVIDENCE. On the BigQuery
    Agent Analytics table, the limits it shows here said first (:func:`with_table_limits`).
    Unchanged when the events keep what the flow needs."""
    if is_analytics(evidence):
        return with_table_limits(findings, evidence)
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


# -- the BigQuery Agent Analytics table ------------------------------------------------------------

TABLE_MEANS: Mapping[str, str] = {
    "orphans": "an invocation with no INVOCATION_COMPLETED may be one whose rows the plugin "
    "dropped, not a run that died; calls pair with answers by name and order",
    "latency_cliff": "an invocation with no INVOCATION_COMPLETED is open, or its rows were "
    "dropped by the plugin; run times are the plugin's latency_ms",
    "runaway": "model calls are the finished LLM_RESPONSE rows; the call a limit refused is an "
    "LLM_REQUEST with no response, and not counted",
    "vanished_state": "keys logged as [REDACTED] get no verdict; a user message's delta is read "
    "from the session state logged around it, and deltas of dropped rows are lost",
    "session": "the transcript is the rows' text, cut where the plugin truncated it; compaction "
    "and rewind events are not in the table",
    "overview": "its card lines rest on the rows the plugin did not drop",
}
"""Per flow: what the table's limits mean for it."""

TABLE_LIMITS: Mapping[str, tuple[str, ...]] = {
    "orphans": ("dropped", "call_ids"),
    "latency_cliff": ("dropped",),
    "runaway": ("dropped",),
    "vanished_state": ("redacted", "user_delta", "dropped"),
    "session": ("redacted", "dropped", "truncated", "markers"),
    "overview": ("dropped", "redacted"),
}
"""Per flow: the limits (:data:`incidentkit.sources.bigquery_analytics.LIMITS`) its title
says when they show in the evidence."""


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
    relevant = TABLE_LIMITS.get(flow, tuple(found))
    shown = [str(found[name]["here"]) for name in relevant if found[name]["here"]]
    title = "The events come from the BigQuery Agent Analytics table: " + (
        "; ".join(shown) if shown else "nothing it hides or loses shows here"
    )
    means = TABLE_MEANS.get(flow, "read its findings beside these limits")
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
