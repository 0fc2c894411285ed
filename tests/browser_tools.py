"""Helpers of test_browser.py: a local server for a built site, a headless Chromium, and
the checks, each a function that returns a list of problems (empty: the check passed),
so that a test can run the same check on the real site and on a deliberately broken copy.

selenium is imported only inside the functions that drive the browser: pytest imports
this module for its doctests even where selenium is not installed.
"""

from __future__ import annotations

import base64
import functools
import http.server
import json
import os
import shutil
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urldefrag, urlsplit

INSTALL_HINT = (
    "The browser tests drive a headless Chromium through selenium. Install them with\n"
    "    sudo apt-get install -y chromium chromium-driver      # Debian; Ubuntu: chromium-browser/chromedriver\n"
    "    .venv/bin/python -m pip install selenium\n"
    "or point CHROME_BIN and CHROMEDRIVER at a Chromium/Chrome and its matching chromedriver."
)

WIDGET_VIEW = 'script[type="application/vnd.jupyter.widget-view+json"]'
WIDGET_STATE = 'script[type="application/vnd.jupyter.widget-state+json"]'
ARTICLE = "article.bd-article"


# --------------------------------------------------------------------------- server


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep pytest's output clean
        pass


class SiteServer:
    """``http.server`` serving ``root`` on 127.0.0.1 (a free port) from a background thread."""

    def __init__(self, root: Path) -> None:
        handler = functools.partial(_QuietHandler, directory=str(root))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.root = root
        self.origin = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    def url(self, path: str) -> str:
        return f"{self.origin}/{path.lstrip('/')}"


# --------------------------------------------------------------------------- browser


def find_browser() -> tuple[str, str]:
    """(chromium binary, chromedriver); raises RuntimeError with the install hint."""
    try:
        import selenium  # noqa: F401
    except ImportError as exc:
        raise RuntimeError(f"selenium is not installed ({exc}).\n{INSTALL_HINT}") from None
    chrome = os.environ.get("CHROME_BIN") or next(
        (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome", "chrome")) if p), None)
    driver = os.environ.get("CHROMEDRIVER") or shutil.which("chromedriver")
    if not chrome or not os.access(chrome, os.X_OK):
        raise RuntimeError(f"no Chromium/Chrome binary found (PATH, CHROME_BIN={chrome!r}).\n{INSTALL_HINT}")
    if not driver or not os.access(driver, os.X_OK):
        raise RuntimeError(f"no chromedriver found (PATH, CHROMEDRIVER={driver!r}).\n{INSTALL_HINT}")
    return chrome, driver


def start_browser(width: int = 1300, height: int = 1000):
    """Headless Chromium with the browser (console) and performance (network) logs on."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chrome, driver_path = find_browser()
    opts = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-extensions",
                "--hide-scrollbars", f"--window-size={width},{height}"):
        opts.add_argument(arg)
    opts.binary_location = chrome
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=opts)
    driver.set_page_load_timeout(90)
    driver.set_script_timeout(60)
    return driver


# --------------------------------------------------------------------------- visiting a page


@dataclass
class Visit:
    """What one page load sent, received and logged."""

    url: str
    requests: list[str] = field(default_factory=list)
    responses: list[tuple[int, str]] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)
    console: list[tuple[str, str]] = field(default_factory=list)
    waited: dict[str, str] = field(default_factory=dict)


def drain_logs(driver) -> None:
    for kind in ("performance", "browser"):
        driver.get_log(kind)


_WAIT_MATH = """
const done = arguments[arguments.length - 1];
if (!document.querySelector('.math')) { done('no math'); return; }
const mj = window.MathJax;
if (!mj || !mj.startup || !mj.startup.promise) { done('MathJax did not load'); return; }
mj.startup.promise.then(() => done('typeset'), (e) => done('MathJax failed: ' + e));
"""

_WIDGETS_RENDERED = """
const tags = [...document.querySelectorAll('SELECTOR')];
return tags.every((t) => {
  const p = t.previousElementSibling;
  return p && p.classList.contains('widget-subarea') && p.querySelector('.jupyter-widgets');
});
""".replace("SELECTOR", WIDGET_VIEW)


def visit(driver, url: str, widget_timeout: float = 30.0) -> Visit:
    """Load ``url`` and wait until MathJax has typeset and the widgets have rendered
    (or ``widget_timeout`` passed); return the network and console log of the load."""
    drain_logs(driver)
    driver.get(url)
    v = Visit(url)
    v.waited["math"] = driver.execute_async_script(_WAIT_MATH)
    if driver.execute_script(f"return !!document.querySelector('{WIDGET_VIEW}')"):
        deadline = time.monotonic() + widget_timeout
        while not driver.execute_script(_WIDGETS_RENDERED):
            if time.monotonic() > deadline:
                v.waited["widgets"] = f"not all rendered after {widget_timeout:.0f} s"
                break
            time.sleep(0.2)
        else:
            v.waited["widgets"] = "rendered"
    # images: wait (briefly) for every <img> to finish, loaded or broken
    deadline = time.monotonic() + 10
    while not driver.execute_script("return [...document.images].every((i) => i.complete)"):
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    time.sleep(0.3)  # let late requests (fonts, search summaries) reach the log
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Network.requestWillBeSent":
            v.requests.append(params["request"]["url"])
        elif method == "Network.responseReceived":
            v.responses.append((int(params["response"]["status"]), params["response"]["url"]))
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            v.failures.append((params.get("errorText", "?"), params.get("requestId", "?")))
    v.console = [(e["level"], e["message"]) for e in driver.get_log("browser")]
    return v


# --------------------------------------------------------------------------- checks


def load_problems(v: Visit, origin: str) -> list[str]:
    """Requests to other hosts, HTTP errors, failed loads, SEVERE console messages."""
    problems = []
    for url in v.requests:
        if url.startswith(("data:", "blob:")):
            continue
        parts = urlsplit(url)
        if f"{parts.scheme}://{parts.netloc}" != origin:
            problems.append(f"request to another host: {url[:160]}")
    problems += [f"HTTP {status}: {url[:160]}" for status, url in v.responses if status >= 400]
    problems += [f"load failed ({err})" for err, _ in v.failures]
    problems += [f"console {level}: {text[:300]}" for level, text in v.console if level == "SEVERE"]
    return problems


_MATH = """
const out = [];
for (const el of document.querySelectorAll('.math')) {
  const clone = el.cloneNode(true);
  clone.querySelectorAll('mjx-assistive-mml').forEach((n) => n.remove());
  out.push({typeset: !!el.querySelector('mjx-container'),
            error: !!el.querySelector('mjx-merror'),
            text: clone.textContent.trim().slice(0, 80)});
}
return out;
"""

RAW_TEX = ("\\(", "\\)", "\\[", "\\]", "$$", "\\begin", "\\frac")


def math_problems(driver) -> list[str]:
    """On the current page: every math element typeset by MathJax, with no TeX left visible."""
    maths = driver.execute_script(_MATH)
    if not maths:
        return []
    problems = []
    if not driver.find_elements("css selector", "mjx-container"):
        problems.append(f"{len(maths)} math elements but no mjx-container: MathJax did not typeset")
    for m in maths:
        if not m["typeset"]:
            problems.append(f"math not typeset: {m['text']!r}")
        elif m["error"]:
            problems.append(f"TeX error in math: {m['text']!r}")
        elif any(t in m["text"] for t in RAW_TEX):
            problems.append(f"raw TeX visible: {m['text']!r}")
    return problems


_IMAGES = """
return [...document.querySelectorAll('SELECTOR img')].map((i) => ({
  src: i.getAttribute('src') || '', alt: i.getAttribute('alt'),
  complete: i.complete, width: i.naturalWidth}));
""".replace("SELECTOR", ARTICLE)


_WIDGET_SVGS = """
return [...document.querySelectorAll('.widget-subarea svg')].filter((s) => !s.parentElement.closest('svg'))
  .map((s) => ({role: s.getAttribute('role'),
                label: (s.getAttribute('aria-label') || '').trim() ||
                       ((s.querySelector(':scope > title') || {}).textContent || '').trim(),
                size: s.getBoundingClientRect().width * s.getBoundingClientRect().height}));
"""


_WIDE_CODE = """
return [...document.querySelectorAll('article.bd-article pre')].filter((p) => p.scrollWidth > p.clientWidth + 1)
  .map((p) => [p.scrollWidth, p.clientWidth,
               p.textContent.split('\\n').reduce((a, b) => (b.length > a.length ? b : a), '').slice(0, 60)]);
"""


def code_width_problems(driver) -> list[str]:
    """No block of code or output in the article scrolls sideways: each fits its box (wrapped where wider)."""
    return [f"a code box {wide} px wide in {box} px scrolls sideways: {line!r}..."
            for wide, box, line in driver.execute_script(_WIDE_CODE)]


def image_problems(driver) -> list[str]:
    """Every <img> of the article (widget outputs included) loaded and has a non-empty alt;
    every figure a widget draws as inline SVG is shown, with role="img" and a label."""
    problems = []
    for n, svg in enumerate(driver.execute_script(_WIDGET_SVGS)):
        if svg["role"] != "img" or not svg["label"]:
            problems.append(f"widget SVG figure {n}: role={svg['role']!r}, label={svg['label']!r}")
        if not svg["size"]:
            problems.append(f"widget SVG figure {n} has no size on screen")
    for img in driver.execute_script(_IMAGES):
        src = img["src"] if not img["src"].startswith("data:") else img["src"][:30] + "..."
        if not img["complete"] or img["width"] == 0:
            problems.append(f"image did not load: {src}")
        if not (img["alt"] or "").strip():
            problems.append(f"image without alt text: {src}")
    return problems


_WIDGET_VIEWS = """
return [...document.querySelectorAll('SELECTOR')].map((t) => {
  const p = t.previousElementSibling;
  const area = p && p.classList.contains('widget-subarea') ? p : null;
  let model = '?';
  try { model = JSON.parse(t.textContent).model_id; } catch (e) {}
  return {model: model, area: !!area,
          rendered: !!(area && area.querySelector('.jupyter-widgets')),
          errors: area ? [...area.querySelectorAll('.jupyter-widgets-error-widget')]
                           .map((e) => e.textContent.trim().slice(0, 200)) : []};
});
""".replace("SELECTOR", WIDGET_VIEW)


def has_widget_state(driver) -> bool:
    return driver.execute_script(f"return !!document.querySelector('{WIDGET_STATE}')")


def widget_render_problems(driver) -> list[str]:
    """On a page with embedded widget state: every widget view rendered, none an error."""
    if not has_widget_state(driver):
        return []
    views = driver.execute_script(_WIDGET_VIEWS)
    if not views:
        return ["widget state embedded but no widget view on the page"]
    problems = []
    for view in views:
        if not view["area"]:
            problems.append(f"widget {view['model']}: no output area (the widget manager did not run)")
        elif not view["rendered"]:
            problems.append(f"widget {view['model']}: output area has no rendered widget")
        problems += [f"widget {view['model']}: error: {e}" for e in view["errors"]]
    page_errors = driver.execute_script(
        "return document.querySelectorAll('.jupyter-widgets-error-widget').length")
    if page_errors and not any("error" in p for p in problems):
        problems.append(f"{page_errors} widget error views on the page")
    return problems


_EXPLORER_OUTPUT = """
const box = arguments[0];
return [...box.querySelectorAll('.widget-html-content')].map((e) => e.innerHTML).join('\\n');
"""


def explorers(driver) -> list:
    """The top-level widget of every rendered widget output area that has a slider or a dropdown."""
    return driver.execute_script("""
      return [...document.querySelectorAll('.widget-subarea > .jupyter-widgets')]
        .filter((w) => w.querySelector('.noUi-handle, select'));""")


def widget_interaction_problems(driver, screenshot_dir: Path | None = None, name: str = "widget") -> list[str]:
    """Move every slider (arrow key on its focused handle) and dropdown (next option) of every
    explorer on the current page; its displayed output must change in the browser."""
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    problems = []
    boxes = explorers(driver)
    if has_widget_state(driver) and not boxes:
        problems.append("widget state embedded but no explorer with a slider or dropdown rendered")
    for n, box in enumerate(boxes):
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", box)
        controls = box.find_elements("css selector", ".noUi-handle, select")
        for c, control in enumerate(controls):
            before = driver.execute_script(_EXPLORER_OUTPUT, box)
            label = driver.execute_script(
                "const w = arguments[0].closest('.widget-inline-hbox');"
                "return w ? w.innerText.replace(/\\s+/g, ' ').trim() : '?'", control)
            if control.tag_name == "select":
                select = Select(control)
                options = select.options
                current = next(i for i, o in enumerate(options) if o.is_selected())
                select.select_by_index(current + 1 if current + 1 < len(options) else current - 1)
            else:
                at_max = control.get_attribute("aria-valuenow") == control.get_attribute("aria-valuemax")
                control.send_keys(Keys.ARROW_LEFT if at_max else Keys.ARROW_RIGHT)
            deadline = time.monotonic() + 5
            after = before
            while after == before and time.monotonic() < deadline:
                time.sleep(0.1)
                after = driver.execute_script(_EXPLORER_OUTPUT, box)
            now = driver.execute_script(
                "const w = arguments[0].closest('.widget-inline-hbox');"
                "return w ? w.innerText.replace(/\\s+/g, ' ').trim() : '?'", control)
            if not before:
                problems.append(f"explorer {n}: no displayed output (.widget-html-content) found")
            elif after == before:
                problems.append(f"explorer {n}, control {c} ({label} -> {now}): the displayed output did not change")
        if screenshot_dir is not None:
            screenshot_dir.mkdir(parents=True, exist_ok=True)
            box.screenshot(str(screenshot_dir / f"{name}-{n}.png"))
    return problems


def page_links(driver) -> list[str]:
    """Every <a href> of the current page, resolved by the browser."""
    return driver.execute_script(
        "return [...document.querySelectorAll('a[href]')].map((a) => a.href)")


def navigation_problems(driver, expected: dict[str, str]) -> list[str]:
    """The book's navigation sidebar of the current page links to every page of ``expected``
    (title -> URL) but the current one.  An incremental build that adds a page to the
    table of contents rewrites only the pages it changed: the others keep a stale sidebar."""
    here = driver.execute_script("return location.href.split('#')[0]")
    linked = {h.split("#")[0] for h in driver.execute_script(
        "return [...document.querySelectorAll('.bd-sidebar-primary a[href]')].map((a) => a.href)")}
    if not linked:
        return ["no navigation sidebar (.bd-sidebar-primary) with links"]
    return [f"navigation does not link to {doc}" for doc, url in expected.items()
            if url != here and url not in linked]


def page_ids(driver) -> set[str]:
    return set(driver.execute_script(
        "return [...document.querySelectorAll('[id], a[name]')].map((e) => e.id || e.getAttribute('name'))"))


class _Ids(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if value and (name == "id" or (tag == "a" and name == "name")):
                self.ids.add(value)


def fetch(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


def link_problems(links: dict[str, list[str]], ids: dict[str, set[str]], origin: str) -> list[str]:
    """``links``: page URL -> hrefs on it; ``ids``: page URL -> ids in its DOM (pages not in
    it are fetched and parsed).  Every link into the site must reach a file (HTTP 200) and,
    with a #fragment, an element with that id on the target page."""
    problems, status, static_ids = [], {}, {}
    for page, hrefs in links.items():
        for href in sorted(set(hrefs)):
            parts = urlsplit(href)
            if parts.scheme not in ("http", "https") or f"{parts.scheme}://{parts.netloc}" != origin:
                continue
            target, fragment = urldefrag(href)
            target = target.split("?")[0]
            if target not in status:
                status[target] = fetch(target)
            code, body = status[target]
            if code != 200:
                problems.append(f"{page}: {href} -> HTTP {code}")
                continue
            if not fragment or not target.endswith((".html", "/")):
                continue
            if target in ids:
                known = ids[target]
            else:
                if target not in static_ids:
                    parser = _Ids()
                    parser.feed(body.decode("utf-8", "replace"))
                    static_ids[target] = parser.ids
                known = static_ids[target]
            if urllib.parse.unquote(fragment) not in known:
                problems.append(f"{page}: {href} -> no element with id {fragment!r}")
    return problems


_FETCH_DOWNLOADS = """
const done = arguments[arguments.length - 1];
const links = [...document.querySelectorAll('a[href$=".ipynb"]')];
Promise.all(links.map((a) => fetch(a.href).then(async (r) => {
  const blob = await r.blob();
  const data = await new Promise((ok) => {
    const reader = new FileReader(); reader.onload = () => ok(reader.result); reader.readAsDataURL(blob); });
  return {href: a.getAttribute('href'), url: a.href, status: r.status, data: data};
}, (e) => ({href: a.getAttribute('href'), url: a.href, status: 0, data: String(e)}))))
  .then(done, (e) => done([{href: '?', url: '?', status: 0, data: String(e)}]));
"""


def download_problems(driver, exercises: Path) -> list[str]:
    """On the exercises page: every .ipynb link, fetched by the page, is a valid notebook equal,
    byte for byte, to exercises/<id>/<id>.ipynb; and every exercise is linked."""
    import nbformat

    problems = []
    got = driver.execute_async_script(_FETCH_DOWNLOADS)
    expected = {p.name for p in exercises.iterdir() if (p / f"{p.name}.ipynb").exists()}
    linked = set()
    for item in got:
        aid = Path(urlsplit(item["url"]).path).stem
        linked.add(aid)
        if item["status"] != 200:
            problems.append(f"{item['href']}: HTTP {item['status']} {item['data'][:100]}")
            continue
        data = base64.b64decode(item["data"].split(",", 1)[1]) if "," in item["data"] else b""
        source = exercises / aid / f"{aid}.ipynb"
        if not source.exists():
            problems.append(f"{item['href']}: no exercises/{aid}/{aid}.ipynb to compare with")
            continue
        try:
            nbformat.validate(nbformat.reads(data.decode("utf-8"), as_version=nbformat.NO_CONVERT))
        except Exception as exc:  # noqa: BLE001 - any failure is the finding
            problems.append(f"{item['href']}: not a valid notebook: {type(exc).__name__}: {str(exc)[:200]}")
        if data != source.read_bytes():
            problems.append(f"{item['href']}: {len(data)} bytes differ from exercises/{aid}/{aid}.ipynb "
                            f"({source.stat().st_size} bytes)")
    problems += [f"exercise {aid} is not linked" for aid in sorted(expected - linked)]
    return problems


_SEARCH_DONE = """
const s = document.querySelector('#search-results .search-summary');
return s ? s.innerText : '';
"""


def search_problems(driver, server: SiteServer, term: str, expect: tuple[str, ...]) -> list[str]:
    """search.html?q=term lists a result linking to one of the pages ``expect`` (paths)."""
    driver.get(server.url(f"search.html?q={term}"))
    deadline, summary = time.monotonic() + 30, ""
    while time.monotonic() < deadline:
        summary = driver.execute_script(_SEARCH_DONE)
        if summary.startswith(("Search finished", "Your search did not match")):
            break
        time.sleep(0.2)
    else:
        return [f"search for {term!r} did not finish in 30 s (summary: {summary!r})"]
    results = driver.execute_script(
        "return [...document.querySelectorAll('#search-results ul.search li a')].map((a) => a.href)")
    paths = {urlsplit(r).path.lstrip("/") for r in results}
    if not any(p in paths for p in expect):
        return [f"search for {term!r}: {summary!r}; results {sorted(paths)} include none of {list(expect)}"]
    return []
