"""Plotting for every flow: ``fn(frames..., *, ax=None) -> Axes``, drawn with matplotlib.

Without ``ax`` a new :class:`matplotlib.figure.Figure` is made (no pyplot state, so nothing
depends on a display or an interactive backend); ``show(ax)`` displays it in a notebook and
embeds it as a PNG in the HTML report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes


class Picture:
    """A figure as a PNG that Jupyter displays (and nbconvert embeds in HTML reports)."""

    def __init__(self, png: bytes) -> None:
        self.png = png

    def _repr_png_(self) -> bytes:
        return self.png


def show(ax: Axes, *, dpi: int = 100) -> Picture:
    """Render the figure holding ``ax`` for display as a notebook cell's last value."""
    import io

    buffer = io.BytesIO()
    ax.get_figure(root=True).savefig(buffer, format="png", dpi=dpi)  # type: ignore[union-attr]
    return Picture(buffer.getvalue())


def new_axes(ax: Axes | None, size: tuple[float, float]) -> Axes:
    """``ax``, or the axes of a new pyplot-free figure of ``size`` inches."""
    if ax is not None:
        return ax
    from matplotlib.figure import Figure

    return Figure(figsize=size, layout="constrained").add_subplot()
