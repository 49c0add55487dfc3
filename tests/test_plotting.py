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
