"""One session on one UTC clock: ledger runs and their leases, invocations (overlapping ones
in red), events by author, ADK 2.x markers, spans and journal entries, a lane each.

A compaction or a rewind is no invocation and no author's turn: both are drawn in a lane of
their own (``markers``), a compaction with the span it summarised; a checkpoint is drawn on
its agent's lane; an event a rewind undid is drawn as undone."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from incidentkit.flows._markers import is_kind
from incidentkit.flows.common import Frames
from incidentkit.frames import EventKind
from incidentkit.plotting import SECOND, date_numbers, new_axes, nothing_to_show, utc_time_axis

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
    "compaction": "#bbbbbb",
}
EVENT_STYLE = {
    "final": ("o", "#2a9d4b"),
    "call": ("s", "#4c72b0"),
    "response": ("D", "#55a868"),
    "state": ("P", "#8c1c13"),
    "partial": ("o", "#bbbbbb"),
    "error": ("X", "#c44e52"),
    "checkpoint": ("|", "#777777"),
    "compaction": ("h", "#777777"),
    "rewind": ("<", "#8c1c13"),
    "rewound": ("x", "#999999"),
}
MARKERS = "markers"
"""The lane of compactions and rewinds (their author, ``user``, never wrote them)."""
LANE_KINDS = (EventKind.COMPACTION, EventKind.REWIND)


def event_marks(frames: Frames) -> pd.Series:
    """What each event of ``frames.events`` is drawn as: undone by a rewind, a compaction, a
    rewind, a checkpoint, an error code, a partial event, a state write, a function call, a
    response, a final response (first that applies)."""
    events = frames.events
    ids = events["event_id"]
    kind = pd.Series("other", index=events.index, dtype=object)
    kind[events["final_response"].to_numpy(dtype=bool)] = "final"
    kind[ids.isin(frames.responses["event_id"])] = "response"
    kind[ids.isin(frames.calls["event_id"])] = "call"
    kind[ids.isin(frames.state_writes["event_id"])] = "state"
    kind[events["partial"].to_numpy(dtype=bool)] = "partial"
    kind[events["error_code"].notna()] = "error"
    for marker in (EventKind.CHECKPOINT, EventKind.REWIND, EventKind.COMPACTION):
        kind[is_kind(events, marker).to_numpy(dtype=bool)] = marker.value
    if "rewound_by" in events:
        kind[events["rewound_by"].notna().to_numpy(dtype=bool)] = "rewound"
    return kind


def in_marker_lane(events: pd.DataFrame) -> pd.Series:
    """Which events are drawn in the :data:`MARKERS` lane (compactions and rewinds)."""
    return is_kind(events, LANE_KINDS[0]) | is_kind(events, LANE_KINDS[1])


def levels(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """A level per bar so that bars of one level never overlap (first fit, in start order):
    two runs or invocations at once are drawn one above the other."""
    out = np.zeros(len(starts), dtype=int)
    last_end: list[float] = []
    for i in np.argsort(starts, kind="stable"):
        free = next((k for k, end in enumerate(last_end) if end <= starts[i]), len(last_end))
        if free == len(last_end):
            last_end.append(ends[i])
        else:
            last_end[free] = ends[i]
        out[i] = free
    return out


def _bars(
    ax: Axes,
    row: float,
    starts: np.ndarray,
    ends: np.ndarray,
    colours: str | list[str],
    *,
    stacked: bool = False,
    alpha: float = 1.0,
) -> None:
    """Bars from ``starts`` to ``ends`` in lane ``row``; ``stacked`` puts overlapping ones on
    levels of their own within the lane."""
    widths = np.maximum(ends - starts, SECOND / 5)
    level = levels(starts, starts + widths) if stacked else np.zeros(len(starts), dtype=int)
    count = int(level.max()) + 1 if len(level) else 1
    height = BAR / count
    palette = [colours] * len(starts) if isinstance(colours, str) else colours
    for k in range(count):
        mine = np.flatnonzero(level == k)
        ax.broken_barh(
            [(starts[i], widths[i]) for i in mine],
            (row - BAR / 2 + k * height, height * 0.9),
            facecolors=[palette[i] for i in mine],
            alpha=alpha,
        )


def lanes_of(frames: Frames, ranges: pd.DataFrame) -> list[str]:
    """The swimlane's lanes, top to bottom; a source with no row of the session has none."""
    events = frames.events
    lane = in_marker_lane(events)
    authors = list(dict.fromkeys(events.loc[~lane].sort_values("ts")["author"].dropna()))
    spans = frames.spans["kind"].isin(["call_llm", "execute_tool"]).any()
    return [
        *(["ledger runs"] if len(frames.runs) else []),
        *(["invocations"] if len(ranges) else []),
        *authors,
        *([MARKERS] if lane.any() else []),
        *(["spans"] if spans else []),
        *(["journal"] if len(frames.journal) else []),
    ]


def plot_swimlane(
    frames: Frames,
    ranges: pd.DataFrame,
    overlapping: set[str],
    *,
    ax: Axes | None = None,
    window: tuple[pd.Timestamp, pd.Timestamp] | None = None,
) -> Axes:
    """The session's lanes (top to bottom): ledger runs with the lease each open one holds, its
    invocations (``overlapping`` ids in red), one lane per event author, its compactions (with
    the span each summarised) and rewinds, its spans and its journal entries. ``frames`` hold
    the session's rows only; ``ranges`` its invocations (no marker's own); ``window`` zooms the
    time axis (the whole session otherwise)."""
    lanes = lanes_of(frames, ranges)
    ax = new_axes(ax, (11.0, 1.2 + 0.42 * len(lanes)))
    row = {lane: k for k, lane in enumerate(lanes)}
    times: list[np.ndarray] = []
    runs = frames.runs
    if len(runs):
        start, end = date_numbers(runs["started_at"]), date_numbers(runs["updated_at"])
        open_run = ~runs["status"].isin(["DONE", "FAILED"]).to_numpy(dtype=bool)
        lease = np.where(open_run, date_numbers(runs["lease_until"]), np.nan)  # a live lease
        ends = np.where(np.isnan(end), start, end)
        _bars(ax, row["ledger runs"], start, ends, COLOURS["run"], stacked=True)
        held = ~np.isnan(lease)
        if held.any():
            ax.scatter(
                lease[held],
                np.full(held.sum(), row["ledger runs"]),
                marker="|",
                s=160,
                color=COLOURS["lease"],
                label="lease until (open run)",
                zorder=3,
            )
        times += [start, end, lease]
    if len(ranges):
        start, end = date_numbers(ranges["start"]), date_numbers(ranges["end"])
        hit = ranges["invocation_id"].isin(overlapping).to_numpy(dtype=bool)
        paint = [COLOURS["overlap"] if h else COLOURS["invocation"] for h in hit]
        _bars(ax, row["invocations"], start, end, paint, stacked=True)
        if hit.any():
            ax.plot([], [], color=COLOURS["overlap"], linewidth=6, label="overlapping invocations")
        times += [start, end]
    events = frames.events
    if len(events):
        marks = event_marks(frames)
        x = date_numbers(events["ts"])
        lane = in_marker_lane(events).to_numpy(dtype=bool)
        y = np.where(lane, row.get(MARKERS, np.nan), events["author"].map(row).to_numpy(float))
        compactions = events.loc[is_kind(events, EventKind.COMPACTION)]
        if len(compactions) and "compaction_start" in compactions:
            start = date_numbers(compactions["compaction_start"])
            end = date_numbers(compactions["compaction_end"])
            known = ~(np.isnan(start) | np.isnan(end))
            if known.any():
                _bars(ax, row[MARKERS], start[known], end[known], COLOURS["compaction"],
                      stacked=True, alpha=0.5)  # fmt: skip
                ax.plot([], [], color=COLOURS["compaction"], linewidth=6, label="compacted span")
                times += [start[known], end[known]]
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
        return nothing_to_show(ax, "nothing to draw")
    left, right = float(known.min()), float(known.max())
    if window is not None:
        left, right = (float(x) for x in date_numbers(list(window)))
    pad = max((right - left) * 0.02, SECOND)
    utc_time_axis(ax, left - pad, right + pad)
    ax.set_yticks(range(len(lanes)), lanes)
    ax.set_ylim(len(lanes) - 0.5, -0.5)
    ax.grid(axis="x", color="#eeeeee", linewidth=0.6)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    return ax


ZOOM_PAD = pd.Timedelta(seconds=2)


def plot_session(frames: Frames, ranges: pd.DataFrame, pairs: pd.DataFrame) -> Axes:
    """The whole session's swimlane and, when invocations overlapped, a second one zoomed on
    the first overlapping pair (an invocation lasts seconds, a session minutes or days).
    Returns the first axes."""
    from matplotlib.figure import Figure

    hit = set(pairs["invocation_a"]) | set(pairs["invocation_b"])
    height = 1.2 + 0.42 * len(lanes_of(frames, ranges))
    if pairs.empty:
        return plot_swimlane(frames, ranges, hit)
    figure = Figure(figsize=(11.0, 2 * height), layout="constrained")
    whole: Axes
    zoom: Axes
    whole, zoom = figure.subplots(2, 1)
    plot_swimlane(frames, ranges, hit, ax=whole)
    first = pairs.iloc[0]
    span = (first["a_start"] - ZOOM_PAD, max(first["a_end"], first["b_end"]) + ZOOM_PAD)
    plot_swimlane(frames, ranges, hit, ax=zoom, window=span)
    whole.set_title("the whole session")
    zoom.set_title(f"zoomed on {first['invocation_a']} and {first['invocation_b']}")
    return whole
