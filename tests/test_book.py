"""The book builds offline, executes every chapter, and loads nothing from other hosts.

The build itself is the test that every page executes: warnings are errors and
a cell that raises fails the build (see scripts/build_book.py).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from conftest import ROOT, run_build, toc_files

pytestmark = pytest.mark.slow

# Attributes through which a page *loads* something (links to read elsewhere are fine).
LOADING = {
    ("script", "src"),
    ("img", "src"),
    ("iframe", "src"),
    ("source", "src"),
    ("video", "src"),
    ("audio", "src"),
    ("embed", "src"),
    ("object", "data"),
    ("link", "href"),  # stylesheets, preloads, icons; <link rel=canonical> is checked too, harmlessly
}


class Resources(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if (tag, name) in LOADING and value:
                self.urls.append((tag, value))


def loaded_urls(page: Path) -> list[tuple[str, str]]:
    parser = Resources()
    parser.feed(page.read_text(errors="replace"))
    return parser.urls


def is_external(url: str) -> bool:
    parts = urlsplit(url)
    return bool(parts.scheme not in ("", "data") or parts.netloc or url.startswith("//"))


def site_pages(html: Path) -> list[Path]:
    """Every HTML page a reader can open (not the theme's template snippets under _static/)."""
    return sorted(p for p in html.glob("**/*.html") if p.relative_to(html).parts[0] != "_static")


def chapter_pages(html: Path) -> dict[str, Path]:
    return {doc: html / f"{doc}.html" for doc in toc_files()}


def test_every_toc_page_is_built_and_executed(book):
    pages = chapter_pages(book.html)
    for doc, page in pages.items():
        assert page.exists(), f"{doc} was not built"
        source = ROOT / f"{doc}.md"
        if "{code-cell}" in source.read_text():
            text = page.read_text()
            assert "cell_output" in text, f"{doc} has code cells but no outputs: not executed"
            assert "Traceback (most recent call last)" not in text, f"{doc} shows a traceback"
    assert not (book.html / "reports").exists() or not list((book.html / "reports").glob("**/*.err.log"))


def test_no_page_loads_anything_from_another_host(book):
    offenders = []
    for page in site_pages(book.html):
        for tag, url in loaded_urls(page):
            if is_external(url):
                offenders.append(f"{page.relative_to(book.html)}: <{tag}> {url}")
    assert not offenders, "pages load from other hosts:\n" + "\n".join(offenders[:30])


def test_stylesheets_import_nothing_from_another_host(book):
    offenders = []
    for css in sorted(book.html.glob("_static/**/*.css")):
        for url in re.findall(r"""(?:url\(|@import\s+)['"]?([^'")\s]+)""", css.read_text(errors="replace")):
            if is_external(url):
                offenders.append(f"{css.relative_to(book.html)}: {url}")
    assert not offenders, "\n".join(offenders)


def test_every_local_resource_exists(book):
    missing = []
    for page in site_pages(book.html):
        for tag, url in loaded_urls(page):
            if is_external(url) or url.startswith("data:") or url.startswith("#"):
                continue
            target = (page.parent / urlsplit(url).path).resolve()
            if not target.exists():
                missing.append(f"{page.relative_to(book.html)}: <{tag}> {url}")
    assert not missing, "\n".join(missing[:30])


def test_math_and_widgets_use_the_vendored_scripts(book):
    pages = [p for p in site_pages(book.html) if "math notranslate" in p.read_text()]
    assert pages, "no page with math was built"
    for page in pages:
        assert "_static/mathjax/tex-chtml.js" in page.read_text(), page
    widget_pages = [p for p in site_pages(book.html) if "application/vnd.jupyter.widget-state+json" in p.read_text()]
    assert widget_pages, "no page embeds widget state"
    for page in widget_pages:
        scripts = [url for tag, url in loaded_urls(page) if tag == "script"]
        assert any(u.split("?")[0].endswith("_static/require.js") for u in scripts), page
        assert any(u.split("?")[0].endswith("_static/html-manager/embed-amd.js") for u in scripts), page


def test_a_rebuild_takes_every_notebook_from_the_execution_cache(book):
    """Throw away the HTML and Sphinx's environment but keep the execution cache:
    every page is read again, and every notebook must come from the cache."""
    import shutil

    for folder in ("html", ".doctrees"):
        shutil.rmtree(ROOT / "_build" / folder, ignore_errors=True)
    again = run_build()
    assert again.returncode == 0, again.output[-4000:]
    executable = [doc for doc in toc_files() if "{code-cell}" in (ROOT / f"{doc}.md").read_text()]
    assert "Executing notebook" not in again.output, again.output[-4000:]
    assert again.output.count("Using cached notebook") == len(executable), again.output[-4000:]


EXERCISE_CHAPTERS = {"book/multi-gpu": "allreduce", "book/parameter-servers": "ring_allreduce",
                     "book/mixed-precision": "gradscaler", "book/async": "no_sync_loop",
                     "book/compilers": "compile_clean", "book/model-parallelism": "pipeline_schedule",
                     "book/gpu-kernels": "triton_softmax", "book/memory": "zero1",
                     "book/ddp": "ddp_buckets", "book/parallelism-at-scale": "ring_attention",
                     "book/attention-kernels": "flash_attention", "book/hardware": "roofline_place"}


# chapters with a second exercise
MORE_EXERCISE_CHAPTERS = [("book/parameter-servers", "ssp_server"), ("book/model-parallelism", "tensor_parallel")]


def _links(page: Path) -> list[str]:
    return re.findall(r'href="([^"]+)"', page.read_text())


def test_each_exercise_chapter_and_the_exercises_page_offer_the_student_notebook(book):
    from autograder import course

    for doc, aid in [*EXERCISE_CHAPTERS.items(), *MORE_EXERCISE_CHAPTERS]:
        for page in (book.html / f"{doc}.html", book.html / "book" / "exercises.html"):
            targets = [u for u in _links(page) if urlsplit(u).path.endswith(f"/{aid}.ipynb")]
            assert targets, f"{page.name} does not link to {aid}.ipynb"
            for url in targets:
                downloaded = (page.parent / urlsplit(url).path).resolve()
                assert downloaded.read_bytes() == course.release_notebook(aid).read_bytes(), (
                    f"{page.name}: {url} is not the student version of {aid}")


def test_the_built_book_contains_no_solution_and_no_hidden_test(book):
    import html

    from autograder import course

    secrets = {aid: course.secret_lines(aid) for aid in course.assignments()}
    leaks = []
    for path in sorted(p for p in book.html.rglob("*") if p.is_file()):
        if path.suffix not in (".html", ".ipynb", ".md", ".txt", ".js", ".json", ".py"):
            continue
        text = path.read_text(errors="replace")
        if path.suffix == ".html":  # highlighted code is split into spans: compare the text
            text = html.unescape(re.sub(r"<[^>]+>", "", text))
        for aid, lines in secrets.items():
            leaks += [f"{path.relative_to(book.html)}: {aid}: {line}" for line in lines if line in text]
    assert not leaks, "\n".join(leaks[:20])
