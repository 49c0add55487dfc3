"""Scheduled runs: the run's as_of, stale evidence, output folders that never overwrite.

``docs/scheduling.md`` shows the cron, systemd and Airflow set-ups these serve.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pandas as pd

from incidentkit.errors import ParameterError
from incidentkit.findings import Finding, Severity, iso_text
from incidentkit.flows import common as flows_common
from incidentkit.manifest import Manifest, Window
from incidentkit.outputs import exclusive, out_folder
from incidentkit.times import parse_duration, utc_timestamp

STAMP = "%Y-%m-%dT%H%M%SZ"
"""The name of a ``--timestamped`` run's folder: its as_of (else its start) in UTC."""
LATEST = "latest"
STALE_ID = "run/stale-evidence"
STALE_AFTER = flows_common.STALE_AFTER
"""How far as_of may lie past the evidence's end when the manifest has no window."""


def now() -> pd.Timestamp:
    """The current time in UTC, rounded up to the second (nothing stored so far is after it)."""
    return pd.Timestamp.now(tz="UTC").ceil("s")


def parse_as_of(text: str | None) -> pd.Timestamp | None:
    """``--as-of``: ``now``, or a time with a UTC offset; None when not given."""
    if text is None or not text.strip():
        return None
    if text.strip().lower() == "now":
        return now()
    return utc_timestamp(text.strip(), what="--as-of")


def parse_stale_after(text: str | None) -> pd.Timedelta | None:
    """``--stale-after``: a duration such as ``2h`` or ``30m``; None when not given."""
    if text is None:
        return None
    return parse_duration(
        text,
        problem="--stale-after must be a positive duration",
        fix="give e.g. --stale-after 2h (or 30m, 90s, 1d)",
    )


def run_window(manifest: Manifest, as_of: pd.Timestamp | None) -> Window | None:
    """The manifest's window as the run reads it: a relative one ends at ``as_of``."""
    window = manifest.filters.window
    return window if window is None or as_of is None else window.anchored(as_of)


def evidence_end(
    manifest: Manifest, as_of: pd.Timestamp | None, *, environ: Mapping[str, str] | None = None
) -> tuple[pd.Timestamp | None, str | None]:
    """The latest time in the evidence the run reads (its window) and the frame it is in;
    (None, None) when no source holds a row there. Sources that cannot be read are left out
    (the flows report them)."""
    from incidentkit.coverage import measure
    from incidentkit.evidence import Evidence

    filters = replace(manifest.filters, window=run_window(manifest, as_of))
    coverage = measure(Evidence(manifest, filters=filters, environ=environ))
    ends = [(utc_timestamp(f.end, what="end"), f.frame) for f in coverage.frames if f.end]
    if not ends:
        return None, None
    latest, frame = max(ends, key=lambda pair: pair[0])
    return latest, frame


def stale_finding(
    as_of: pd.Timestamp,
    end: pd.Timestamp | None,
    frame: str | None,
    *,
    window: Window | None,
    stale_after: pd.Timedelta | None = None,
) -> Finding | None:
    """``run/stale-evidence`` (WARNING) when ``as_of`` lies past the evidence's ``end`` by more
    than the stale limit (``stale_after``, default the window's length, else
    :data:`STALE_AFTER`: :func:`~incidentkit.flows.common.stale_limit`), or when the window
    holds no row at all; None when the evidence is fresh. The flows judge ages at the
    evidence's end then (:func:`~incidentkit.flows.common.judge`), and the item says so."""
    limit = flows_common.stale_limit(window, stale_after)
    action = (
        "Check that the exporters still write this incident's evidence (ledger, event log, "
        "spans, logs) and that the manifest points at the current files or tables; until then "
        "the verdict says nothing about the time judged."
    )
    base = {"as_of": as_of, "stale_after_s": limit.total_seconds()}
    if window is not None:
        base["window"] = f"{iso_text(window.start)} .. {iso_text(window.end)}"
    if end is None:
        return Finding(
            STALE_ID,
            Severity.WARNING,
            "no evidence row in the window judged",
            f"No source of the manifest holds a row in the window read for as_of "
            f"{iso_text(as_of)}.",
            action,
            ({**base, "evidence_end": None, "frame": None, "behind_s": None},),
        )
    behind = as_of - end
    if behind <= limit:
        return None
    span = flows_common.span_text
    return Finding(
        STALE_ID,
        Severity.WARNING,
        f"the evidence ends {span(behind)} before as_of",
        f"The latest row ({frame}, {iso_text(end)}) is {span(behind)} before as_of "
        f"{iso_text(as_of)}, more than the {span(limit)} allowed. Ages (leases, open "
        "invocations) are judged at the evidence's end, not at as_of: a lease that expired "
        "after the evidence ended is not counted as an orphan.",
        action,
        ({**base, "evidence_end": end, "frame": frame, "behind_s": behind.total_seconds()},),
    )


def stamped_folder(out: str | os.PathLike[str], at: pd.Timestamp) -> Path:
    """A new folder ``out/<at as 2026-12-02T061500Z>`` (``-2``, ``-3`` ... when taken): a
    scheduled run never writes into an earlier run's folder."""
    root = out_folder(
        out, fix="give a folder: each --timestamped run writes a new folder inside it"
    )
    name = at.tz_convert("UTC").strftime(STAMP)
    for attempt in range(1, 1000):
        folder = root / (name if attempt == 1 else f"{name}-{attempt}")
        with contextlib.suppress(FileExistsError):
            folder.mkdir()  # atomic: of two runs in one second, each gets its own folder
            return folder
    raise ParameterError(
        "too many runs in one second", value=str(root / name), fix="run less often"
    )


def point_latest(folder: Path) -> Path:
    """Point ``<folder's parent>/latest`` at ``folder`` unless it already points at a later run
    (a folder named after a later as_of): runs that finish out of order never move it back.
    The link is replaced atomically (a reader sees the previous run or this one, never no
    link), under a lock, so two runs never race for it; returns the link."""
    link = folder.parent / LATEST
    if link.exists() and not link.is_symlink():
        raise ParameterError(
            f"{LATEST} beside the run folders is not a symlink",
            value=str(link),
            fix=f"remove or rename it; --timestamped keeps {LATEST} pointing at the last run",
        )
    with exclusive(folder.parent):
        current = os.readlink(link) if link.is_symlink() else None
        if current is not None and _run_order(current) > _run_order(folder.name):
            return link
        temporary = folder.parent / f".{LATEST}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        os.symlink(folder.name, temporary)  # relative: the tree can move
        os.replace(temporary, link)
    return link


def _run_order(name: str) -> tuple[str, int]:
    """A run folder's place in time: its stamp, then its ``-N`` suffix as a number."""
    stamp, _, suffix = Path(name).name.partition("Z-")
    return (stamp, int(suffix)) if suffix.isdigit() else (Path(name).name.removesuffix("Z"), 1)
