"""Several ranks of the student's code in a process group that the checker routes, counts and times.

::

    with Ranks(ring_allreduce_p2p, n=4) as ranks:
        data = [ranks[r].share(x[r]) for r in range(4)]             # memory the checker owns
        ranks.call("ring_allreduce_p2p", [(d,) for d in data])       # all ranks at once
        ranks.traffic[r]["bytes_sent"], ranks.seconds                  # counted and timed here

Each rank is a :class:`~autograder.trusted.student.Student` host with a relay
socket; they join one process group (:mod:`dlperf.grading.relay`) whose
messages all pass through this process's :class:`~autograder.trusted.relay.Relay`.
The time of a call is taken here, from the first request to the last answer.
A deadlock ends the call at once with what each rank waits for.
``collectives=True`` offers the relayed collectives (broadcast, all_reduce,
all_gather, reduce_scatter, barrier: computed and counted by the relay; their
counters are in :attr:`traffic`, :attr:`collective_log` lists each one of
the last call in order, and :attr:`timeline` each rank's posts, waits and
probe marks in its own order); by default the group has point-to-point operations
only, and the relay refuses a collective whatever the rank's process does.
:meth:`freeze` stops every process of the ranks (``SIGSTOP``) while something
else is timed, so that code left running in the background cannot slow a
reference run down.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Sequence
from typing import Any

from .relay import Relay
from .student import CheckFailed, Student, StudentRaised

__all__ = ["Ranks"]


class Ranks:
    """``n`` hosts running ``solution`` as ranks 0..n-1 of one relayed process group."""

    def __init__(self, *solution: Any, n: int, parts: Sequence[tuple[str, str]] | None = None,
                 forbid: Sequence[str] = (), timeout: float = 60.0, collectives: bool = False):
        if n < 1:
            raise ValueError("n >= 1 ranks")
        self.n = n
        self.timeout = timeout
        self.collectives = collectives
        self.collective_log: list[dict[str, Any]] = []
        self.timeline: list[list[tuple[Any, ...]]] = []
        self.students = [Student(*solution, parts=parts, forbid=forbid, relay=True, timeout=timeout)
                         for _ in range(n)]
        self.relay: Relay | None = None
        self.traffic: list[dict[str, Any]] = []
        self.seconds = 0.0
        self._stalled: str | None = None

    def __getitem__(self, rank: int) -> Student:
        return self.students[rank]

    def __enter__(self) -> Ranks:
        try:
            for student in self.students:
                student.start()
            socks = [s.process.relay for s in self.students]  # type: ignore[union-attr]
            self.relay = Relay(socks, on_stall=self._stall, collectives=self.collectives)  # type: ignore[arg-type]
            for rank, student in enumerate(self.students):
                student._result(*student._request({"op": "relay", "rank": rank, "world": self.n,
                                                   "collectives": self.collectives},
                                                  _encoder(), 30.0))
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.relay is not None:
            self.relay.close()
        for student in self.students:
            student.close()

    @property
    def isolation(self) -> str:
        return self.students[0].isolation

    def _stall(self, message: str) -> None:
        self._stalled = message
        for student in self.students:
            if student.process is not None:
                student.process.kill()

    def probe(self, probe: str, args: Sequence[Sequence[Any]], *, timeout: float | None = None) -> list[Any]:
        """The public probe ``dlperf.grading.probes.<probe>`` on every rank at once, with ``args[r]`` on rank
        ``r`` (after the student's module); the results by rank, as :meth:`call`."""
        return self.call(probe, args, timeout=timeout, _probe=True)

    def call(self, name: str, args: Sequence[Sequence[Any]], *, timeout: float | None = None,
             _probe: bool = False) -> list[Any]:
        """``name(*args[r])`` on every rank at once; the results by rank.

        :attr:`traffic` (per rank, counted by the relay) and :attr:`seconds`
        (this process's clock) describe this call afterwards, and :attr:`collective_log` its
        collectives.
        """
        if len(args) != self.n:
            raise ValueError(f"one argument tuple per rank ({self.n})")
        assert self.relay is not None
        self.relay.reset()
        self.relay.begin(set(range(self.n)))
        results: list[Any] = [None] * self.n
        errors: list[BaseException | None] = [None] * self.n
        relay = self.relay

        def run(rank: int) -> None:
            try:
                student = self.students[rank]
                run_it = student.probe if _probe else student.call
                results[rank] = run_it(name, *args[rank], _timeout=timeout or self.timeout)
            except BaseException as exc:  # noqa: BLE001 - collected, reported below
                errors[rank] = exc
            finally:
                relay.end(rank)

        threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(self.n)]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.seconds = time.perf_counter() - start
        self.traffic = [t.as_dict() for t in relay.traffic]
        self.collective_log = [dict(c) for c in relay.collectives]
        self.timeline = [list(events) for events in relay.timeline]
        raised = [(r, e) for r, e in enumerate(errors) if isinstance(e, StudentRaised)]
        if self._stalled is not None:
            if raised:  # a rank that raised left the others waiting for it: its exception is the cause
                rank, exc = raised[0]
                raise CheckFailed(f"{self.n} ranks: rank {rank}: {exc}\n(the other ranks then waited for it: "
                                  f"{self._stalled.splitlines()[0]})")
            raise CheckFailed(f"{self.n} ranks: {self._stalled}")
        if relay.problem is not None:
            raise CheckFailed(f"{self.n} ranks: {relay.problem}")
        failed = raised or [(r, e) for r, e in enumerate(errors) if e is not None]
        if failed:
            rank, exc = failed[0]
            pending = relay.pending()
            if "timed out" in str(exc) and pending:
                raise CheckFailed(f"{self.n} ranks: rank {rank}: {exc}\nStill pending:\n  " + "\n  ".join(pending))
            if isinstance(exc, CheckFailed):
                raise CheckFailed(f"{self.n} ranks: rank {rank}: {exc}")
            raise exc  # the checker's own bug: not the student's
        return results

    def freeze(self) -> None:
        """Stop every process of these ranks (``SIGSTOP``) until :meth:`thaw`."""
        for student in self.students:
            if student.process is not None:
                student.process.signal_all(signal.SIGSTOP)

    def thaw(self) -> None:
        for student in self.students:
            if student.process is not None:
                with contextlib.suppress(Exception):
                    student.process.signal_all(signal.SIGCONT)


def _encoder() -> Any:
    from dlperf.grading import wire

    return wire.Encoder()
