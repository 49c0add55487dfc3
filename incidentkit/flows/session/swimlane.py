"""One session on one UTC clock: ledger runs and their leases, invocations (overlapping ones
in red), events by author, spans and journal entries, a lane each."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from incidentkit.flows.common import Frames
from incidentkit.plotting import SECOND, date_numbers, new_axes, utc_time_axis

if TYPE_CHECKING:
    from matplotlib.axes import Axes

BAR = 0.6
COLOURS = {
    "run": "#8eb0d8",
    "lease": "#4c72b0",
    "invocation": "#55a868",
    "overlap": "#c44e52",
    "call_llm": "#4c72b0",
    "execute_tool": "#55a868",
    "journal": "#e0a030",
}
EVENT_STYLE = {
    "final": ("o", "#2a9d4b"),
    "call": ("s", "#4c72b0"),
    "response": ("D", "#55a868"),
    "state": ("P", "#8c1c13"),
    "partial": ("o", "#bbbbbb"),
    "error": ("X", "#c44e52"),
}


def event_marks(frames: Frames) -> pd.Series:
    """What each event of ``frames.events`` is drawn as: an error code, a partial event, a
    function call, a response, a state write, a final response (first that applies)."""
    events = frames.events
    ids = events["event_id"]
    kind = pd.Series("other", index=events.index, dtype=object)
    kind[events["final_response"].to_numpy(dtype=bool)] = "final"
    kind[ids.isin(frames.state_writes["event_id"])] = "state"
    kind[ids.isin(frames.responses["event_id"])] = "response"
    kind[ids.isin(frames.calls["event_id"])] = "call"
    kind[events["partial"].to_numpy(dtype=bool)] = "partial"
    kind[events["error_code"].notna()] = "error"
    return kind


def _bars(
    ax: Axes, row: float, starts: np.ndarray, ends: np.ndarray, colour: str, *, alpha: float = 1.0
) -> None:
    widths = np.maximum(ends - starts, SECOND / 5)
    ax.broken_barh(
        list(zip(starts, widths, strict=True)),
        (row - BAR / 2, BAR),
        facecolors=colour,
        alpha=alpha,
    )


def plot_swimlane(
    frames: Frames, ranges: pd.DataFrame, overlapping: set[str], *, ax: Axes | None = None
) -> Axes:
    """The session's lanes (top to bottom): ledger runs with the lease each open one holds, its
    invocations (``overlapping`` ids in red), one lane per event author, its spans and its
    journal entries. ``frames`` hold the session's rows only."""
    authors = list(dict.fromkeys(frames.events.sort_values("ts")["author"].dropna()))
    lanes = ["ledger runs", "invocations", *authors, "spans", "journal"]
    ax = new_axes(ax, (11.0, 1.2 + 0.42 * len(lanes)))
    row = {lane: k for k, lane in enumerate(lanes)}
    times: list[np.ndarray] = []
    runs = frames.runs
    if len(runs):
        start, end = date_numbers(runs["started_at"]), date_numbers(runs["updated_at"])
        open_run = ~runs["status"].isin(["DONE", "FAILED"]).to_numpy(dtype=bool)
        lease = np.where(open_run, date_numbers(runs["lease_until"]), np.nan)  # a live lease
        _bars(ax, row["ledger runs"], start, np.where(np.isnan(end), start, end), COLOURS["run"])
        held = ~np.isnan(lease)
        ax.scatter(
            lease[held],
            np.full(held.sum(), row["ledger runs"]),
            marker="|",
            s=160,
            color=COLOURS["lease"],
            label="lease until",
            zorder=3,
        )
        times += [start, end, lease]
    if len(ranges):
        start, end = date_numbers(ranges["start"]), date_numbers(ranges["end"])
        hit = ranges["invocation_id"].isin(overlapping).to_numpy(dtype=bool)
        _bars(ax, row["invocations"], start[~hit], end[~hit], COLOURS["invocation"])
        if hit.any():
            _bars(ax, row["invocations"], start[hit], end[hit], COLOURS["overlap"], alpha=0.6)
            ax.plot([], [], color=COLOURS["overlap"], linewidth=6, label="overlapping invocations")
        times += [start, end]
    events = frames.events
    if len(events):
        marks = event_marks(frames)
        x = date_numbers(events["ts"])
        y = events["author"].map(row).to_numpy(dtype=float)
        for mark, (marker, colour) in EVENT_STYLE.items():
            mine = marks.eq(mark).to_numpy(dtype=bool)
            if mine.any():
                ax.scatter(
                    x[mine],
                    y[mine],
                    marker=marker,
                    color=colour,
                    s=26,
                    zorder=3,
                    label=f"event: {mark}",
                )
        times.append(x)
    spans = frames.spans
    for kind in ("call_llm", "execute_tool"):
        of_kind = spans.loc[spans["kind"].eq(kind)]
        if len(of_kind):
            start, end = date_numbers(of_kind["start"]), date_numbers(of_kind["end"])
            _bars(
                ax,
                row["spans"],
                start,
                np.where(np.isnan(end), start, end),
                COLOURS[kind],
                alpha=0.7,
            )
            ax.plot([], [], color=COLOURS[kind], linewidth=6, label=f"span: {kind}")
            times += [start, end]
    journal = frames.journal
    if len(journal):
        for column, marker in (("created_at", "^"), ("updated_at", "v")):
            x = date_numbers(journal[column])
            ax.scatter(
                x,
                np.full(len(x), row["journal"]),
                marker=marker,
                color=COLOURS["journal"],
                s=30,
                zorder=3,
                label=f"journal {column.split('_')[0]}",
            )
            times.append(x)
    known = np.concatenate(times) if times else np.array([])
    known = known[~np.isnan(known)]
    if known.size == 0:
        ax.text(0.5, 0.5, "nothing to draw", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return ax
    left, right = float(known.min()), float(known.max())
    pad = max((right - left) * 0.02, SECOND)
    utc_time_axis(ax, left - pad, right + pad)
    ax.set_yticks(range(len(lanes)), lanes)
    ax.set_ylim(len(lanes) - 0.5, -0.5)
    ax.grid(axis="x", color="#eeeeee", linewidth=0.6)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    return ax
