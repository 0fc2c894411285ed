"""Widgets that stay interactive in the static book.

A page of the built book runs no Python: a slider whose callback is a Python
function (``ipywidgets.interact``) freezes there.  The widgets here are built
from *precomputed states*: every value a control can take is rendered once,
when the book is built, into a child of an ``ipywidgets.Stack``; the control is
``jslink``-ed to the stack's ``selected_index``, so moving it switches the
visible child in the browser with no kernel at all.  In a live kernel (Jupyter
Lab) the same widget works unchanged.

Several controls make a grid: one stack per control, nested, each level linked
to its control.  The number of states is the product of the number of values
of each control, so keep each axis short (tens, not thousands).
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ipywidgets as widgets
from ipywidgets.widgets.widget_string import HTMLStyle

__all__ = ["explorer", "figure_html", "table_html"]


def figure_html(fig: Any, alt: str, dpi: int = 80) -> str:
    """A matplotlib figure as an ``<img>`` tag with inline PNG data and alt text.

    The figure is closed afterwards so that the notebook does not also display it.
    """
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt, quote=True)}" style="max-width:100%">'


def table_html(rows: Sequence[Sequence[Any]], header: Sequence[str] | None = None) -> str:
    """A small HTML table (cells are escaped)."""
    out = ['<table class="dlperf-table" style="border-collapse:collapse">']
    if header:
        out.append("<tr>" + "".join(f'<th style="text-align:left;padding:2px 10px">{html.escape(str(h))}</th>' for h in header) + "</tr>")
    for row in rows:
        out.append("<tr>" + "".join(f'<td style="padding:2px 10px">{html.escape(str(c))}</td>' for c in row) + "</tr>")
    out.append("</table>")
    return "".join(out)


def _control(name: str, values: Sequence[Any], default: Any, fmt: Callable[[Any], str]) -> widgets.SelectionSlider:
    options = [(fmt(v), i) for i, v in enumerate(values)]
    index = list(values).index(default) if default is not None else 0
    return widgets.SelectionSlider(
        options=options,
        value=index,
        description=name,
        continuous_update=True,
        style={"description_width": "initial"},
        layout=widgets.Layout(width="480px"),
    )


def explorer(
    render: Callable[..., str],
    axes: Mapping[str, Sequence[Any]],
    *,
    defaults: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    fmt: Mapping[str, Callable[[Any], str]] | None = None,
    max_states: int = 400,
) -> widgets.VBox:
    """Precompute ``render(**point)`` for every point of the grid ``axes``.

    ``axes`` maps each keyword of ``render`` to the values its slider offers;
    ``render`` returns HTML (use :func:`figure_html` for a plot).  The result is
    a box with one slider per axis above the rendered state, linked in the
    browser.
    """
    names = list(axes)
    if not names:
        raise ValueError("explorer needs at least one axis")
    sizes = [len(axes[n]) for n in names]
    if any(s == 0 for s in sizes):
        raise ValueError(f"every axis needs at least one value: {dict(zip(names, sizes))}")
    total = 1
    for s in sizes:
        total *= s
    if total > max_states:
        raise ValueError(f"{total} states to precompute ({' x '.join(map(str, sizes))}); max_states is {max_states}")
    defaults = dict(defaults or {})
    labels = dict(labels or {})
    fmt = dict(fmt or {})
    controls = [
        _control(labels.get(n, n), list(axes[n]), defaults.get(n), fmt.get(n, str)) for n in names
    ]

    links: list[widgets.Widget] = []
    # Every widget carries a layout model (and an HTML widget a style model too) into the
    # page's embedded state; sharing one of each keeps a grid of hundreds of states light.
    shared_layout, stack_layout, shared_style = widgets.Layout(), widgets.Layout(), HTMLStyle()

    def build(level: int, chosen: dict[str, Any]) -> widgets.Widget:
        if level == len(names):
            return widgets.HTML(render(**chosen), layout=shared_layout, style=shared_style)
        name = names[level]
        children = [build(level + 1, {**chosen, name: v}) for v in axes[name]]
        stack = widgets.Stack(children=children, selected_index=controls[level].value, layout=stack_layout)
        links.append(widgets.jslink((controls[level], "index"), (stack, "selected_index")))
        return stack

    box = widgets.VBox([*controls, build(0, {})])
    box.links = links  # the browser-side links, one per stack (kept for inspection and tests)
    return box
