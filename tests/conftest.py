"""Shared fixtures: the book, built once per test session."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import early
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"


def toc_files() -> list[str]:
    """Every document named in _toc.yml, in order (without suffix)."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    found = [toc["root"]]

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                found.append(node["file"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(toc.get("parts", toc.get("chapters", [])))
    return found


@dataclass
class Build:
    returncode: int
    output: str
    html: Path


def run_build() -> Build:
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_book.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    return Build(out.returncode, out.stdout + out.stderr, HTML)


@early.early("book", order=1)
def _build_the_book(session: pytest.Session) -> Build:
    return run_build()


@pytest.fixture(scope="session")
def book() -> Build:
    """The whole book, built as `make book` builds it (cached execution), beside the other tests
    (:mod:`early`)."""
    build = early.result("book")
    assert build.returncode == 0, build.output[-8000:]
    return build


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--early", choices=("yes", "no"), default="yes",
                     help="start the slow set-ups (the book, the graded classes) when collection ends and "
                          "run them beside the other tests (yes, the default), or each in its fixture (no)")


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    early.last(session, items)


def pytest_collection_finish(session: pytest.Session) -> None:
    early.start(session)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Each test's span into ``DLPERF_TIMELINE`` where it is set (:func:`early.record`)."""
    start = time.monotonic()
    yield
    early.record(item.nodeid, start, time.monotonic())


def pytest_sessionfinish(session: pytest.Session) -> None:
    early.wait_all()


# tests/submissions/ holds wrong-submission fixtures (solution-cell code, not test modules):
# they are graded through nbgrader by test_exercises.py, never imported by pytest.
collect_ignore_glob = ["submissions/*"]


@pytest.fixture(scope="session")
def bubblewrap() -> None:
    """Skip a test that grades through the class autograder where this machine has no sandbox."""
    from autograder.sandbox import SandboxUnavailable, check_available

    try:
        check_available()
    except SandboxUnavailable as exc:
        pytest.skip(f"no sandbox on this machine: {exc}")
