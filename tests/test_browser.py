"""The built book, opened in a real browser (headless Chromium through selenium).

The book (the session fixture ``book``) is served over http from 127.0.0.1 by a
background ``http.server`` thread; one browser session serves the whole module, with
its network (performance) and console (browser) logs on.  Every page is visited once
(the ``site`` fixture) and the checks of tests/browser_tools.py, each a function that
returns a list of problems, run on it; the tests then assert on their own part:

1. every page loads nothing from another host, gets no HTTP error, logs no SEVERE message;
2. MathJax typeset every math element, and no raw TeX is left visible;
3. every figure of an article loaded and has alt text (a widget's inline SVG figure:
   role="img" and an aria-label);
4. every widget view renders, and every explorer's output changes when a control moves;
5. the exercise downloads are the student notebooks of exercises/, byte for byte;
6. the client-side search finds chapter terms;
7. every link into the site reaches a file, and its #fragment an element of the target;
   and every page's navigation sidebar links to every chapter (not stale);
8. screenshots are written to _build/screenshots/ (SCREENSHOTS): two chapters, full
   window after MathJax (chapter-hardware.png, chapter-parameter-servers.png), and every
   explorer after its controls moved (widget-<chapter>-<n>.png);
9. the widget, the math and the code-width checks fail on a copy of the site with the widget
   manager, MathJax, resp. the listings' style sheet deleted;
10. no block of code or output scrolls sideways (wider ones wrap at the box's edge).

Chromium, chromedriver and selenium are required: where one is missing the tests fail
and say how to install them.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field

import pytest
from browser_tools import (
    INSTALL_HINT,
    code_width_problems,
    SiteServer,
    Visit,
    download_problems,
    find_browser,
    image_problems,
    link_problems,
    load_problems,
    math_problems,
    navigation_problems,
    page_ids,
    page_links,
    search_problems,
    start_browser,
    visit,
    widget_interaction_problems,
    widget_render_problems,
)
from conftest import ROOT, toc_files

pytestmark = pytest.mark.slow

SCREENSHOTS = ROOT / "_build" / "screenshots"
SCREENSHOT_CHAPTERS = ("book/hardware", "book/parameter-servers")


def site_paths(html) -> list[str]:
    """Every page of _toc.yml, then the search page and the index when built."""
    paths = [f"{doc}.html" for doc in toc_files()]
    return paths + [p for p in ("search.html", "genindex.html") if (html / p).exists()]


@pytest.fixture(scope="module")
def server(book):
    with SiteServer(book.html) as srv:
        yield srv


def _missing_browser() -> str | None:
    try:
        find_browser()
    except RuntimeError as exc:
        return str(exc)
    return None


def test_chromium_chromedriver_and_selenium_are_installed():
    """Fails (never skips) where the browser tests cannot run, saying how to install."""
    missing = _missing_browser()
    if missing:
        pytest.fail(missing, pytrace=False)


@pytest.fixture(scope="module")
def browser():
    missing = _missing_browser()
    if missing:
        pytest.fail(missing, pytrace=False)
    error = None
    try:
        driver = start_browser()
    except Exception as exc:  # noqa: BLE001 - a browser that does not start is the failure
        error = f"headless Chromium did not start: {type(exc).__name__}: {exc}\n{INSTALL_HINT}"
    if error:
        pytest.fail(error, pytrace=False)
    yield driver
    driver.quit()


@dataclass
class PageReport:
    visit: Visit
    problems: dict[str, list[str]] = field(default_factory=dict)
    links: list[str] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)
    images: int = 0
    maths: int = 0
    widget_views: int = 0


def _run(check, *args) -> list[str]:
    try:
        return check(*args)
    except Exception as exc:  # noqa: BLE001 - a check that crashes reports it as its problem
        return [f"{check.__name__} raised {type(exc).__name__}: {str(exc)[:300]}"]


@pytest.fixture(scope="module")
def site(book, server, browser) -> dict[str, PageReport]:
    """Every page visited once; every per-page check run on it."""
    reports = {}
    chapters = {doc: server.url(f"{doc}.html") for doc in toc_files()}
    for path in site_paths(book.html):
        url = server.url(path)
        v = visit(browser, url)
        report = PageReport(v)
        report.problems["load"] = load_problems(v, server.origin)
        report.problems["math"] = _run(math_problems, browser)
        report.problems["images"] = _run(image_problems, browser)
        report.problems["widgets"] = _run(widget_render_problems, browser)
        report.problems["navigation"] = _run(navigation_problems, browser, chapters)
        report.problems["code width"] = _run(code_width_problems, browser)
        report.links = page_links(browser)
        report.ids = page_ids(browser)
        report.images, report.maths, report.widget_views = browser.execute_script(
            "return [document.querySelectorAll('article.bd-article img').length,"
            " document.querySelectorAll('.math').length,"
            " document.querySelectorAll('script[type=\"application/vnd.jupyter.widget-view+json\"]').length]")
        reports[path] = report
    return reports


def _fail_on(problems: list[str], what: str) -> None:
    if problems:
        more = f"\n... and {len(problems) - 60} more" if len(problems) > 60 else ""
        pytest.fail(f"{what}: {len(problems)} problem(s)\n" + "\n".join(problems[:60]) + more, pytrace=False)


def _failures(site, kind) -> list[str]:
    return [f"{path}: {p}" for path, r in site.items() for p in r.problems[kind]]


def test_every_page_loads_only_from_the_local_server(site):
    assert len(site) >= len(toc_files())
    assert all(r.visit.requests for r in site.values()), "a page was visited without any request logged"
    _fail_on(_failures(site, "load"), "load")


def test_math_is_typeset_with_no_raw_tex_left(site):
    with_math = [p for p, r in site.items() if r.maths]
    assert len(with_math) >= 5, f"math found on {with_math} only"
    _fail_on(_failures(site, "math"), "math")


def test_every_figure_loads_and_has_alt_text(site):
    assert sum(r.images for r in site.values()) >= 10, {p: r.images for p, r in site.items()}
    _fail_on(_failures(site, "images"), "images")


def test_no_code_box_scrolls_sideways(site):
    """Listings of library code (formatted for 120 columns) and wide outputs wrap at their box's edge."""
    _fail_on(_failures(site, "code width"), "code width")


def test_every_widget_view_renders_without_error(site):
    with_widgets = [p for p, r in site.items() if r.widget_views]
    assert len(with_widgets) >= 3, f"widget views found on {with_widgets} only"
    _fail_on(_failures(site, "widgets"), "widgets")


def test_every_explorer_responds_to_its_controls_in_the_browser(site, server, browser):
    pages = [p for p, r in site.items() if r.widget_views]
    problems, explorers = [], 0
    for path in pages:
        visit(browser, server.url(path))
        name = "widget-" + path.rsplit("/", 1)[-1].removesuffix(".html")
        problems += [f"{path}: {p}" for p in widget_interaction_problems(browser, SCREENSHOTS, name)]
        explorers += len(browser.find_elements("css selector", ".widget-subarea > .jupyter-widgets"))
    assert explorers >= 5, f"only {explorers} explorers rendered on {pages}"
    _fail_on(problems, "explorers")


def test_exercise_downloads_are_the_student_notebooks(server, browser):
    visit(browser, server.url("book/exercises.html"))
    _fail_on(download_problems(browser, ROOT / "exercises"), "exercise downloads")


@pytest.mark.parametrize("term, expect", [
    ("allreduce", ("book/multi-gpu.html", "book/parameter-servers.html")),
    ("roofline", ("book/hardware.html",)),
])
def test_search_finds_chapter_terms(server, browser, term, expect):
    _fail_on(search_problems(browser, server, term, expect), "search")


def test_every_internal_link_and_fragment_resolves(site, server):
    links = {r.visit.url: r.links for r in site.values()}
    ids = {r.visit.url: r.ids for r in site.values()}
    chapter_links = [h for hs in links.values() for h in hs
                     if h.startswith(server.origin) and "#" in h and "/book/" in h]
    assert len(chapter_links) >= 20, "too few links with fragments found: the collection is broken"
    _fail_on(link_problems(links, ids, server.origin), "internal links")


def test_every_page_navigates_to_every_chapter(site):
    _fail_on(_failures(site, "navigation"), "navigation")


def test_screenshots_of_two_chapters(server, browser):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for doc in SCREENSHOT_CHAPTERS:
        v = visit(browser, server.url(f"{doc}.html"))
        assert v.waited["math"] == "typeset", v.waited
        target = SCREENSHOTS / f"chapter-{doc.rsplit('/', 1)[-1]}.png"
        target.unlink(missing_ok=True)
        assert browser.save_screenshot(str(target))
        assert target.stat().st_size > 20_000, f"{target} is suspiciously small"


BREAKS = {
    # what to delete from a copy of the site, the check that must fail, the one that must not
    "widgets": ("_static/html-manager/embed-amd.js", widget_render_problems, math_problems),
    "math": ("_static/mathjax/tex-chtml.js", math_problems, widget_render_problems),
    "code width": ("_static/listings.css", code_width_problems, math_problems),
}


@pytest.mark.parametrize("broken", sorted(BREAKS))
def test_the_checks_fail_on_a_broken_copy_of_the_site(book, browser, tmp_path, broken):
    victim, failing, passing = BREAKS[broken]
    copy = tmp_path / "html"
    shutil.copytree(book.html, copy)
    (copy / victim).unlink()
    with SiteServer(copy) as srv:
        v = visit(browser, srv.url("book/hardware.html"), widget_timeout=8)
        failed = failing(browser)
        unaffected = passing(browser)
        load = load_problems(v, srv.origin)
        # the interaction check on the broken copy, too: no explorer, or one that does not respond
        interaction = widget_interaction_problems(browser) if broken == "widgets" else []
    assert failed, f"{failing.__name__} found nothing wrong with {victim} deleted"
    assert any("HTTP 404" in p and victim.rsplit("/", 1)[-1] in p for p in load), load
    assert not unaffected, f"{passing.__name__} failed too: {unaffected}"
    if broken == "widgets":
        assert interaction, "the interaction check found nothing wrong without the widget manager"
