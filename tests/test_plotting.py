"""The shared plotting layer: figures without pyplot, shown as PNG in notebooks and reports."""

from __future__ import annotations

from incidentkit.plotting import new_axes, show


def test_show_renders_a_png_for_notebooks() -> None:
    ax = new_axes(None, (2.0, 1.0))
    ax.plot([0, 1], [1, 0])
    png = show(ax)._repr_png_()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000


def test_new_axes_keeps_the_axes_it_is_given() -> None:
    ax = new_axes(None, (3.0, 2.0))
    assert new_axes(ax, (9.0, 9.0)) is ax
    assert tuple(ax.get_figure(root=True).get_size_inches()) == (3.0, 2.0)  # type: ignore[union-attr]


def _labels(ax: object) -> list[str]:
    from matplotlib.axes import Axes

    assert isinstance(ax, Axes)
    show(ax)  # labels are made while drawing
    lo, hi = ax.get_xlim()
    pairs = zip(ax.get_xticklabels(), ax.get_xticks(), strict=True)
    return [label.get_text() for label, at in pairs if lo <= at <= hi]


def test_time_ticks_fall_on_round_moments_at_the_precision_they_need() -> None:
    import pandas as pd

    from incidentkit.plotting import date_numbers, utc_time_axis

    start = pd.Timestamp("2026-11-29T02:59:57.408Z")  # an odd first moment
    expected = {
        "800ms": "02:59:57.600",
        "20s": "03:00:05",
        "10min": "03:02",
        "3D": "11-30 00:00",
    }
    for span, example in expected.items():
        left, right = date_numbers([start, start + pd.Timedelta(span)])
        ax = new_axes(None, (8.0, 2.0))
        utc_time_axis(ax, float(left), float(right))
        labels = _labels(ax)
        assert example in labels, (span, labels)
        assert len(labels) >= 3, (span, labels)
        assert "02:59:57.408" not in labels


def test_a_log_axis_reads_in_plain_numbers() -> None:
    from incidentkit.plotting import plain_log_axis

    ax = new_axes(None, (6.0, 2.0))
    ax.set_xscale("log")
    ax.set_xlim(0.5, 700)
    plain_log_axis(ax.xaxis, whole=True)
    labels = [label for label in _labels(ax) if label]
    assert labels == ["1", "2", "5", "10", "20", "50", "100", "200", "500"]


def test_show_gives_a_default_log_axis_plain_labels() -> None:
    ax = new_axes(None, (4.0, 3.0))
    ax.plot([0, 1], [0.5, 300])
    ax.set_yscale("log")  # matplotlib's labels are mathtext, which show() prints as written
    show(ax)
    labels = [label.get_text() for label in ax.get_yticklabels() if label.get_text()]
    assert labels and not any("$" in label for label in labels), labels
    assert {"1", "10", "100"} <= set(labels)
