"""The runaway flow's figures: whole counts on the histogram, round moments on the time axis."""

from __future__ import annotations

import itertools
from pathlib import Path

from incidentkit.flows.runaway import steps
from incidentkit.flows.runaway.plots import LOG_FROM, count_bins, plot_model_calls, plot_worst
from incidentkit.plotting import show

RUNAWAY = Path(__file__).resolve().parents[3] / "fixtures" / "runaway"


def _report() -> steps.RunawayReport:
    incident, settings = steps.setup(RUNAWAY)
    return steps.triage(incident, settings)


def _shown(labels: list[str]) -> list[str]:
    return [label for label in labels if label]


def test_the_histogram_of_counts_has_whole_ticks_and_bins_of_whole_counts() -> None:
    ax = plot_model_calls(_report())
    show(ax)  # the tick labels are made as the figure is drawn
    lo, hi = ax.get_xlim()
    xs = [(t.get_text(), v) for t, v in zip(ax.get_xticklabels(), ax.get_xticks(), strict=True)]
    shown = _shown([text for text, v in xs if lo <= v <= hi])
    assert shown and all(text.replace(",", "").isdigit() for text in shown), shown
    assert ax.get_xscale() == "log"  # the configured 500 beside a few calls
    ys = [v for v in ax.get_yticks() if ax.get_ylim()[0] <= v <= ax.get_ylim()[1]]
    assert ys and all(float(v).is_integer() for v in ys), ys
    assert not [t for t in ax.xaxis.get_minorticklabels() if t.get_text()]


def test_each_bin_holds_whole_counts() -> None:
    for top in (3, LOG_FROM, 501, 10_000):
        edges = count_bins(top)
        assert all(edge % 1 == 0.5 for edge in edges), edges  # half-way between counts
        assert edges == sorted(set(edges)) and edges[-1] >= top
        if top <= LOG_FROM:
            assert len(edges) == top + 2  # one bin per count, 0 included


def test_the_time_axis_ticks_at_round_moments() -> None:
    ax = plot_worst(_report())
    show(ax)
    figure = ax.get_figure(root=True)
    assert figure is not None
    lower = figure.axes[-1]
    lo, hi = lower.get_xlim()
    ticks = [v for v in lower.get_xticks() if lo <= v <= hi]
    labels = _shown(
        [
            t.get_text()
            for t, v in zip(lower.get_xticklabels(), lower.get_xticks(), strict=True)
            if lo <= v <= hi
        ]
    )
    assert len(ticks) >= 3
    seconds = [round(v * 86_400.0, 3) for v in ticks]
    steps_between = {round(b - a, 3) for a, b in itertools.pairwise(seconds)}
    assert len(steps_between) == 1, steps_between  # evenly spaced
    step = steps_between.pop()
    assert step in {
        0.001,
        0.002,
        0.005,
        0.01,
        0.02,
        0.05,
        0.1,
        0.2,
        0.5,
        1,
        2,
        5,
        10,
        15,
        30,
        60,
        120,
        300,
        600,
        900,
        1800,
    }
    assert all(s % step < 1e-6 or step - s % step < 1e-6 for s in seconds)  # on multiples
    if step >= 1:
        assert all("." not in label for label in labels), labels
