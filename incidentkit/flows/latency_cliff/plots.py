"""The latency cliff flow's figures: latency per bucket, open invocations by last event, and
stuck-thread groups. Every time axis is on the UTC clock."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from incidentkit.flows.latency_cliff.triage import LatencyReport
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

KIND_COLOURS = {
    "unanswered_function_call": "#c8553d",
    "model_call_in_flight": "#e0a030",
    "no_events": "#8e9aaf",
}


def plot_latency(report: LatencyReport, *, ax: Axes | None = None) -> Axes:
    """p50 and p95 of the ended runs per bucket (log scale, seconds), the cliff and the client
    timeout marked, and each open invocation drawn at its start, at its age at ``as_of``."""
    ax = new_axes(ax, (10.0, 4.0))
    buckets = report.buckets
    if buckets.empty:
        return nothing_to_show(ax, "no invocation is timed")
    half = report.bucket / 2
    x = date_numbers(buckets["bucket"] + half)
    ax.plot(x, buckets["p50_ms"] / 1000, marker=".", color="#4c72b0", label="p50 (ended runs)")
    ax.plot(x, buckets["p95_ms"] / 1000, marker=".", color="#c44e52", label="p95 (ended runs)")
    hung = report.series.loc[report.series["open"]]
    if len(hung):
        ages = (report.as_of - hung["started_at"]).dt.total_seconds()
        ax.scatter(
            date_numbers(hung["started_at"]),
            ages.clip(lower=0.001),
            marker="^",
            color="#8c1c13",
            zorder=3,
            label=f"open at as_of ({len(hung)}), at its age",
        )
    ax.axhline(
        report.client_timeout_s,
        color="#555555",
        linestyle="--",
        linewidth=1,
        label=f"client timeout {report.client_timeout_s:g} s",
    )
    if report.has_cliff:
        at = date_numbers([report.cliff["at"].iloc[0]])[0]
        ax.axvline(at, color="#b25e09", linewidth=2, label="cliff")
        ax.annotate(
            f"cliff {pd.Timestamp(report.cliff['at'].iloc[0]).strftime('%H:%M')} UTC",
            (at, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(4, -14),
            textcoords="offset points",
            color="#b25e09",
        )
    ax.set_yscale("log")
    plain_log_axis(ax.yaxis)  # 1, 2, 5, 10 ... s, not 10^0
    ax.set_ylabel("latency (s, log scale)")
    left = float(np.nanmin(date_numbers(buckets["bucket"])))
    right = float(np.nanmax(date_numbers(buckets["bucket"] + report.bucket)))
    utc_time_axis(ax, left, max(right, left + 60 * SECOND))
    ax.grid(color="#eeeeee", linewidth=0.6)
    ax.set_title(f"latency per {_bucket_text(report.bucket)} by start time ({report.source})")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    return ax


def _bucket_text(bucket: pd.Timedelta) -> str:
    seconds = bucket.total_seconds()
    if seconds % 60 == 0:
        minutes = int(seconds // 60)
        return "minute" if minutes == 1 else f"{minutes} minutes"
    return f"{seconds:g} s"


def plot_open_by_last_event(report: LatencyReport, *, ax: Axes | None = None) -> Axes:
    """Open invocations past the client timeout per last-event shape (and tool)."""
    groups = report.by_last_event
    ax = new_axes(ax, (8.0, 1.2 + 0.45 * max(1, len(groups))))
    if groups.empty:
        return nothing_to_show(ax, f"no invocation open past {report.client_timeout_s:g} s")
    labels = [
        kind if pd.isna(tool) else f"{kind}\n({tool})"
        for kind, tool in zip(groups["last_event_kind"], groups["tool"], strict=True)
    ]
    y = np.arange(len(groups))
    counts = groups["count"].to_numpy(dtype=float)
    colours = [KIND_COLOURS.get(str(k), "#8e9aaf") for k in groups["last_event_kind"]]
    ax.barh(y, counts, color=colours)
    for row, count in zip(y, counts, strict=True):
        ax.text(float(count), float(row), f" {int(count)}", va="center")
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlim(0, counts.max() * 1.2)
    count_axis(ax.xaxis)
    ax.set_xlabel("open invocations")
    ax.set_title(
        f"{int(counts.sum())} invocation(s) open past {report.client_timeout_s:g} s, by last event"
    )
    return ax


def plot_stuck_threads(report: LatencyReport, *, ax: Axes | None = None) -> Axes:
    """Stuck-thread groups as bars: the group tied to the open calls, other stalls, and the
    groups idle by design (lighter)."""
    groups = report.thread_groups
    ax = new_axes(ax, (9.0, 1.2 + 0.45 * max(1, len(groups))))
    if groups.empty:
        return nothing_to_show(
            ax,
            "no thread stuck across the dumps"
            if report.dumps >= 2
            else "no thread verdict: fewer than two thread dumps",
        )
    labels = []
    colours = []
    for _, group in groups.iterrows():  # one bar per group: a handful of rows
        where = group["app_frame"] if pd.notna(group["app_frame"]) else group["top_frame"]
        where = "(no frames)" if pd.isna(where) else str(where).split("(", 1)[0]
        pools = str(group["pool"]).split(", ")
        pool = pools[0] if len(pools) == 1 else f"{pools[0]} +{len(pools) - 1} more"
        labels.append(f"{pool} · {'.'.join(where.rsplit('.', 2)[-2:])}")
        colours.append(
            "#c8553d" if pd.notna(group["tool"]) else "#cfd4dc" if group["idle"] else "#e0a030"
        )
    y = np.arange(len(groups))
    counts = groups["count"].to_numpy(dtype=float)
    ax.barh(y, counts, color=colours)
    for row, count, tool in zip(y, counts, groups["tool"], strict=True):
        tail = f"  tool {tool}" if pd.notna(tool) else ""
        ax.text(float(count), float(row), f" {int(count)}{tail}", va="center")
    ax.set_yticks(y, labels, fontsize="small")
    ax.invert_yaxis()
    ax.set_xlim(0, counts.max() * 1.6)
    count_axis(ax.xaxis)
    ax.set_xlabel(f"threads unmoved across {report.dumps} dumps")
    ax.set_title(
        "stuck threads by stack\nred: tied to the open calls · amber: other · grey: idle by design",
        fontsize="medium",
    )
    return ax
