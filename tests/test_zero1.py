"""The ``zero1`` checker's own parts: the partition rule and its cases, the state bytes, the reading's rules,
and the memory measured outside the ranks' processes.

The exercise's notebook, its stub and its fixtures (wrong submissions and correct alternatives) are
graded through nbgrader and the class autograder (test_exercises.py, test_autograder.py); here the
pieces are checked against values worked out by hand, against an independent formulation, and the
memory measurement against the one attack it exists for (a full optimizer the census cannot see).
"""

from __future__ import annotations

import random
from fractions import Fraction

import pytest
import torch

from autograder.exercises import zero1 as ex
from autograder.trusted import CheckFailed, Ranks
from dlperf.grading.probes import zero1 as probe
from dlperf.grading.reading import read


@pytest.mark.parametrize("sizes, n, want", [
    ([35, 7, 21, 3], 2, [0, 1, 1, 1]), ([35, 7, 21, 3], 3, [0, 1, 1, 2]), ([8, 1], 3, [0, 2]),
    ([21, 7, 14, 2], 3, [0, 1, 1, 2]), ([5], 4, [0]), ([1] * 6, 4, [0, 0, 1, 2, 2, 3]),
    ([5, 5], 6, [0, 3]),                       # 6 * 5 // 10 = 3 (a float share 10 / 6 gives 2)
    ([1, 1], 5, [0, 2]), ([7], 1, [0]),
])
def test_the_partition_rule_by_hand(sizes, n, want):
    assert ex.partition(sizes, n) == want


def _first_element_rule(sizes, n):
    """The spec's other wording: the rank whose share [r T/N, (r+1) T/N) holds the parameter's first element."""
    total, start, owners = sum(sizes), 0, []
    for size in sizes:
        owners.append(next(r for r in range(n) if Fraction(r * total, n) <= start < Fraction((r + 1) * total, n)))
        start += size
    return owners


def test_partition_cases_agree_with_the_share_wording_and_cover_the_edges():
    cases = ex.partition_cases(11)
    assert len(cases) >= ex.PARTITION_CASES
    for sizes, n in cases:
        assert ex.partition(sizes, n) == _first_element_rule(sizes, n), (sizes, n)
    owners = [ex.partition(s, n) for s, n in cases]
    assert any(len(set(o)) < n for o, (_, n) in zip(owners, cases))                 # a rank owns nothing
    assert any(sum(s) % n for s, n in cases) and any(n > len(s) for s, n in cases)
    assert ex.partition_cases(11) == cases and ex.partition_cases(12) != cases      # seeded


@pytest.mark.parametrize("wrong", [
    lambda s, n: [int(a // (sum(s) / n)) for a in _starts(s)],                       # a float share
    lambda s, n: [a // -(-sum(s) // n) for a in _starts(s)],                         # a ceiling share
    lambda s, n: [min(n - 1, a // (sum(s) // n or 1)) for a in _starts(s)],           # a floor share
    lambda s, n: [n * (a + z // 2) // sum(s) for a, z in zip(_starts(s), s)],        # the middle element
    lambda s, n: [i * n // len(s) for i in range(len(s))],                           # by count
])
def test_the_direct_cases_refuse_wrong_rules_that_the_examples_let_through(wrong):
    assert any(wrong(s, n) != ex.partition(s, n) for s, n in ex.partition_cases(random.randrange(10**6)))


def _starts(sizes):
    out, start = [], 0
    for size in sizes:
        out.append(start)
        start += size
    return out


@pytest.mark.parametrize("optimizer, kwargs", [("sgd", {"lr": 0.1, "momentum": 0.9}), ("adam", {"lr": 0.01}),
                                               ("sgd", {"lr": 0.1})])
def test_expected_state_bytes_are_what_torch_optim_keeps(optimizer, kwargs):
    dims = [5, 7, 3]
    for owned in ([], [0], [1, 2, 3], [0, 1, 2, 3]):
        params = [p for i, p in enumerate(probe.build(dims, 0).parameters()) if i in owned]
        want = 0
        if params:
            opt = probe.OPTIMIZERS[optimizer](params, **kwargs)
            for p in params:
                p.grad = torch.ones_like(p)
            opt.step()
            want = probe.state_bytes(opt)
        assert ex.expected_state_bytes(dims, owned, optimizer, kwargs) == want
    assert ex.sizes_of(dims) == [p.numel() for p in probe.build(dims, 0).parameters()]


REFERENCE = '''
import torch
import torch.distributed as dist


def partition(sizes, world_size):
    total, start, owners = sum(sizes), 0, []
    for size in sizes:
        owners.append(world_size * start // total)
        start += size
    return owners


class ShardedOptimizer:
    def __init__(self, params, optimizer_class, **kwargs):
        self.params = list(params)
        self.owners = partition([p.numel() for p in self.params], dist.get_world_size())
        mine = [p for p, o in zip(self.params, self.owners) if o == dist.get_rank()]
        self.optimizer = optimizer_class(mine, **kwargs) if mine else None

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    def step(self):
        if self.optimizer is not None:
            self.optimizer.step()
        with torch.no_grad():
            for p, owner in zip(self.params, self.owners):
                dist.broadcast(p, src=owner)
'''

# The census-proof full optimizer, with allowed constructs only: rebuilt from a state_dict every step and
# dropped, the inner optimizer's .state filled with the owned entries (the fixture state_dict_full_optimizer).
ATTACK = REFERENCE.replace('''        self.optimizer = optimizer_class(mine, **kwargs) if mine else None
''', '''        self.optimizer = optimizer_class(mine, **kwargs) if mine else None
        self.mine = mine
        self.make = lambda: optimizer_class(self.params, **kwargs)
        self.saved = None
''').replace('''        if self.optimizer is not None:
            self.optimizer.step()
''', '''        full = self.make()
        if self.saved is not None:
            full.load_state_dict(self.saved)
        full.step()
        self.saved = full.state_dict()
        if self.optimizer is not None:
            for p in self.mine:
                self.optimizer.state[p] = full.state[p]
        full = None
''')


def test_the_reading_allows_the_reference_and_the_attack_but_refuses_the_old_hiding_places():
    assert read([("cell", REFERENCE)], probe.RULES) == []
    assert read([("cell", ATTACK)], probe.RULES) == []          # allowed constructs only: memory must see it
    refused = {
        "import gc": "gc", "from torch.distributed.optim import ZeroRedundancyOptimizer": "torch.distributed.optim",
        "x = getattr(torch, 'optim')": "getattr", "torch.optim.SGD([])._hidden = 1": "private attribute",
        "import operator\nf = operator.attrgetter('optim.SGD')": "operator.attrgetter",
        "dist.isend(torch.zeros(1), 1)": "point-to-point", "torch.save({}, 'state.pt')": "torch.save",
        "y = torch.zeros(1).cuda()": ".cuda", "import importlib": "importlib", "t = torch": "as a value",
    }
    for code, word in refused.items():
        found = read([("cell", "import torch\nimport torch.distributed as dist\n" + code + "\n")], probe.RULES)
        assert found and word in " ".join(found), (code, found)


def _rooted_case(source: str, dims: list[int], n: int, optimizer: str, kwargs: dict) -> None:
    ex.check(source=[("cell", source)], runs=[(n, [(dims, optimizer, kwargs, 1)])], what="state")


WIDE_ADAM = (2, [512, 2048, 1024], "adam", {"lr": 0.01})   # 3.1 M parameters: 12 MiB; Adam's state 24 MiB


def test_memory_read_outside_the_ranks_passes_the_reference_and_catches_the_census_proof_attack():
    n, dims, optimizer, kwargs = WIDE_ADAM
    _rooted_case(REFERENCE, dims, n, optimizer, kwargs)
    with pytest.raises(CheckFailed, match="more memory than a ZeRO-1 rank"):
        _rooted_case(ATTACK, dims, n, optimizer, kwargs)


def test_resident_memory_is_the_hosts_as_the_kernel_counts_it():
    """A host that allocates 64 MiB and keeps it is seen holding it; freed, it is gone (the probe's allocator
    setting returns large blocks to the kernel)."""
    keeper = "import torch\nKEPT = []\n\ndef keep(mib):\n    KEPT.clear()\n    if mib:\n" \
             "        KEPT.append(torch.ones(mib * 262144))\n"
    with Ranks(n=1, parts=[("cell", keeper)], timeout=60) as ranks:
        ranks.probe("zero1:start", [([4, 2], 1, "sgd", {"lr": 0.1}, [0, 1])])   # the probe's allocator setting
        before = ex.resident(ranks[0].process)
        ranks[0].call("keep", 64)
        held = ex.resident(ranks[0].process)
        ranks[0].call("keep", 0)
        after = ex.resident(ranks[0].process)
    assert 60 * ex.MIB < held - before < 72 * ex.MIB, (before, held)
    assert after - before < 4 * ex.MIB, (before, after)
