"""The orphan flow's figures: runs per class and action, and one run's timeline.

Built on :mod:`incidentkit.plotting` (``fn(frames..., *, ax=None) -> Axes``, headless-safe).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from incidentkit.errors import ParameterError
from incidentkit.flows.orphans.triage import Action, OrphanClass, event_kinds, run_invocations
from incidentkit.frames import require_columns, spec_of
from incidentkit.plotting import new_axes

if TYPE_CHECKING:
    from matplotlib.axes import Axes

ACTION_COLOURS: dict[str, str] = {
    Action.REDRIVE: "#4c9f70",
    Action.REPLAY: "#8cc084",
    Action.ASK_DOWNSTREAM: "#e0a030",
    Action.MARK_DONE: "#5b8bd0",
    Action.MARK_PAUSED: "#9db8e0",
    Action.WAIT: "#b8c4d6",
    Action.PARK: "#c8553d",
    Action.INVESTIGATE: "#8e5ea2",
    Action.NONE: "#cccccc",
    Action.UNKNOWN: "#666666",
}
"""Bar colour per action kind: green re-drive, amber ask, blue mark, red park, purple look."""

EVENT_MARKERS: dict[str, tuple[str, str]] = {
    "user": ("o", "#333333"),
    "call": ("^", "#e0a030"),
    "response": ("v", "#4c9f70"),
    "final": ("*", "#5b8bd0"),
    "error": ("X", "#c8553d"),
    "text": (".", "#888888"),
}


def plot_orphan_classes(orphans: pd.DataFrame, *, ax: Axes | None = None) -> Axes:
    """Orphans per class as horizontal bars, each split and coloured by action kind."""
    require_columns(orphans, ["orphan_class", "action_kind"], what="the orphans frame")
    ax = new_axes(ax, (8.0, 3.5))
    classes = [cls.value for cls in OrphanClass]
    counts = (
        pd.crosstab(orphans["orphan_class"], orphans["action_kind"])
        .reindex(index=classes, fill_value=0)
        .reindex(columns=[a.value for a in Action], fill_value=0)
    )
    y = np.arange(len(classes))
    left = np.zeros(len(classes))
    for action in counts.columns:
        widths = counts[action].to_numpy(dtype=float)
        drawn = widths > 0
        if drawn.any():
            ax.barh(
                y[drawn],
                widths[drawn],
                left=left[drawn],
                color=ACTION_COLOURS[action],
                label=action,
            )
            left += widths
    for row, total in zip(y, left, strict=True):
        if total:
            ax.text(float(total), float(row), f" {int(total)}", va="center")
    ax.set_yticks(y, classes)
    ax.invert_yaxis()
    ax.set_xlabel("orphaned runs")
    ax.set_title(f"{len(orphans)} orphaned run(s) by class, coloured by action")
    if len(orphans):
        ax.legend(title="action", loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
        ax.set_xlim(0, max(left.max() * 1.15, 1))
    else:
        ax.text(0.5, 0.5, "no orphans", transform=ax.transAxes, ha="center", va="center")
    return ax


def plot_run_timeline(
    run_id: str,
    runs: pd.DataFrame,
    events: pd.DataFrame,
    journal: pd.DataFrame,
    spans: pd.DataFrame,
    *,
    calls: pd.DataFrame | None = None,
    responses: pd.DataFrame | None = None,
    ax: Axes | None = None,
) -> Axes:
    """One run's swimlanes: ledger lease, events by kind, journal INTENT/DONE, spans as bars.

    The x axis is seconds since the run's ``started_at`` (or its first event). Events are the
    run's invocation (the ledger's, or the one recovered from its user event); journal
    entries are those of that invocation or of its calls; spans those of the invocation.
    """
    for name, frame in (("runs", runs), ("events", events), ("journal", journal), ("spans", spans)):
        require_columns(frame, spec_of(name).names, what=f"the {name} frame")
    located = run_invocations(runs, events)
    match = located.index[located["run_id"] == run_id]
    if len(match) == 0:
        raise ParameterError(
            "run not in the ledger", value=run_id, fix="pick a run_id from the runs frame"
        )
    run = runs.iloc[int(match[0])]
    inv = located.loc[match[0], "invocation_id"]
    mine = events[(events["session_id"] == run["session_id"]) & (events["invocation_id"] == inv)]
    own = [] if calls is None else calls.loc[calls["invocation_id"] == inv, "call_id"].dropna()
    entries = journal[(journal["invocation_id"] == inv) | journal["function_call_id"].isin(own)]
    lanes = spans[spans["invocation_id"] == inv].sort_values(["start", "span_id"])

    times = [run["started_at"], *mine["ts"], *entries["created_at"], *lanes["start"]]
    known = [t for t in times if not pd.isna(t)]
    t0 = run["started_at"] if not pd.isna(run["started_at"]) else min(known, default=None)
    ax = new_axes(ax, (10.0, 2.0 + 0.3 * len(lanes)))

    def secs(values: Any) -> np.ndarray:
        stamps = pd.to_datetime(pd.Series(values, dtype=object), utc=True)
        seconds: np.ndarray = (stamps - t0).dt.total_seconds().to_numpy(dtype=float)
        return seconds

    # (x positions, lane, marker, colour, label) of every point drawn.
    points: list[tuple[np.ndarray, int, str, str, str]] = []
    kinds = event_kinds(mine, calls, responses)
    for kind, (marker, colour) in EVENT_MARKERS.items():
        points.append((secs(mine.loc[kinds == kind, "ts"]), 1, marker, colour, f"event: {kind}"))
    done = entries[entries["status"] == "DONE"]
    points.append((secs(entries["created_at"]), 2, "D", "#e0a030", "journal INTENT"))
    points.append((secs(done["updated_at"]), 2, "s", "#4c9f70", "journal DONE"))
    lease = secs([t0, run["lease_until"]]) if t0 is not None else np.array([np.nan, np.nan])
    starts, ends = secs(lanes["start"]), secs(lanes["end"])
    horizon = np.nanmax(np.concatenate([[0.0], lease, starts, ends, *(p[0] for p in points)]))

    if not np.isnan(lease).any():
        ax.barh(0, lease[1] - lease[0], left=lease[0], color="#b8c4d6", label="lease")
        status = f" {run['status']} · owner {run['owner']} · attempts {run['attempts']}"
        ax.text(float(lease[0]), 0.0, status, va="center", fontsize="small")
    for xs, lane, marker, colour, label in points:
        if len(xs):
            ax.scatter(
                xs, np.full(len(xs), lane), marker=marker, color=colour, s=60, label=label, zorder=3
            )
    unended = np.isnan(ends)
    failed = lanes["status"].fillna("").str.upper().eq("ERROR").to_numpy(dtype=bool)
    for row, (start, end, open_, bad) in enumerate(zip(starts, ends, unended, failed, strict=True)):
        ax.barh(
            3 + row,
            (horizon if open_ else end) - start,
            left=start,
            color="#c8553d" if bad else "#8e9aaf",
            hatch="//" if open_ else None,
            label="span (unended: hatched)" if row == 0 else None,
        )
    labels = ["ledger lease", "events", "journal", *lanes["name"].fillna("span").tolist()]
    ax.set_yticks(np.arange(len(labels)), labels)
    ax.invert_yaxis()
    when = "?" if t0 is None else pd.Timestamp(t0).strftime("%Y-%m-%d %H:%M:%SZ")
    ax.set_xlabel(f"seconds since {when} (UTC)")
    ax.set_title(f"run {run_id}\nsession {run['session_id']} · invocation {inv}", fontsize="medium")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    return ax
