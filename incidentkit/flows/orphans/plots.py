"""The orphan flow's figures: runs per class and action, and one run's timeline.

Built on :mod:`incidentkit.plotting` (``fn(frames..., *, ax=None) -> Axes``, headless-safe).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from incidentkit.errors import ParameterError
from incidentkit.flows.orphans.triage import Action, OrphanClass, event_kinds, run_invocations
from incidentkit.frames import JournalStatus, require_columns, spec_of
from incidentkit.plotting import SECOND, clock_text, date_numbers, new_axes, utc_time_axis

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
    """One run's swimlanes on a UTC clock: the ledger lease, events by kind, journal
    INTENT/DONE, spans as bars.

    The view zooms to where the run's events, journal entries and spans are (and its lease
    expiry, when near). The lease is drawn as the ledger records it: acquired at
    ``started_at``, last renewed at ``updated_at``, expiring at ``lease_until``; a moment out of
    view is named at the edge instead. Markers that would overlap are spread apart vertically
    within their lane. Events are the run's invocation (the ledger's, or the one recovered from
    its user event); journal entries those of that invocation or of its calls; spans those of
    the invocation.
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
    ax = new_axes(ax, (10.0, 2.2 + 0.3 * len(lanes)))

    num = date_numbers
    kinds = event_kinds(mine, calls, responses)
    done = entries[entries["status"] == JournalStatus.DONE]
    points: list[tuple[np.ndarray, int, str, str, str]] = [
        (num(mine.loc[kinds == kind, "ts"]), 1, marker, colour, f"event: {kind}")
        for kind, (marker, colour) in EVENT_MARKERS.items()
    ]
    points.append((num(entries["created_at"]), 2, "D", "#e0a030", "journal INTENT"))
    points.append((num(done["updated_at"]), 2, "s", "#4c9f70", "journal DONE"))
    starts, ends = num(lanes["start"]), num(lanes["end"])
    acquired, renewed, expiry = num([run["started_at"], run["updated_at"], run["lease_until"]])
    left, right = _view(
        np.concatenate([starts, ends, *(p[0] for p in points)]), acquired, renewed, expiry
    )

    _draw_lease(ax, acquired, renewed, expiry, left, right)
    points = [(xs[~np.isnan(xs)], lane, m, c, label) for xs, lane, m, c, label in points]
    for lane in sorted({p[1] for p in points}):
        in_lane = [p for p in points if p[1] == lane]
        # Spread over the whole lane, so markers of different kinds at one moment part too.
        offsets = _spread(np.concatenate([p[0] for p in in_lane]), (right - left) / 80)
        for xs, _, marker, colour, label in in_lane:
            ys, offsets = lane + offsets[: len(xs)], offsets[len(xs) :]
            if len(xs):
                ax.scatter(xs, ys, marker=marker, color=colour, s=50, label=label, zorder=3)
    unended = np.isnan(ends)
    failed = lanes["status"].fillna("").str.upper().eq("ERROR").to_numpy(dtype=bool)
    for row, (start, end, open_, bad) in enumerate(zip(starts, ends, unended, failed, strict=True)):
        ax.barh(
            3 + row,
            (right if open_ else end) - start,
            left=start,
            height=0.6,
            color="#c8553d" if bad else "#8e9aaf",
            hatch="//" if open_ else None,
            label="span (unended: hatched)" if row == 0 else None,
        )
    lease = f"ledger lease\n{run['status']} · {run['owner']} · attempts {run['attempts']}"
    labels = [lease, "events", "journal", *lanes["name"].fillna("span").tolist()]
    ax.set_yticks(np.arange(len(labels)), labels)
    ax.set_ylim(len(labels) - 0.4, -0.6)
    utc_time_axis(ax, left, right, bins=5)
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_title(f"run {run_id}\nsession {run['session_id']} · invocation {inv}", fontsize="medium")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    return ax


def _view(
    moments: np.ndarray, acquired: float, renewed: float, expiry: float
) -> tuple[float, float]:
    """The x range: where the run's evidence is, widened to its lease moments when near."""
    focus = moments[~np.isnan(moments)]
    ledger = np.array([t for t in (acquired, renewed, expiry) if not np.isnan(t)])
    if not len(focus):
        focus = ledger
    if not len(focus):
        return 0.0, 1.0
    low, high = float(focus.min()), float(focus.max())
    reach = max(high - low, 10 * SECOND)
    for moment in ledger:  # a lease moment within half the span again is worth showing
        if low - reach / 2 <= moment <= high + reach / 2:
            low, high = min(low, moment), max(high, moment)
    pad = max((high - low) * 0.05, SECOND)
    return low - pad, high + pad


def _spread(xs: np.ndarray, near: float) -> np.ndarray:
    """Vertical offsets that keep markers closer than ``near`` on x apart (0, -, +, --, ++)."""
    order = np.argsort(xs, kind="stable")
    offsets = np.zeros(len(xs))
    steps = (0.0, -0.18, 0.18, -0.34, 0.34)
    run, last = 0, -np.inf
    for i in order:
        run = run + 1 if xs[i] - last < near else 0
        last = xs[i] if run == 0 else last
        offsets[i] = steps[run % len(steps)]
    return offsets


def _draw_lease(
    ax: Axes,
    acquired: float,
    renewed: float,
    expiry: float,
    left: float,
    right: float,
) -> None:
    """The lease lane: acquired, last renewal, the held span and the expiry; off-view moments
    are named at the edge."""
    held_from = renewed if not np.isnan(renewed) else acquired
    if not np.isnan(held_from) and not np.isnan(expiry):
        start, end = max(held_from, left), min(expiry, right)
        if end > start:
            ax.barh(0, end - start, left=start, height=0.5, color="#b8c4d6", label="lease held")
    marks = (
        (acquired, "|", "acquired"),
        (renewed, "o", "last renewal"),
        (expiry, "x", "lease expires"),
    )
    for moment, marker, label in marks:
        if np.isnan(moment) or (label == "last renewal" and moment == acquired):
            continue  # never renewed: the acquisition says it
        if left <= moment <= right:
            ax.scatter([moment], [0], marker=marker, color="#34495e", s=70, zorder=4, label=label)
            if label == "lease expires":
                ax.axvline(moment, color="#c8553d", linestyle="--", linewidth=0.8)
        else:
            at = clock_text(moment, fine=False)
            edge, align, arrow = (left, "left", "← ") if moment < left else (right, "right", "")
            text = f"{arrow}{label} {at}" + (" →" if moment > right else "")
            ax.text(edge, 0.3, f" {text} ", ha=align, va="center", fontsize="x-small")
