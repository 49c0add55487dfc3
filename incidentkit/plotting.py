"""Plotting for every flow: ``fn(frames..., *, ax=None) -> Axes``, drawn with matplotlib.

Without ``ax`` a new :class:`matplotlib.figure.Figure` is made (no pyplot state, so nothing
depends on a display or an interactive backend); ``show(ax)`` displays it in a notebook and
embeds it as a PNG in the HTML report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes


class Picture:
    """A figure as a PNG that Jupyter displays (and nbconvert embeds in HTML reports)."""

    def __init__(self, png: bytes) -> None:
        self.png = png

    def _repr_png_(self) -> bytes:
        return self.png


def show(ax: Axes, *, dpi: int = 100) -> Picture:
    """Render the figure holding ``ax`` for display as a notebook cell's last value.

    Every text is drawn as written: a ``$`` in a label from evidence (a tool or thread name)
    starts no mathtext, which would draw something else or fail the cell (``$\\x$``).
    """
    import io

    from matplotlib import rc_context
    from matplotlib.text import Text

    figure = ax.get_figure(root=True)
    assert figure is not None  # an Axes always lives in a figure
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


def utc_time_axis(ax: Axes, left: float, right: float, *, bins: int = 6) -> None:
    """Label the x axis of ``ax`` (date numbers) with the UTC clock and the day."""
    from matplotlib.dates import AutoDateLocator
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    fine = (right - left) < 120 * SECOND  # under two minutes: milliseconds tell moments apart
    ax.set_xlim(left, right)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: clock_text(x, fine=fine)))
    # whole seconds and minutes for spans of minutes; evenly spread ticks below that
    locator = (
        MaxNLocator(nbins=bins)
        if fine
        else AutoDateLocator(minticks=4, maxticks=bins + 4, tz="UTC")  # type: ignore[no-untyped-call]
    )
    ax.xaxis.set_major_locator(locator)
    ax.set_xlabel(f"time on {utc_of(left).strftime('%Y-%m-%d')} (UTC)")
