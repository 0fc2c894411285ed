"""Slow set-ups started as soon as the tests are collected, and run beside the other tests.

Three set-ups are most of the suite's time: the book's build, the sample class graded by the class
autograder, and every exercise's fixtures graded in one run.  Run one after another with the rest,
they left the two cores partly idle; run beside it, they keep both busy.  Each is an
*early job*: a function of the session, registered with :func:`early` under the name of the fixture
that returns its result.  When collection ends (:func:`start`, called by ``conftest.py``), the jobs
that a selected test needs start in one background thread, one after another (the longest first);
the tests that need them are moved to the end of the run (:func:`last`), so that every other test
runs meanwhile; the fixture then waits for its job (:func:`result`), or runs it itself where the lane has
not reached it yet.  A job that raised raises
again in every test that needs it.  A selection without those tests starts nothing.

The jobs are the same work the fixtures did before, with the same assertions after them; only when
it starts changed.  ``--early=no`` runs each job inside its fixture instead, as before (to time a job
alone, or to debug one).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest

JOBS: dict[str, Callable[[pytest.Session], Any]] = {}
ORDER: dict[str, int] = {}
_futures: dict[str, Future] = {}
_session: list[pytest.Session] = []
_taken: set[str] = set()
_taking = threading.Lock()


def early(name: str, order: int = 0) -> Callable[[Callable[[pytest.Session], Any]], Callable[[pytest.Session], Any]]:
    """Register ``fn(session)`` as the early job behind the fixture ``name``; jobs run by ``order``."""
    def register(fn: Callable[[pytest.Session], Any]) -> Callable[[pytest.Session], Any]:
        JOBS[name] = fn
        ORDER[name] = order
        return fn
    return register


def _wanted(session: pytest.Session) -> list[str]:
    used = {name for item in session.items for name in getattr(item, "fixturenames", ())}
    return sorted((name for name in JOBS if name in used), key=lambda name: ORDER[name])


def enabled(config: pytest.Config) -> bool:
    return config.getoption("early", "yes") != "no"


def last(session: pytest.Session, items: list[pytest.Item]) -> None:
    """Move the tests that need an early job to the end, keeping every other order as it was."""
    if not enabled(session.config):
        return
    needs = [not JOBS.keys().isdisjoint(getattr(item, "fixturenames", ())) for item in items]
    items[:] = [i for i, n in zip(items, needs) if not n] + [i for i, n in zip(items, needs) if n]


def start(session: pytest.Session) -> None:
    """Start the early jobs the selected tests need, one after another in a background thread."""
    _session[:] = [session]
    if not enabled(session.config) or session.config.option.collectonly:
        return
    names = _wanted(session)
    if not names:
        return
    for name in names:
        _futures[name] = Future()

    def lane() -> None:
        for name in names:
            _run(name, session)

    threading.Thread(target=lane, name="early-jobs", daemon=True).start()


def _run(name: str, session: pytest.Session) -> None:
    """Run job ``name`` in this thread unless another thread has taken it."""
    future = _futures[name]
    with _taking:
        if name in _taken:
            return
        _taken.add(name)
    future.set_running_or_notify_cancel()
    t = time.monotonic()
    try:
        value = JOBS[name](session)
    except BaseException as exc:  # noqa: BLE001 - raised again in every test that needs it
        future.set_exception(exc)
    else:
        future.set_result(value)
    print(f"\n[early] {name}: {time.monotonic() - t:.0f} s ({threading.current_thread().name})", flush=True)


def result(name: str, timeout: float = 7200) -> Any:
    """The early job's result (waiting for it); without a started job, the job run here and now.

    A job the background lane has not reached yet is taken and run here, in the tests' thread: once the
    other tests are done, the tests' thread would otherwise wait while the lane runs its jobs one after
    another on one core of two.
    """
    future = _futures.get(name)
    if future is None:
        return JOBS[name](_session[0])
    _run(name, _session[0])
    return future.result(timeout=timeout)


def wait_all(timeout: float = 7200) -> None:
    """Wait for every started job (the session's end: nothing of theirs may outlive it)."""
    for future in _futures.values():
        try:
            future.result(timeout=timeout)
        except BaseException:  # noqa: BLE001, S110 - reported by the tests that need it
            pass
