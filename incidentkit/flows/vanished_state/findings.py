"""The vanished-state flow's findings: a verdict per key with the writes that prove it, the
invocations that overlapped on the session, and the replayed state beside the stored one.

Item ids and row fields are a contract (``docs/findings.md``); scripts read them.
"""

from __future__ import annotations

from typing import Unpack

import pandas as pd

from incidentkit.findings import ROW_LIMIT, Finding, Findings, FindingsContext, Severity, rows_of
from incidentkit.flows.vanished_state.overlaps import FIX as OVERLAP_FIX
from incidentkit.flows.vanished_state.triage import VanishedReport
from incidentkit.flows.vanished_state.verdicts import SETTLED, KeyVerdict, fix_of

FLOW = "vanished_state"
KEY_ROW = ["key", "verdict", "cause", "why", "value", "written_by", "changed_by", "raced_with"]
OVERLAP_ROW = ["session_id", "invocation_a", "invocation_b", "a_start", "a_end", "b_start", "b_end"]
REPLAYED_ROW = ["key", "scope", "value", "stored_value", "matches"]
TITLE_ORDER = (
    *(KeyVerdict.NEVER_DURABLE, KeyVerdict.TEMP_PREFIX, KeyVerdict.RACED),
    *(KeyVerdict.OVERWRITTEN, KeyVerdict.REMOVED, KeyVerdict.REWOUND, KeyVerdict.PRESENT),
)
"""The order a title names keys in: the four causes first, the controls last."""


SHOWN_KEYS = 4
"""Keys a title names with their proof; the rest are counted."""


def _keys(report: VanishedReport, limit: int | None) -> Finding:
    keys = report.keys
    session = report.ref.session_id
    rank = keys["verdict"].map({v.value: k for k, v in enumerate(TITLE_ORDER)})
    ordered = keys.iloc[rank.argsort(kind="stable")]  # the causes of forgetting first
    lost = ordered.loc[~ordered["verdict"].isin(SETTLED)]
    rewound = ordered.loc[ordered["verdict"].eq(KeyVerdict.REWOUND)]
    present = len(keys) - len(lost) - len(rewound)
    if len(lost) or len(rewound):
        kept = f" ({present} other key(s) present)" if present else ""
        parts = []
        if len(lost):
            parts.append(
                f"{len(lost)} of {len(keys)} key(s) of session {session} did not stick: "
                + _named(lost)
            )
        if len(rewound):
            were = f"{len(rewound)} key(s)" if len(lost) else f"{len(rewound)} of {len(keys)} "
            were += "" if len(lost) else f"key(s) of session {session}"
            parts.append(f"{were} rolled back by a rewind (Runner.rewind_async): {_named(rewound)}")
        title = "; ".join(parts) + kept
        fixes = dict.fromkeys([*lost["fix"], *rewound["fix"]])
        if len(report.overlaps):  # the overlap item carries the race's fix
            fixes.pop(fix_of(KeyVerdict.RACED, None), None)
        action = " ".join(fixes) or "Serialize invocations per session (next item)."
    else:
        title = f"all {len(keys)} key(s) of session {session} are present: " + "; ".join(
            keys["brief"].head(SHOWN_KEYS)
        )
        action = fix_of(KeyVerdict.PRESENT, None) if len(keys) else "None."
    detail = " ".join(
        f"{row['key']}: {str(row['why']).rstrip('.')}." for row in ordered.to_dict("records")
    )
    severity = Severity.WARNING if len(lost) or len(rewound) else Severity.INFO
    rows = rows_of(keys, [*KEY_ROW, "fix", "brief", "suspects"], limit=limit)
    return Finding(f"{FLOW}/keys", severity, title, detail, action, rows, len(keys))


def _named(keys: pd.DataFrame) -> str:
    """The first :data:`SHOWN_KEYS` keys' briefs, and how many more."""
    more = f"; and {len(keys) - SHOWN_KEYS} more" if len(keys) > SHOWN_KEYS else ""
    return "; ".join(keys["brief"].head(SHOWN_KEYS)) + more


def _overlaps(report: VanishedReport, limit: int | None) -> Finding | None:
    pairs = report.overlaps
    if pairs.empty:
        return None
    first = pairs.iloc[0]
    return Finding(
        f"{FLOW}/overlapping-invocations",
        Severity.WARNING,
        f"{len(pairs)} pair(s) of invocations ran at the same time on session "
        f"{report.ref.session_id}: {first['invocation_a']} ({_span(first, 'a')}) and "
        f"{first['invocation_b']} ({_span(first, 'b')})",
        "Both started from the same session snapshot, so the later write of a key wins and the "
        "other's change is lost (or a database session service rejects the stale append). Two "
        "invocations seconds apart on one session are a double submit or a retrying client.",
        OVERLAP_FIX,
        rows_of(pairs, [*OVERLAP_ROW, "source"], limit=limit),
        len(pairs),
    )


def _span(row: pd.Series, side: str) -> str:
    start, end = row[f"{side}_start"], row[f"{side}_end"]
    return f"{start:%H:%M:%S.%f}"[:-3] + f"–{end:%H:%M:%S.%f}"[:-3] + " UTC"


def _replayed(report: VanishedReport, limit: int | None) -> Finding:
    replayed = report.replayed
    differ = report.differences
    if not report.store_keeps_state:
        title = (
            f"replayed {len(replayed)} key(s) from the stored deltas; the evidence holds no "
            "stored state to compare them with"
        )
        severity = Severity.INFO
        action = "None; add the session store to [events] to compare."
    elif len(differ):
        title = (
            f"{len(differ)} key(s) differ between the replayed deltas and the stored state: "
            + ", ".join(differ["key"].head(5))
        )
        severity = Severity.WARNING
        action = (
            "A stored value no replayed delta explains was written past the event log (a "
            "direct write to the store, or another session's events that were not read); a "
            "key replayed but not stored was lost on the way to storage: check the writer and "
            "the store."
        )
    else:
        title = f"the replayed state equals the stored state ({len(replayed)} key(s))"
        severity = Severity.INFO
        action = "None."
    return Finding(
        f"{FLOW}/replayed-state",
        severity,
        title,
        "The session's stored deltas applied in event order as ADK applies them (partial events "
        "and temp: keys skipped, a removal deletes, app:/user: keys from every session of the "
        "app and the user), starting from the stored keys no delta names (state given to "
        "create_session), beside the state the store keeps; a stored null counts as absent.",
        action,
        rows_of(replayed, [*REPLAYED_ROW, "stored_in", "origin"], limit=limit),
        len(replayed),
    )


def vanished_state_findings(report: VanishedReport, **context: Unpack[FindingsContext]) -> Findings:
    """The findings of the vanished-state flow, from :func:`.triage.triage_vanished_state`,
    with ``context`` (:class:`~incidentkit.findings.FindingsContext`).

    Verdict: INCOMPLETE_EVIDENCE when ``rejects`` (unread rows of the flow's sources) is not
    empty; else ACTION_NEEDED when a key did not stick or was rolled back by a rewind (REWOUND:
    no failure to keep state, but to be read: was the rewind meant?), invocations overlapped
    or the replay differs from the stored state; else CLEAN (every key present: the bug is on
    the read side).
    """
    limit = context.get("row_limit", ROW_LIMIT)
    items = (_keys(report, limit), _overlaps(report, limit), _replayed(report, limit))
    counts = report.keys["verdict"].value_counts()
    summary = {
        "keys": len(report.keys),
        **{v.value.lower(): int(counts.get(v.value, 0)) for v in KeyVerdict},
        "overlapping_invocations": len(report.overlaps),
        "replay_differences": len(report.differences),
    }
    return Findings.build(FLOW, items, summary, as_of=report.as_of, **context)
