"""Slow, self-contained work started as soon as the tests are collected, and shared by the tests' thread
and one or two background lanes.

Most of the suite's time is a few kinds of slow, self-contained work: the book's build, the sample
class and every exercise's fixtures graded by the class autograder, each exercise's notebooks executed
and graded by plain nbgrader, nbgrader's own fixtures graded both ways.  Each is an *early job*: a
function of the session, registered with :func:`early` under a name, with the tests that need it
(by default those that use the fixture of that name).  When collection ends (:func:`start`, called by
``conftest.py``), the jobs that a selected test needs start in a background thread, one after
another by ``order`` (the longest first); the tests that need them are moved to the end of the run
(:func:`last`), so that every other test runs meanwhile in the tests' thread; the jobs that mostly wait
(``light``) get a second background lane when the first reaches them.  A test then asks for
its job's result (:func:`result`).  Where that job has not started, the tests' thread runs it; where
it is running, the tests' thread runs the next job nobody has taken while it waits.  So once the
other tests are done, both threads work through the jobs that are left, and both cores stay busy to
the end of the run.  A job that raised raises again in every test that needs it.  A selection
without those tests starts nothing.

The jobs are the same work the tests did before, with the same assertions after them; only when and
on which thread it runs changed.  ``--early=no`` runs each job inside the test that asks for it
instead (to time a job alone, or to debug one).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

Job = Callable[[pytest.Session], Any]

JOBS: dict[str, Job] = {}
ORDER: dict[str, float] = {}
NEEDED: dict[str, Callable[[pytest.Item], bool]] = {}
LIGHT: set[str] = set()
_futures: dict[str, Future] = {}
_order: list[str] = []          # the started jobs, in the order the background lane takes them
_session: list[pytest.Session] = []
_taken: set[str] = set()
_taking = threading.Lock()
_writing = threading.Lock()
_cleanups: list[Callable[[], Any]] = []


def early(name: str, order: float = 0, needed: Callable[[pytest.Item], bool] | None = None, light: bool = False
          ) -> Callable[[Job], Job]:
    """Register ``fn(session)`` as the early job ``name``; jobs start by ``order``.  ``needed(item)`` says
    which tests need it; by default the tests that use the fixture ``name``.  ``light``: a job that spends
    much of its time waiting (process starts, kernels handing cells back and forth): when the background
    lane reaches the first light job, a second lane starts beside it, so that three threads share the
    light jobs that are left."""
    def register(fn: Job) -> Job:
        JOBS[name] = fn
        ORDER[name] = order
        if needed is not None:
            NEEDED[name] = needed
        if light:
            LIGHT.add(name)
        return fn
    return register


def needs(item: pytest.Item, name: str) -> bool:
    """Whether the test ``item`` needs the early job ``name``."""
    if name in NEEDED:
        return bool(NEEDED[name](item))
    return name in getattr(item, "fixturenames", ())


def param(item: pytest.Item, key: str) -> Any:
    """The value of the parameter ``key`` of a parametrized test (None for any other item)."""
    callspec = getattr(item, "callspec", None)
    return callspec.params.get(key) if callspec is not None else None


def tmp(session: pytest.Session, name: str) -> Path:
    """A fresh folder for a job, under the session's ``tmp_path_factory`` (kept as pytest keeps its own)."""
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is not None:
        return factory.mktemp(name)
    import tempfile

    return Path(tempfile.mkdtemp(prefix=f"dlperf-{name}-"))


def _wanted(session: pytest.Session) -> list[str]:
    return sorted((name for name in JOBS if any(needs(item, name) for item in session.items)),
                  key=lambda name: ORDER[name])


def enabled(config: pytest.Config) -> bool:
    return config.getoption("early", "yes") != "no"


def last(session: pytest.Session, items: list[pytest.Item]) -> None:
    """Move the tests that need an early job to the end, keeping every other order as it was."""
    if not enabled(session.config):
        return
    late = [any(needs(item, name) for name in JOBS) for item in items]
    items[:] = [i for i, n in zip(items, late) if not n] + [i for i, n in zip(items, late) if n]


def start(session: pytest.Session) -> None:
    """Start the early jobs the selected tests need, one after another in a background thread."""
    _session[:] = [session]
    if not enabled(session.config) or session.config.option.collectonly:
        return
    names = _wanted(session)
    if not names:
        return
    _order[:] = names
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is not None:
        # pytest makes its base folder on first use and is not thread-safe there: a job's first
        # ``mktemp`` racing a test's first ``tmp_path`` made two base folders, and pytest refused
        # the job's path as outside the base it then held. Make it here, before any thread runs.
        factory.getbasetemp()
    for name in names:
        _futures[name] = Future()

    second: list[threading.Thread] = []

    def lane() -> None:
        while (name := _take_next()) is not None:
            if name in LIGHT and not second:      # (the second lane finds ``second`` filled)
                second.append(threading.Thread(target=lane, name="early-jobs-2", daemon=True))
                second[0].start()
            _run(name)

    threading.Thread(target=lane, name="early-jobs", daemon=True).start()


def _take(name: str) -> bool:
    """Take job ``name`` for this thread; False if a thread has taken it already."""
    with _taking:
        if name in _taken:
            return False
        _taken.add(name)
        return True


def _take_next() -> str | None:
    """Take the first job of the lane's order that no thread has taken; None when none is left."""
    with _taking:
        for name in _order:
            if name not in _taken:
                _taken.add(name)
                return name
    return None


def _run(name: str) -> None:
    """Run the taken job ``name`` here; its result or exception goes to its future."""
    future = _futures[name]
    future.set_running_or_notify_cancel()
    t = time.monotonic()
    try:
        value = JOBS[name](_session[0])
    except BaseException as exc:  # noqa: BLE001 - raised again in every test that needs it
        future.set_exception(exc)
        if isinstance(exc, KeyboardInterrupt) and threading.current_thread() is threading.main_thread():
            raise
    else:
        future.set_result(value)
    print(f"\n[early] {name}: {time.monotonic() - t:.0f} s ({threading.current_thread().name})", flush=True)
    record(f"early:{name}", t, time.monotonic())


def record(what: str, start: float, end: float) -> None:
    """With ``DLPERF_TIMELINE=<file>``: append one JSON line (what, thread, start and end in seconds of
    ``time.monotonic()``) -- each early job's and each test's span, to see how a run used its cores."""
    path = os.environ.get("DLPERF_TIMELINE")
    if path:
        line = json.dumps({"what": what, "thread": threading.current_thread().name, "start": start, "end": end})
        with _writing, open(path, "a") as f:
            f.write(line + "\n")


def result(name: str, timeout: float = 7200) -> Any:
    """The early job's result.  Without a started job (``--early=no``, or a job no selected test was
    seen to need), the job runs here and now.  Otherwise this thread runs it if nobody has taken it,
    and while another thread runs it, runs the jobs nobody has taken yet, then waits."""
    future = _futures.get(name)
    if future is None:
        return JOBS[name](_session[0])
    while not future.done():
        if _take(name):
            _run(name)
            continue
        other = _take_next()
        if other is None:
            break
        _run(other)
    return future.result(timeout=timeout)


def at_end(cleanup: Callable[[], Any]) -> None:
    """Call ``cleanup()`` once every started job has ended (:func:`wait_all`): what jobs share, closed."""
    _cleanups.append(cleanup)


def wait_all(timeout: float = 7200) -> None:
    """Wait for every started job (the session's end: nothing of theirs may outlive it), then clean up."""
    for future in _futures.values():
        try:
            future.result(timeout=timeout)
        except BaseException:  # noqa: BLE001, S110 - reported by the tests that need it
            pass
    while _cleanups:
        _cleanups.pop()()
