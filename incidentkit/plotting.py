"""Plotting for every flow: ``fn(frames..., *, ax=None) -> Axes``, drawn with matplotlib.

Without ``ax`` a new :class:`matplotlib.figure.Figure` is made (no pyplot state, so nothing
depends on a display or an interactive backend); ``show(ax)`` displays it in a notebook and
embeds it as a PNG in the HTML report.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.axis import Axis
    from matplotlib.ticker import Formatter


class Picture:
    """A figure as a PNG that Jupyter displays (and nbconvert embeds in HTML reports)."""

    def __init__(self, png: bytes) -> None:
        self.png = png

    def _repr_png_(self) -> bytes:
        return self.png


def show(ax: Axes, *, dpi: int = 100) -> Picture:
    """Render the figure holding ``ax`` for display as a notebook cell's last value.

    Every text is drawn as written: a ``$`` in a label from evidence (a tool or thread name)
    starts no mathtext, which would draw something else or fail the cell (``$\\x$``); so a log
    axis left with matplotlib's ``10^k`` labels gets plain ones (:func:`plain_log_axis`).
    """
    import io

    from matplotlib import rc_context
    from matplotlib.text import Text
    from matplotlib.ticker import LogFormatterMathtext

    figure = ax.get_figure(root=True)
    assert figure is not None  # an Axes always lives in a figure
    for axes in figure.axes:  # log axes label in plain numbers: no mathtext to print as written
        for axis in (axes.xaxis, axes.yaxis):
            if axis.get_scale() == "log" and isinstance(
                axis.get_major_formatter(), LogFormatterMathtext
            ):
                plain_log_axis(axis)
    for text in figure.findobj(Text):
        text.set_parse_math(False)
    buffer = io.BytesIO()
    with rc_context({"text.parse_math": False}):  # tick labels made while drawing
        figure.savefig(buffer, format="png", dpi=dpi)
    return Picture(buffer.getvalue())


def new_axes(ax: Axes | None, size: tuple[float, float]) -> Axes:
    """``ax``, or the axes of a new pyplot-free figure of ``size`` inches."""
    if ax is not None:
        return ax
    from matplotlib.figure import Figure

    return Figure(figsize=size, layout="constrained").add_subplot()


def nothing_to_show(ax: Axes, text: str) -> Axes:
    """``ax`` bare but for ``text`` in its middle: a figure whose data is empty says so."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()
    return ax


SECOND = 1.0 / 86_400.0
"""One second in matplotlib date units (days since 1970, its default epoch)."""


def date_numbers(values: object) -> np.ndarray:
    """UTC times (a Series, a list, timestamps or text) as matplotlib date numbers; NaN where
    missing. Every time axis of the kit is on the UTC clock."""
    import pandas as pd

    stamps = pd.to_datetime(pd.Series(values, dtype=object), utc=True)
    naive = stamps.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy(dtype="datetime64[ns]")
    out: np.ndarray = np.full(len(naive), np.nan)
    ok = ~np.isnat(naive)
    out[ok] = naive[ok].astype("int64") / 86_400e9
    return out


def utc_of(x: float) -> pd.Timestamp:
    """A matplotlib date number as a UTC timestamp."""
    import pandas as pd

    return pd.Timestamp(x * 86_400.0, unit="s", tz="UTC")


def clock_text(x: float, *, fine: bool) -> str:
    """A date number as ``HH:MM:SS`` on the UTC clock (``.mmm`` added when ``fine``)."""
    stamp = utc_of(x).round("1ms" if fine else "1s")  # a tick at 03:09:00 is not 03:08:59
    text = str(stamp.strftime("%H:%M:%S.%f"))
    return text[:-3] if fine else text[:-7]


def clock_unit(ticks: Sequence[float]) -> str:
    """The coarsest clock unit every one of ``ticks`` (date numbers) falls on: ``"min"``
    (``HH:MM``), ``"s"`` (``HH:MM:SS``) or ``"ms"`` (``HH:MM:SS.mmm``)."""
    seconds = np.asarray(ticks, dtype=float) * 86_400.0
    seconds = seconds[np.isfinite(seconds)]
    whole = np.round(seconds)
    if not np.all(np.abs(seconds - whole) < 1e-4):
        return "ms"
    return "min" if np.all(np.mod(whole, 60) == 0) else "s"


def clock_label(x: float, unit: str, *, dated: bool = False) -> str:
    """A date number at the precision of ``unit`` (:func:`clock_unit`), its day first when
    ``dated`` (ticks that span days)."""
    text = clock_text(x, fine=unit == "ms")
    text = text[:-3] if unit == "min" else text
    return f"{utc_of(x).round('1s').strftime('%m-%d')} {text}" if dated else text


def _formatter(unit: str) -> Formatter:
    """The UTC clock's tick formatter; ``unit`` until it knows its ticks."""
    from matplotlib.ticker import Formatter

    class ClockFormatter(Formatter):
        """Tick labels on the UTC clock as precise as the ticks are, and no more."""

        dated = False

        def __init__(self) -> None:
            self.unit = unit

        def set_locs(self, locs: list[float]) -> None:
            super().set_locs(locs)
            ticks = [float(x) for x in locs if np.isfinite(x)]
            self.unit = clock_unit(ticks) if ticks else "s"
            self.dated = len({int(np.floor(x + 0.5 / 86_400.0)) for x in ticks}) > 1

        def format_data_short(self, value: float) -> str:  # the cursor's readout
            return clock_text(value, fine=True)

        def __call__(self, x: float, pos: int | None = None) -> str:
            return clock_label(x, self.unit, dated=self.dated)

    return ClockFormatter()


def utc_time_axis(ax: Axes, left: float, right: float, *, bins: int = 6) -> None:
    """Label the x axis of ``ax`` (date numbers) with the UTC clock and the day: ticks on
    round moments (whole minutes, seconds, or 1, 2, 5 ... ms steps, whatever the span) and
    labels as precise as the ticks (``03:05``, ``03:05:30``, ``03:05:30.250``; the day too
    when the ticks span days)."""
    from matplotlib.dates import MINUTELY, SECONDLY, AutoDateLocator

    ax.set_xlim(left, right)
    locator = AutoDateLocator(  # type: ignore[no-untyped-call]
        minticks=3, maxticks=bins + 4, interval_multiples=True, tz="UTC"
    )
    for frequency in (MINUTELY, SECONDLY):  # also every 2 min or 2 s, not 1 then 5 at once
        locator.intervald[frequency] = [1, 2, 5, 10, 15, 30]
    ax.xaxis.set_major_locator(locator)
    fine = (right - left) < 120 * SECOND  # under two minutes: ms until the ticks say otherwise
    ax.xaxis.set_major_formatter(_formatter("ms" if fine else "s"))
    ax.set_xlabel(f"time on {utc_of(left).strftime('%Y-%m-%d')} (UTC)")


def plain_log_axis(axis: Axis, *, whole: bool = False) -> None:
    """A log-scaled axis labelled in plain numbers at 1, 2, 5, 10, 20 ... (no ``10^1``, which
    :func:`show` would print as written, no labelled minor ticks); ``whole``: counts, so no tick
    below 1 is labelled."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_minor_formatter(NullFormatter())

    def label(value: float, _: int | None) -> str:
        if whole:
            return f"{value:,.0f}" if value >= 1 else ""
        return f"{value:,.0f}" if value >= 1 else f"{value:g}"

    axis.set_major_formatter(FuncFormatter(label))


def count_axis(axis: Axis) -> None:
    """An axis of counts: ticks on whole numbers only (no 0.5 invocation)."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))
