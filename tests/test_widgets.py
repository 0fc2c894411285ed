"""Precomputed-state widgets: every state rendered once, controls linked in the browser."""

from __future__ import annotations

import ipywidgets as widgets
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from dlperf.widgets import explorer, figure_html, table_html  # noqa: E402


def leaves(w):
    if isinstance(w, widgets.HTML):
        return [w.value]
    return [leaf for child in w.children for leaf in leaves(child)]


def test_grid_is_precomputed_in_order_and_linked():
    calls = []

    def render(a, b):
        calls.append((a, b))
        return f"<b>{a}-{b}</b>"

    box = explorer(render, {"a": [1, 2, 3], "b": ["x", "y"]}, defaults={"a": 2, "b": "y"})
    slider_a, slider_b, stack = box.children
    assert calls == [(a, b) for a in [1, 2, 3] for b in ["x", "y"]]
    assert leaves(stack) == [f"<b>{a}-{b}</b>" for a in [1, 2, 3] for b in ["x", "y"]]
    assert (slider_a.index, slider_b.index) == (1, 1)
    assert stack.selected_index == 1 and all(s.selected_index == 1 for s in stack.children)
    # Links are client-side jslinks (they work in the static page), one per stack.
    pairs = {(id(link.source[0]), id(link.target[0])) for link in box.links}
    assert all(link.source[1] == "index" and link.target[1] == "selected_index" for link in box.links)
    assert pairs == {(id(slider_a), id(stack))} | {(id(slider_b), id(s)) for s in stack.children}


def test_too_many_states_or_empty_axis_is_refused():
    with pytest.raises(ValueError, match="states"):
        explorer(lambda a, b: "", {"a": range(30), "b": range(30)})
    with pytest.raises(ValueError, match="at least one value"):
        explorer(lambda a: "", {"a": []})


def test_figure_html_embeds_png_with_alt_text():
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    tag = figure_html(fig, alt='a "line"')
    assert tag.startswith('<img src="data:image/png;base64,') and 'alt="a &quot;line&quot;"' in tag
    assert not plt.get_fignums()  # closed, so the notebook does not show it twice


def test_table_html_escapes():
    assert "&lt;b&gt;" in table_html([["<b>"]], header=["h"])


def test_pipeline_explorer_offers_every_schedule():
    """The chapter's schedule explorer: a state per schedule and size, its bubble the simulator's, the closed form
    beside it; a size a schedule cannot take says why instead of breaking the page."""
    import re

    from dlperf.parallel import pipeline as PP

    axes = {"schedule": list(PP.ALL_SCHEDULES), "p": [2, 3, 4], "m": [4, 8]}
    box = explorer(PP.explore_state, axes, defaults={"schedule": "ZB-H1", "p": 4, "m": 8})
    states = leaves(box.children[-1])
    assert len(states) == 4 * 3 * 2 and {"GPipe", "1F1B", "interleaved 1F1B", "ZB-H1"} == set(axes["schedule"])
    k = 0
    for schedule in axes["schedule"]:
        for p in axes["p"]:
            for m in axes["m"]:
                state = states[k]
                k += 1
                if schedule == "interleaved 1F1B" and m % p:
                    assert "<svg" not in state and "multiple of p" in state
                    continue
                counted, form = map(float, re.search(r"bubble ([0-9.]+) \(formula .*?: ([0-9.]+)\)", state).groups())
                assert "<svg" in state and counted == form, (schedule, p, m)
    zb = states[axes["schedule"].index("ZB-H1") * 6 + 2 * 2 + 1]          # ZB-H1, p = 4, m = 8
    assert "makespan 27 " in zb and "bubble 0.111" in zb                   # 8 x 3 + 3 x (1 + 1 - 1)
