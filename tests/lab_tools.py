"""Driving JupyterLab in a real Chromium (selenium): its notebook model read and written through
``window.jupyterapp`` (the server runs with ``--expose-app-in-browser``, or the hub's servers
with the same setting), its menus, dialogs and nbgrader's *Validate* button.  Used by
tests/test_student_path.py (a JupyterLab alone) and tests/test_hub.py (JupyterLab on a hub).
"""

from __future__ import annotations

import time

import pytest

_PANEL = "const app = window.jupyterapp; const w = app && app.shell.currentWidget;\n"

_STATE = _PANEL + """
if (!w || !w.sessionContext || !w.content || !w.content.model) return {ready: false};
const kernel = w.sessionContext.session && w.sessionContext.session.kernel;
const prompts = [...w.content.node.querySelectorAll('.jp-InputPrompt')];
return {ready: true, kernel: kernel ? kernel.status : null, dirty: w.context.model.dirty,
        queued: prompts.some((p) => p.textContent.includes('*'))};
"""

_CELLS = _PANEL + """
const cells = [];
for (const c of w.content.model.cells) {
  const nb = c.getMetadata('nbgrader') || {};
  const outputs = c.type === 'code' ? c.outputs.toJSON() : [];
  cells.push({id: nb.grade_id || null, type: c.type, count: c.type === 'code' ? c.executionCount : null,
              errors: outputs.filter((o) => o.output_type === 'error').map((o) => o.ename + ': ' + o.evalue),
              text: outputs.map((o) => [].concat(o.text || (o.data && o.data['text/plain']) || []).join('')).join('')});
}
return cells;
"""

_TYPE = _PANEL + """
let n = 0;
for (const c of w.content.model.cells) {
  const id = (c.getMetadata('nbgrader') || {}).grade_id;
  if (id in arguments[0]) { c.sharedModel.setSource(arguments[0][id]); n++; }
}
return n;
"""

_SCROLL_TO = _PANEL + """
const i = w.content.widgets.findIndex((c) => (c.model.getMetadata('nbgrader') || {}).grade_id === arguments[0]);
if (i < 0) return false;
w.content.activeCellIndex = i;
const node = w.content.widgets[i].node;
(node.querySelector('.jp-Cell-outputWrapper') || node).scrollIntoView({block: 'center'});
return true;
"""


def _wait(driver, what: str, ready, timeout: float = 120.0, settle: float = 1.0):
    """Poll ``ready(state, cells)`` until it has held for ``settle`` seconds."""
    deadline, since, state, cells = time.monotonic() + timeout, None, None, None
    while time.monotonic() < deadline:
        state = driver.execute_script(_STATE)
        cells = driver.execute_script(_CELLS) if state.get("ready") else None
        if state.get("ready") and ready(state, cells):
            since = since or time.monotonic()
            if time.monotonic() - since >= settle:
                return cells
        else:
            since = None
        time.sleep(0.25)
    pytest.fail(f"JupyterLab: {what} did not happen within {timeout:.0f} s (last state {state})", pytrace=False)


def _idle(state, cells) -> bool:
    return state["kernel"] == "idle" and not state["queued"]


def _menu(driver, menu: str, item: str) -> None:
    """Click ``menu`` in JupyterLab's menu bar, then its entry labelled ``item``."""
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + 30      # a page just loaded adds its extensions' menus as they arrive
    while True:
        bar = [m for m in driver.find_elements(By.CSS_SELECTOR, ".lm-MenuBar-item") if m.text.strip() == menu]
        if bar or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert bar, f"no menu {menu!r} in JupyterLab's menu bar"
    bar[0].click()
    deadline = time.monotonic() + 10
    while True:
        labels = driver.find_elements(By.CSS_SELECTOR, ".lm-Menu-item[data-type=command] .lm-Menu-itemLabel")
        found = [label for label in labels if label.text.strip() == item]
        if found:
            found[0].click()
            return
        if time.monotonic() > deadline:
            pytest.fail(f"no entry {item!r} in the {menu} menu: {[label.text for label in labels]}", pytrace=False)
        time.sleep(0.2)


def _dialog(driver, done, timeout: float = 120.0) -> str:
    """Wait for a JupyterLab dialog whose text satisfies ``done``; return its text."""
    from selenium.webdriver.common.by import By

    deadline, text = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        dialogs = driver.find_elements(By.CSS_SELECTOR, ".jp-Dialog")
        text = dialogs[-1].text if dialogs else ""
        if dialogs and done(text):
            return text
        time.sleep(0.25)
    pytest.fail(f"no JupyterLab dialog as expected within {timeout:.0f} s (last: {text[:500]!r})", pytrace=False)


def _close_dialog(driver) -> None:
    from selenium.webdriver.common.by import By

    driver.find_element(By.CSS_SELECTOR, ".jp-Dialog .jp-mod-accept").click()
    deadline = time.monotonic() + 10
    while driver.find_elements(By.CSS_SELECTOR, ".jp-Dialog") and time.monotonic() < deadline:
        time.sleep(0.1)


def _validate(driver) -> str:
    """Click nbgrader's Validate button in the notebook toolbar; return the result dialog's text."""
    from selenium.webdriver.common.by import By

    buttons = [b for b in driver.find_elements(By.CSS_SELECTOR, ".jp-Toolbar .validate-button, .jp-Toolbar jp-button")
               if (b.get_attribute("aria-label") or b.text).strip() == "Validate"]
    assert buttons, "nbgrader's Validate button is not in the notebook toolbar (is nbgrader's lab extension enabled?)"
    buttons[0].click()
    return _dialog(driver, lambda t: "Validation Results" in t and ("Success" in t or "fail" in t.lower()))
