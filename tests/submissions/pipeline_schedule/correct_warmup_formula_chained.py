# why: a correct alternative: 1F1B from the per-stage warm-up count, written as three chained pieces with itertools and zip (no explicit steady-state index arithmetic), and GPipe with its backwards newest first; every property holds
# expect: {"pipeline_schedule-gpipe-test": 2, "pipeline_schedule-1f1b-test-valid": 3, "pipeline_schedule-1f1b-test-bubble": 2, "pipeline_schedule-1f1b-test-memory": 3}
# %% pipeline_schedule-gpipe
from __future__ import annotations

from typing import List, Tuple


def gpipe(p: int, m: int) -> List[List[Tuple[str, int]]]:
    stage = [("F", i) for i in range(m)]
    stage.extend(("B", i) for i in range(m - 1, -1, -1))
    return [stage.copy() for _ in range(p)]
# %% pipeline_schedule-1f1b
import itertools


def stage_order(p, m, s):
    w = min(p - s - 1, m)
    forwards = [("F", i) for i in range(m)]
    backwards = [("B", i) for i in range(m)]
    steady = itertools.chain.from_iterable(zip(forwards[w:], backwards))
    return forwards[:w] + list(steady) + backwards[m - w:]


def one_f_one_b(p, m):
    return [stage_order(p, m, s) for s in range(p)]
