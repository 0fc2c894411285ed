"""The checker's side of the ``pipeline_schedule`` exercise: its own executor of pipeline schedules, and the verdicts.

The student's ``gpipe(p, m)`` and ``one_f_one_b(p, m)`` run in a host
(:class:`~autograder.trusted.Student`) and return plain data: per stage, the
ordered list of its operations ``("F", i)`` / ``("B", i)``.  Everything a
verdict compares against is computed here from ``(p, m)`` alone, never by the
student's code nor by the chapter's library (``dlperf.parallel``): a check must
not depend on what it checks.

* :func:`well_formed` -- types and values of what came back (a list of ``p``
  lists of ``(kind, micro-batch)`` pairs, kinds ``"F"``/``"B"``, indices ints in
  ``range(m)``);
* :func:`complete` -- every operation of every micro-batch exactly once on
  every stage;
* :func:`execute` -- the checker's own event-driven execution: each stage runs
  its list in order, one operation at a time, each as soon as the stage is free
  and its dependencies are done (``F(s, i)`` after ``F(s-1, i)``; ``B(s, i)``
  after ``B(s+1, i)`` and after ``F(s, i)``); a forward takes ``forward`` time
  units, a backward ``backward``, messages take no time.  An order that cannot
  be executed is a deadlock (:class:`Deadlock`, with the cycle of waits that
  causes it);
* :func:`peak_activations` -- per stage, the most micro-batches whose
  activations are held at once (forwards done minus backwards done);
* :func:`timeline` -- a text drawing of an execution (the self-checks print it);
* :func:`findings` -- the grader's reading of the solution cell's source: the shared allow-list
  (:func:`dlperf.grading.reading.read`) with the exercise's public rules
  (:data:`dlperf.grading.probes.pipeline_schedule.RULES`: a few standard modules, the builtins a loop
  needs, container methods); the self-check cells apply the same rules.  A refused cell gets no points
  for its function.
* :data:`FORBID` -- the ready-made schedules of the chapter's library (``dlperf.parallel.pipeline``)
  and of ``torch.distributed.pipelining``: every hidden cell's host switches them off and hides their
  source files (:class:`~autograder.trusted.Student`'s ``forbid``), so a spelling the reading missed
  still finds nothing to call.

With the same times on every stage the optimal makespan of both schedules is
``(m + p - 1)(f + b)``: every stage is busy ``m(f + b)`` and idle
``(p - 1)(f + b)``, an idle fraction of ``(p - 1)/(m + p - 1)``.  1F1B bounds
stage ``s``'s activations by ``min(p - s, m)``; GPipe holds ``m``.

The hidden cells hold the cases; :func:`cases` adds random ones drawn from
:func:`autograder.trusted.seed` (new for every submission under the class
autograder).
"""

from __future__ import annotations

import heapq
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from autograder.trusted import CheckFailed, Student, seed
from dlperf.grading.probes.pipeline_schedule import RULES
from dlperf.grading.reading import read
from dlperf.grading.wire import Opaque

__all__ = ["FORBID", "RULES", "Deadlock", "Run", "cases", "check_bubble", "check_gpipe", "check_memory", "check_valid",
           "complete", "execute", "findings", "makespan", "peak_activations", "timeline", "times", "well_formed"]

# The ready-made schedules a cell could otherwise return: the chapter's library (``dlperf.parallel.pipeline`` and
# ``dlperf.parallel.schedules``, where they are defined: both schedules, interleaved 1F1B, which is 1F1B with one
# chunk, the tables of them, and every function that builds one from a name) and PyTorch's
# ``torch.distributed.pipelining`` (every schedule class, through their common base, and the functions that compute
# a schedule's order).  The host switches them off and hides their source files (:class:`Student`'s ``forbid``).
_TORCH = "torch.distributed.pipelining."
FORBID = [*(f"dlperf.parallel.pipeline.{name}" for name in (
              "gpipe", "one_f_one_b", "SCHEDULES", "simulate", "stage_worker", "torch_worker", "chapter_worker",
              "timeline_worker", "modern_worker")),
          # where the schedules are defined (the names above are re-exported from there)
          *(f"dlperf.parallel.schedules.{name}" for name in (
              "gpipe", "one_f_one_b", "interleaved_1f1b", "zb_h1", "SCHEDULES", "ALL_SCHEDULES")),
          *(f"{_TORCH}schedules.{name}" for name in (
              "_PipelineSchedule", "get_schedule_class", "_get_1f1b_rank_ops", "_get_warmup_ops", "_add_send_recv",
              "_simulate_comms_compute", "_format_pipeline_order", "_validate_schedule", "_merge_bw",
              "_add_unshard_reshard", "_add_reduce_grad", "_defer_recv_ops")),
          *(f"{_TORCH}_schedule_visualizer.{name}" for name in (
              "get_schedule_ops", "add_schedule_op_spacing", "visualize_schedule"))]
KINDS = ("F", "B")
TIMES = [(1, 2), (1, 1)]          # (forward, backward) time units every schedule is executed with
Op = tuple[str, int]


class Deadlock(CheckFailed):
    """The schedule cannot be executed: every unfinished stage waits for an operation that never comes."""


def show(op: Any) -> str:
    """``("B", 3)`` as the student wrote it."""
    if type(op) in (tuple, list) and len(op) == 2 and type(op[0]) is str and type(op[1]) is int:
        return f'("{op[0]}", {op[1]})'
    text = repr(op)
    return text if len(text) <= 40 else text[:37] + "..."


def makespan(p: int, m: int, forward: int, backward: int) -> int:
    """The optimal makespan of GPipe and of 1F1B with the same times on every stage: ``(m + p - 1)(f + b)``."""
    return (m + p - 1) * (forward + backward)


def _typename(value: Any) -> str:
    """``of type str``; an object the wire does not carry (a namedtuple, a numpy integer) by its own type's name."""
    return f"of type {value.type if isinstance(value, Opaque) else type(value).__name__}"


# ---------------------------------------------------------------------------------------------
# What came back
# ---------------------------------------------------------------------------------------------


def well_formed(schedule: Any, p: int, m: int, case: str) -> list[list[Op]]:
    """The schedule as ``p`` lists of ``(kind, i)`` tuples, or :class:`CheckFailed` saying what is wrong with it.

    Types are exact (a namedtuple is not a tuple, a numpy integer or a bool not an int), so that the self-checks,
    which see the student's objects, agree with the hidden checks, which see what crossed the wire."""
    if type(schedule) not in (list, tuple):
        raise CheckFailed(f"{case}: returned {show(schedule)} ({_typename(schedule)}), expected a list of p = {p} "
                          "lists, one per stage")
    if len(schedule) != p:
        raise CheckFailed(f"{case}: returned {len(schedule)} stage lists, expected one per stage: p = {p}")
    stages: list[list[Op]] = []
    for s, ops in enumerate(schedule):
        if type(ops) not in (list, tuple):
            raise CheckFailed(f"{case}: stage {s}'s operations are {show(ops)} ({_typename(ops)}), expected a list "
                              'of (kind, micro-batch) pairs such as ("F", 0)')
        row: list[Op] = []
        for k, op in enumerate(ops):
            where = f"{case}: stage {s}, operation {k} of its list"
            if type(op) not in (list, tuple) or len(op) != 2:
                raise CheckFailed(f"{where} is {show(op)} ({_typename(op)}), expected a pair (kind, micro-batch) "
                                  'such as ("F", 0) or ("B", 2): a plain tuple or list')
            kind, i = op
            if type(kind) is not str or kind not in KINDS:
                raise CheckFailed(f'{where}: the kind is {show(kind)} ({_typename(kind)}), expected the string "F" '
                                  '(forward) or "B" (backward)')
            if type(i) is not int:
                raise CheckFailed(f"{where}: the micro-batch is {show(i)} ({_typename(i)}), expected a Python int")
            if not 0 <= i < m:
                raise CheckFailed(f"{where}: micro-batch {i} does not exist: with m = {m} the micro-batches are "
                                  f"0 to {m - 1}")
            row.append((kind, i))
        stages.append(row)
    return stages


def complete(stages: list[list[Op]], p: int, m: int, case: str) -> None:
    """Every ``("F", i)`` and ``("B", i)``, ``i < m``, exactly once on every stage."""
    for s, ops in enumerate(stages):
        counts = Counter(ops)
        missing = [(k, i) for k in KINDS for i in range(m) if counts[(k, i)] == 0]
        twice = [op for op, c in counts.items() if c > 1]
        if missing or twice:
            parts = []
            if missing:
                parts.append("missing " + ", ".join(map(show, missing[:6])) + (" ..." if len(missing) > 6 else ""))
            if twice:
                parts.append("more than once " + ", ".join(f"{show(op)} ({counts[op]} times)" for op in twice[:6]))
            raise CheckFailed(f"{case}: stage {s} has {len(ops)} operations, expected 2m = {2 * m}: every micro-batch's "
                              f"forward and backward exactly once; {'; '.join(parts)}")


# ---------------------------------------------------------------------------------------------
# The checker's own executor
# ---------------------------------------------------------------------------------------------


def _needs(kind: str, s: int, i: int, p: int) -> list[tuple[str, int, int]]:
    """What ``(kind, i)`` on stage ``s`` waits for: ``(kind, stage, i)``."""
    if kind == "F":
        return [("F", s - 1, i)] if s > 0 else []
    return [("F", s, i)] + ([("B", s + 1, i)] if s < p - 1 else [])


@dataclass
class Run:
    """An execution: when each operation ran, per stage, and what it adds up to."""

    p: int
    m: int
    forward: int
    backward: int
    spans: list[list[tuple[int, int, str, int]]] = field(default_factory=list)  # per stage: (start, end, kind, i)
    makespan: int = 0

    @property
    def busy(self) -> list[int]:
        return [sum(e - b for b, e, _, _ in row) for row in self.spans]

    @property
    def idle_fraction(self) -> Fraction:
        """Idle stage-time over all stage-time, up to the makespan."""
        total = self.p * self.makespan
        return Fraction(total - sum(self.busy), total) if total else Fraction(0)


def execute(stages: list[list[Op]], forward: int = 1, backward: int = 2) -> Run:
    """Run a complete, well-formed schedule, event by event; :class:`Deadlock` when it cannot go on."""
    p = len(stages)
    m = max((len(ops) for ops in stages), default=0) // 2
    run = Run(p, m, forward, backward, [[] for _ in range(p)])
    done: set[tuple[str, int, int]] = set()
    position = [0] * p                 # the next operation of each stage
    running: list[tuple[str, int] | None] = [None] * p
    events: list[tuple[int, int]] = []  # (time the running op of a stage ends, stage)
    now = 0
    while True:
        for s in range(p):               # every idle stage starts its next operation if it can
            if running[s] is None and position[s] < len(stages[s]):
                kind, i = stages[s][position[s]]
                if all(need in done for need in _needs(kind, s, i, p)):
                    end = now + (forward if kind == "F" else backward)
                    running[s] = (kind, i)
                    run.spans[s].append((now, end, kind, i))
                    heapq.heappush(events, (end, s))
        if not events:
            break
        now = heapq.heappop(events)[0]
        ended = [s for s in range(p) if running[s] is not None and run.spans[s][-1][1] == now]
        for s in ended:
            kind, i = running[s]  # type: ignore[misc]
            done.add((kind, s, i))
            running[s] = None
            position[s] += 1
        while events and events[0][0] == now:
            heapq.heappop(events)
    stuck = [s for s in range(p) if position[s] < len(stages[s])]
    if stuck:
        raise Deadlock(_deadlock_story(stages, position, done, stuck[0]))
    run.makespan = now
    return run


def _deadlock_story(stages: list[list[Op]], position: list[int], done: set[tuple[str, int, int]], first: int) -> str:
    """The cycle of waits that blocks the stages, starting from stage ``first``."""
    p = len(stages)
    lines, seen, s = [], [], first
    while s not in seen:
        seen.append(s)
        kind, i = stages[s][position[s]]
        need = next(n for n in _needs(kind, s, i, p) if n not in done)
        nkind, t, ni = need
        here = f"stage {s} is stuck at {show((kind, i))} (operation {position[s]} of its list)"
        if t == s:
            lines.append(f"{here}, which needs its own {show((nkind, ni))} first, but stage {s} lists "
                         f"{show((nkind, ni))} later: a backward cannot run before the forward of its micro-batch")
            break
        lines.append(f"{here}, which needs {show((nkind, ni))} of stage {t} first")
        if t in seen:
            lines[-1] += (f", but stage {t} lists {show((nkind, ni))} after {show(stages[t][position[t]])}, "
                          "where it is stuck")
        s = t
    return ("deadlock: the schedule cannot be executed (each stage runs its list in order, one operation at a time): "
            + "; ".join(lines) + ". No stage can go on")


def peak_activations(stages: list[list[Op]]) -> list[int]:
    """Per stage, the most micro-batches held at once: forwards done minus backwards done, at its worst."""
    peaks = []
    for ops in stages:
        held = peak = 0
        for kind, _ in ops:
            held += 1 if kind == "F" else -1
            peak = max(peak, held)
        peaks.append(peak)
    return peaks


def timeline(run: Run, width: int = 0) -> str:
    """A text drawing of ``run``: one row per stage, ``width`` characters per time unit (0: enough for the numbers).

    ``F3`` is micro-batch 3's forward; ``B3--`` its backward (``-`` where it goes on); ``.`` an idle unit."""
    width = width or max(2, len(str(max(run.m - 1, 0))) + 1)
    lines = []
    for s, row in enumerate(run.spans):
        cells = ["." * width] * run.makespan
        for start, end, kind, i in row:
            label = f"{kind}{i}"
            for t in range(start, end):
                cells[t] = (label if t == start else "-" * len(label)).ljust(width, "-" if t + 1 < end else " ")
        lines.append(f"stage {s}  " + "".join(cells).rstrip())
    ruler = "".join(str(t).ljust(width * 5) for t in range(0, run.makespan, 5))
    return "\n".join([f"time     {ruler.rstrip()}", *lines])


# ---------------------------------------------------------------------------------------------
# The verdicts of the hidden cells
# ---------------------------------------------------------------------------------------------


def findings(parts: Sequence[tuple[str, str]]) -> list[str]:
    """The grader's reading of the solution cells (``[(file name, source)]``, parsed, never run): what they use that
    :data:`RULES` do not allow, each finding a sentence naming the cell, the line and the rule (``[]``: nothing)."""
    return read(parts, RULES)


def _refuse_shortcuts(parts: Sequence[tuple[str, str]], function: str, gate: str = "") -> None:
    found = findings(parts)
    if found:
        raise CheckFailed(f"{gate}the grader's reading of the cell that defines {function} refuses (the self-check's "
                          "reading row shows the same):\n" + "\n".join(found))


def cases(fixed: list[tuple[int, int]], name: str, n_random: int = 4, max_p: int = 8,
          max_m: int = 32) -> list[tuple[int, int]]:
    """``fixed`` and ``n_random`` more ``(p, m)``, drawn from the submission's seed."""
    rng = random.Random(seed("pipeline_schedule", name))
    drawn = [(rng.randint(2, max_p), rng.randint(1, max_m)) for _ in range(n_random)]
    return list(fixed) + drawn


def times(name: str) -> list[tuple[int, int]]:
    """The (forward, backward) time units to execute with: :data:`TIMES` and one pair drawn from the seed."""
    rng = random.Random(seed("pipeline_schedule", "times", name))
    return [*TIMES, (rng.randint(1, 3), rng.randint(1, 4))]


def _case(p: int, m: int, function: str) -> str:
    return f"{function}(p={p}, m={m})"


def _schedule(student: Student, function: str, p: int, m: int) -> list[list[Op]]:
    """The student's schedule, well formed and complete."""
    case = _case(p, m, function)
    stages = well_formed(student.call(function, p, m), p, m, case)
    complete(stages, p, m, case)
    return stages


def _executed(stages: list[list[Op]], case: str, forward: int, backward: int, gate: str = "") -> Run:
    try:
        return execute(stages, forward, backward)
    except Deadlock as exc:
        raise Deadlock(f"{gate}{case}: {exc}") from None


def _on_time(run: Run, case: str, gate: str, hint: str) -> None:
    p, m, f, b = run.p, run.m, run.forward, run.backward
    want = makespan(p, m, f, b)
    if run.makespan != want:
        idle, ideal = run.idle_fraction, Fraction(p - 1, m + p - 1)
        raise CheckFailed(f"{gate}{case}, forward {f} and backward {b} time units: your schedule takes {run.makespan} "
                          f"units, the pipeline needs only (m+p-1)(f+b) = {want}: an idle fraction of {float(idle):.3f} "
                          f"instead of (p-1)/(m+p-1) = {ideal.numerator}/{ideal.denominator} = {float(ideal):.3f}"
                          + (f" ({hint})" if hint else ""))


def check_gpipe(student: Student, source: Sequence[tuple[str, str]], pm: list[tuple[int, int]],
                timing: list[tuple[int, int]] = TIMES) -> None:
    """GPipe: on every stage the m forwards in order 0..m-1, then the m backwards, in the order 0..m-1
    (PyTorch's ``ScheduleGPipe``) or m-1..0 (the GPipe paper's figure); it runs in ``(m + p - 1)(f + b)``.
    ``source``: the solution cell (:func:`autograder.trusted.solution_parts`)."""
    _refuse_shortcuts(source, "gpipe")
    for p, m in pm:
        case = _case(p, m, "gpipe")
        stages = _schedule(student, "gpipe", p, m)
        forwards = [("F", i) for i in range(m)]
        backwards = ([("B", i) for i in range(m)], [("B", i) for i in reversed(range(m))])
        for s, ops in enumerate(stages):
            ops = list(ops)
            for k, op in enumerate(ops[:m]):
                if op != forwards[k]:
                    raise CheckFailed(f"{case}: stage {s}'s operation {k} is {show(op)}, expected {show(forwards[k])}: "
                                      "GPipe runs all m forwards first, in the order 0, 1, ..., m-1")
            if ops[m:] not in backwards:
                raise CheckFailed(f"{case}: stage {s}'s backwards run in the order "
                                  f"{' '.join(show(op) for op in ops[m:])}: after its m forwards, GPipe runs the m "
                                  "backwards in the order 0, 1, ..., m-1 or in the order m-1, ..., 0")
        for f, b in timing:
            _on_time(_executed(stages, case, f, b), case, "",
                     "do all stages run their backwards in the same order?")


def check_valid(student: Student, source: Sequence[tuple[str, str]], pm: list[tuple[int, int]]) -> None:
    """1F1B: well formed, complete, and executable (no deadlock)."""
    _refuse_shortcuts(source, "one_f_one_b")
    for p, m in pm:
        case = _case(p, m, "one_f_one_b")
        _executed(_schedule(student, "one_f_one_b", p, m), case, *TIMES[0])


def check_bubble(student: Student, source: Sequence[tuple[str, str]], pm: list[tuple[int, int]],
                 timing: list[tuple[int, int]] = TIMES) -> None:
    """1F1B runs in ``(m + p - 1)(f + b)`` for each (f, b) of ``timing`` (graded on valid schedules)."""
    gate = "(the makespan is graded on valid schedules only) "
    _refuse_shortcuts(source, "one_f_one_b", gate)
    for p, m in pm:
        case = _case(p, m, "one_f_one_b")
        stages = _gated(student, p, m, gate)
        for f, b in timing:
            _on_time(_executed(stages, case, f, b, gate), case, "",
                     "a stage idles while it could work: does each stage start with min(p - s - 1, m) forwards, then "
                     "alternate one forward and one backward, and end with the remaining backwards?")


def _gated(student: Student, p: int, m: int, gate: str) -> list[list[Op]]:
    try:
        return _schedule(student, "one_f_one_b", p, m)
    except Deadlock as exc:
        raise Deadlock(f"{gate}{exc}") from None
    except CheckFailed as exc:
        if type(exc) is not CheckFailed:  # the student's own exception, or a crash: as it is
            raise
        raise CheckFailed(f"{gate}{exc}") from None


def check_memory(student: Student, source: Sequence[tuple[str, str]], pm: list[tuple[int, int]],
                 timing: list[tuple[int, int]] = TIMES) -> None:
    """1F1B's activations: stage s holds at most ``min(p - s, m)`` micro-batches at once (graded on valid schedules
    with the optimal makespan)."""
    gate = "(memory is graded on valid schedules with the pipeline's makespan only) "
    _refuse_shortcuts(source, "one_f_one_b", gate)
    for p, m in pm:
        case = _case(p, m, "one_f_one_b")
        stages = _gated(student, p, m, gate)
        for f, b in timing:
            _on_time(_executed(stages, case, f, b, gate), case, gate, "")
        for s, peak in enumerate(peak_activations(stages)):
            bound = min(p - s, m)
            if peak > bound:
                first_b = next(k for k, (kind, _) in enumerate(stages[s]) if kind == "B")
                how = f"it runs {first_b} forwards before its first backward; " if first_b == peak else ""
                raise CheckFailed(f"{case}: stage {s} holds the activations of up to {peak} micro-batches at once "
                                  f"(forwards done minus backwards done), at most min(p - s, m) = {bound} allowed: "
                                  f"{how}1F1B runs min(p - s - 1, m) = {min(p - s - 1, m)} warm-up forwards, then "
                                  "alternates one forward and one backward")
