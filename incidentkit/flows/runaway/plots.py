"""The runaway flow's figures: model calls per invocation with the limits marked, and the worst
invocation's sequence of agents and tools with the tokens of each model call."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from incidentkit.flows.runaway.triage import RunawayReport
from incidentkit.plotting import (
    SECOND,
    count_axis,
    date_numbers,
    new_axes,
    nothing_to_show,
    plain_log_axis,
    utc_time_axis,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes

STEP_STYLE = {
    "model": ("o", "#4c72b0"),
    "tool": ("s", "#55a868"),
    "transfer": (">", "#e0a030"),
    "error": ("X", "#c44e52"),
    "checkpoint": ("|", "#8c8c8c"),
    "compaction": ("D", "#8172b2"),
    "rewind": ("<", "#8c8c8c"),
}


LOG_FROM = 50
"""Above this many model calls the histogram's x axis is logarithmic (a 500-call runaway beside
invocations of 3); up to it, linear with a bin per count."""


def count_bins(top: float) -> list[float]:
    """Histogram edges that hold whole counts: one bin per count up to :data:`LOG_FROM`, else
    about 40 bins spaced evenly on a log scale, each edge half-way between two counts."""
    if top <= LOG_FROM:
        return [k + 0.5 for k in range(-1, int(np.ceil(top)) + 1)]
    whole = np.unique(np.ceil(np.geomspace(1, top, 40)))
    return [0.5, *(float(k) + 0.5 for k in whole)]


def plot_model_calls(report: RunawayReport, *, ax: Axes | None = None) -> Axes:
    """Invocations by model calls: healthy ones and flagged ones (hit the limit or looped),
    with the healthy p99, the recommendation and the configured limit. Bins hold whole counts;
    the count axis is linear up to :data:`LOG_FROM` calls, logarithmic (1, 2, 5, 10 ...) past
    it; the axis of invocations has whole ticks."""
    ax = new_axes(ax, (10.0, 3.8))
    counted = report.baseline_counted
    if counted.empty:
        return nothing_to_show(ax, "no model call counted")
    calls = counted["model_calls"].to_numpy(dtype=float)
    flagged = (counted["hit_limit"] | counted["looped"]).to_numpy(dtype=bool)
    marks = [m for m in (report.configured, report.recommended, calls.max()) if m is not None]
    top = float(max(marks))
    bins = count_bins(top)
    ax.hist(
        [calls[~flagged], calls[flagged]],
        bins=bins,
        stacked=True,
        color=["#8eb0d8", "#c44e52"],
        label=[f"healthy ({int((~flagged).sum())})", f"hit the limit or looped ({flagged.sum()})"],
    )
    logarithmic = top > LOG_FROM
    if logarithmic:
        ax.set_xscale("log")
        ax.set_xlim(0.5, top * 1.3)
        plain_log_axis(ax.xaxis, whole=True)
    else:
        ax.set_xlim(-0.5, top + 1.5)
        count_axis(ax.xaxis)
    count_axis(ax.yaxis)
    lines = [
        (report.healthy_p99, "#4c72b0", ":", f"healthy p99 {report.healthy_p99:g}"),
        (report.recommended, "#2a9d4b", "--", f"recommended {report.recommended}"),
        (
            report.configured,
            "#8c1c13",
            "-",
            f"configured {report.configured} ({report.configured_from})",
        ),
    ]
    for value, colour, style, label in lines:
        if value is not None and not pd.isna(value):
            ax.axvline(float(value), color=colour, linestyle=style, linewidth=1.6, label=label)
    ax.set_xlabel("model calls per invocation" + (" (log scale)" if logarithmic else ""))
    ax.set_ylabel("invocations")
    ax.set_title(f"model calls per invocation, {report.baseline}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    ax.grid(color="#eeeeee", linewidth=0.6)
    return ax


def plot_worst(report: RunawayReport, *, ax: Axes | None = None) -> Axes:
    """The worst invocation over time: which agent acted and how (model call, tool answer,
    transfer, error), and under it the prompt tokens of each model call (growing with the
    history re-sent). Returns the upper axes; with ``ax`` given only the sequence is drawn."""
    steps = report.sequence
    if ax is None:
        from matplotlib.figure import Figure

        figure = Figure(figsize=(10.0, 5.2), layout="constrained")
        ax, tokens_ax = figure.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    else:
        tokens_ax = None
    if steps.empty:
        if tokens_ax is not None:
            tokens_ax.set_axis_off()
        return nothing_to_show(ax, "no invocation to show")
    authors = list(dict.fromkeys(steps["author"]))
    rows = steps["author"].map({a: k for k, a in enumerate(authors)}).to_numpy(dtype=float)
    x = date_numbers(steps["ts"])
    ax.plot(x, rows, color="#cccccc", linewidth=0.6, zorder=1)
    for step, (marker, colour) in STEP_STYLE.items():
        mine = steps["step"].eq(step).to_numpy(dtype=bool)
        if mine.any():
            ax.scatter(x[mine], rows[mine], marker=marker, color=colour, s=22, label=step, zorder=2)
    ax.set_yticks(range(len(authors)), authors)
    ax.invert_yaxis()
    calls = int(steps["model_call"].max()) if steps["model_call"].notna().any() else 0
    ax.set_title(f"invocation {report.worst}: {calls} model calls, agent by agent")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    left, right = float(np.nanmin(x)), float(np.nanmax(x))
    if tokens_ax is not None:
        model = steps.loc[steps["model_call"].notna() & steps["prompt_tokens"].notna()]
        if len(model):
            tokens_ax.plot(
                date_numbers(model["ts"]),
                model["prompt_tokens"].to_numpy(dtype=float),
                color="#8c1c13",
                marker=".",
                linewidth=0.8,
                label="prompt tokens",
            )
            tokens_ax.set_ylabel("prompt tokens\nper model call")
            tokens_ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
        else:
            tokens_ax.text(
                0.5,
                0.5,
                "no usage metadata",
                ha="center",
                va="center",
                transform=tokens_ax.transAxes,
            )
        tokens_ax.grid(color="#eeeeee", linewidth=0.6)
        utc_time_axis(tokens_ax, left, max(right, left + SECOND))
    else:
        utc_time_axis(ax, left, max(right, left + SECOND))
    return ax
