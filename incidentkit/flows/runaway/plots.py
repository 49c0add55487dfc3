"""The runaway flow's figures: model calls per invocation with the limits marked, and the worst
invocation's sequence of agents and tools with the tokens of each model call."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from incidentkit.flows.runaway.triage import RunawayReport
from incidentkit.plotting import SECOND, date_numbers, new_axes, utc_time_axis

if TYPE_CHECKING:
    from matplotlib.axes import Axes

STEP_STYLE = {
    "model": ("o", "#4c72b0"),
    "tool": ("s", "#55a868"),
    "transfer": (">", "#e0a030"),
    "error": ("X", "#c44e52"),
}


def plot_model_calls(report: RunawayReport, *, ax: Axes | None = None) -> Axes:
    """Invocations by model calls (log-spaced bins): healthy ones and flagged ones (hit the
    limit or looped), with the healthy p99, the recommendation and the configured limit."""
    ax = new_axes(ax, (10.0, 3.8))
    counted = report.baseline_counted
    if counted.empty:
        ax.text(0.5, 0.5, "no model call counted", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return ax
    calls = counted["model_calls"].to_numpy(dtype=float)
    flagged = (counted["hit_limit"] | counted["looped"]).to_numpy(dtype=bool)
    marks = [report.configured, report.recommended or 1, calls.max()]
    top = max(marks) * 1.3
    bins = [float(b) for b in np.unique(np.round(np.geomspace(0.5, top, 40), 2))]
    ax.hist(
        [calls[~flagged].clip(0.5), calls[flagged].clip(0.5)],
        bins=bins,
        stacked=True,
        color=["#8eb0d8", "#c44e52"],
        label=[f"healthy ({int((~flagged).sum())})", f"hit the limit or looped ({flagged.sum()})"],
    )
    ax.set_xscale("log")
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
    ax.set_xlabel("model calls per invocation (log scale)")
    ax.set_ylabel("invocations")
    ax.set_title(f"model calls per invocation, {report.baseline}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    ax.grid(color="#eeeeee", linewidth=0.6)
    return ax


def plot_worst(report: RunawayReport, *, ax: Axes | None = None) -> Axes:
    """The worst invocation over time: which agent acted and how (model call, tool answer,
    transfer, error), and under it the prompt tokens of each model call (growing with the
    history re-sent). Returns the upper axes; with ``ax`` given only the sequence is drawn."""
    steps = report.steps
    if ax is None:
        from matplotlib.figure import Figure

        figure = Figure(figsize=(10.0, 5.2), layout="constrained")
        ax, tokens_ax = figure.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    else:
        tokens_ax = None
    if steps.empty:
        ax.text(0.5, 0.5, "no invocation to show", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        if tokens_ax is not None:
            tokens_ax.set_axis_off()
        return ax
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
        model = steps.loc[steps["prompt_tokens"].notna()]
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
