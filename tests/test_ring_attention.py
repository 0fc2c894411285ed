"""The ``ring_attention`` checker's own parts: the reference, the traffic formula, the reading's rules, and the
verdicts against the chapter's own ring (``dlperf.parallel.context``) and its two wrong variants.

The exercise's notebook, its stub and its fixtures (wrong submissions and correct alternatives) are graded
through nbgrader and the class autograder (test_exercises.py, test_autograder.py); here the checker is held
against an implementation it was not written from.
"""

from __future__ import annotations

import pytest
import torch

from autograder import course
from autograder.exercises import ring_attention as ex
from autograder.trusted import CheckFailed
from dlperf import attention as A
from dlperf.grading.probes import ring_attention as probe
from dlperf.grading.reading import read
from dlperf.parallel import context as CP


@pytest.mark.parametrize("causal", [False, True])
def test_the_reference_is_the_chapters_attention(causal):
    q, k, v = ex.inputs(3, 2, 5, 6, 11)
    assert q.shape == (2, 15, 6) and q.dtype == torch.float32
    want = A.attention(q, k, v, causal=causal)
    assert torch.allclose(ex.reference(q, k, v, causal).float(), want, atol=1e-6)
    # the rows of a causal reference do not depend on later keys
    if causal:
        k2 = k.clone()
        k2[:, 10:] += 1.0
        assert torch.equal(ex.reference(q, k2, v, True)[:, :10], ex.reference(q, k, v, True)[:, :10])


def test_the_inputs_are_seeded_and_their_maximum_moves_from_block_to_block():
    a, b = ex.inputs(2, 2, 5, 6, 1), ex.inputs(2, 2, 5, 6, 2)
    assert all(torch.equal(x, y) for x, y in zip(a, ex.inputs(2, 2, 5, 6, 1)))
    assert not torch.equal(a[0], b[0])
    q, k, _ = a
    s = q @ k.transpose(-1, -2) / 6 ** 0.5
    first, second = s[..., :5].amax(-1), s[..., 5:].amax(-1)
    assert bool((first > second).any()) and bool((second > first).any())   # a rescale is needed, both ways


@pytest.mark.parametrize("n, heads, chunk, d", [(2, 2, 5, 6), (3, 3, 3, 12), (3, 1, 7, 5)])
def test_the_traffic_is_the_chapters_ring_bytes(n, heads, chunk, d):
    assert ex.expected_traffic(n, heads, chunk, d) == CP.ring_bytes(n * chunk, n, heads, d)
    assert ex.expected_traffic(n, heads, chunk, d) == (n - 1) * 2 * heads * chunk * d * 4


def _solution_parts() -> list[tuple[str, str]]:
    return [(grade_id, course.strip_solution_markers(code)) for grade_id, code in
            course.solution_cells("ring_attention").items()]


def test_the_reading_lets_the_solution_through():
    assert read(_solution_parts(), probe.RULES) == []


@pytest.mark.parametrize("code", [
    "from dlperf.attention import merge\n",
    "import dlperf.parallel.context as CP\n",
    "import torch\n\ndef f(q, k, v):\n    return torch.nn.functional.scaled_dot_product_attention(q, k, v)\n",
    "import torch.nn.functional as F\n",
    "import torch.distributed as dist\n\ndef f(x):\n    return getattr(dist, 'all_gather')\n",
    "import torch\n\ndef f(x):\n    return x.__class__\n",
    "import torch.distributed.tensor\n",
    "import torch\n\nclass Ring:\n    pass\n",
])
def test_the_reading_refuses_what_the_exercise_does_not_need(code):
    assert read([*_solution_parts(), ("extra", code)], probe.RULES)


_LIBRARY_RING = '''
import torch.distributed as dist
from dlperf.parallel import context as CP


def ring_attention(q, k, v, causal):
    n = dist.get_world_size()
    return CP.ring_attention(q, k, v, n * q.shape[-2], scheme="contiguous", causal=causal,
                             variant=VARIANT)["out"]
'''
RUNS = [(3, [(2, 3, 6, False, 1), (2, 3, 6, True, 2)])]


def _verdicts(variant: str) -> dict[str, str]:
    """The verdicts of the chapter's ring (or one of its wrong variants) run as a submission, the reading
    skipped (it would refuse the library): ``passes`` or the first line of the failure."""
    parts = [("library", _LIBRARY_RING.replace("VARIANT", repr(variant)))]
    out = {}
    for run in ex._group(None, parts, *RUNS[0]):
        for what, verdict in (("values", ex._values), ("unchanged", ex._unchanged), ("traffic", ex._traffic)):
            key = f"{'causal' if run['causal'] else 'full'} {what}"
            try:
                verdict(run)
                out[key] = "passes"
            except CheckFailed as exc:
                out[key] = str(exc).splitlines()[0]
    return out


def test_the_chapters_ring_passes_and_its_wrong_variants_fail_where_they_are_wrong():
    right = _verdicts("correct")
    assert set(right.values()) == {"passes"}, right
    offsets = _verdicts("local_offsets")            # masks every block as if it started at position 0
    assert offsets["full values"] == "passes" and offsets["full traffic"] == "passes", offsets
    assert "differs from attention" in offsets["causal values"], offsets
    assert "traffic is graded on correct results only" in offsets["causal traffic"], offsets
    assert offsets["causal unchanged"] == "passes"


def test_a_refused_reading_fails_every_cell_before_any_rank_starts():
    parts = [*_solution_parts(), ("extra", "from dlperf.attention import merge\n")]
    for what in ("full", "causal", "traffic"):
        with pytest.raises(CheckFailed, match="reading of your cells refuses"):
            ex.check(source=parts, runs=RUNS, what=what)
