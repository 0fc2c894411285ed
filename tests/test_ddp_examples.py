"""The DDP chapter's worker code: DDP on two real gloo processes equals single-process training."""

from __future__ import annotations

import os
import sys

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import Subset

from dlperf import ddp_examples as X
from dlperf.data import image_classification
from dlperf.launch import launch

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def train_set():
    return image_classification(verbose=False).train.dataset


@pytest.fixture
def group_of_one(monkeypatch):
    """A gloo process group of one rank in this process (DDP and collectives work on it)."""
    if sys.platform.startswith("linux") and "GLOO_SOCKET_IFNAME" not in os.environ:
        monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_resnet18_has_the_resnet18_structure():
    assert X.resnet18(width=4)(torch.randn(3, 1, 28, 28)).shape == (3, 10)
    full = X.resnet18(width=64)
    convs = [m for m in full.modules() if isinstance(m, torch.nn.Conv2d) and m.kernel_size == (3, 3)]
    assert len(convs) == 17  # the stem and 16 in the residual blocks: 17 + the classifier = 18 layers
    assert 11_000_000 < sum(p.numel() for p in full.parameters()) < 11_300_000
    plain = X.resnet18(width=4, norm=False)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in plain.modules())
    assert all(m.bias is not None for m in plain.modules() if isinstance(m, torch.nn.Conv2d))


def test_seeded_models_and_reference_training_are_deterministic(train_set):
    a, b = X.seeded_resnet(3, width=4), X.seeded_resnet(3, width=4)
    assert X.max_abs_diff(a.state_dict(), b.state_dict()) == 0.0
    cfg = X.EquivalenceConfig(steps=2)
    first = X.reference_training(train_set, cfg, world=2)
    assert X.max_abs_diff(first, X.reference_training(train_set, cfg, world=2)) == 0.0
    assert X.max_abs_diff(first, X.seeded_resnet(cfg.seed, width=cfg.width, norm=False).state_dict()) > 0  # it trained


def test_sharded_evaluation_on_one_rank_counts_everything(group_of_one, train_set):
    model = X.seeded_resnet(0, width=4)
    subset = Subset(train_set, range(37))
    assert X.evaluate_sharded(model, subset, torch.device("cpu")) == X.count_correct(model, subset)


def test_bucket_layout_puts_the_classifier_in_bucket_zero(group_of_one):
    batch = (torch.randn(2, 1, 8, 8), torch.tensor([0, 1]))
    model = X.resnet18(width=8)
    total = sum(4 * p.numel() for p in model.parameters())
    layouts = X.bucket_layout(model, batch, iterations=2, bucket_cap_mb=0.05)
    for layout in layouts:
        assert sum(b["nbytes"] for b in layout) == total  # every gradient all-reduced exactly once
    rebuilt = layouts[-1]
    assert len(rebuilt) > 1 and {"13.weight", "13.bias"} <= set(rebuilt[0]["layers"])


def test_ddp_on_two_gloo_processes_equals_single_process_training(train_set):
    cfg = X.EquivalenceConfig()
    eval_set = Subset(train_set, range(101))  # 101 = 2 * 50 + 1: uneven shards
    out = launch("dlperf.ddp_examples:check_equivalence", 2, args=(train_set, cfg, eval_set), backend="gloo",
                 verbose=False)
    r0 = out[0]
    assert r0["world"] == 2 and r0["backend"] == "gloo"
    for variant in ("plain", "no_sync", "batchnorm"):
        result = r0[variant]
        assert result["spread_before"] > 0  # the ranks started from different models ...
        assert result["spread_wrapped"] == 0.0 == result["spread_after"]  # ... DDP made and kept them identical
    for variant, norm in (("plain", False), ("no_sync", False), ("batchnorm", True)):
        reference = X.reference_training(train_set, cfg, world=2, norm=norm)
        diff = X.max_abs_diff(r0[variant]["state"], reference)
        if norm:
            assert diff > 1e-3, "BatchNorm uses per-rank batch statistics: DDP should differ from the big batch"
        else:
            assert diff < 1e-10, f"{variant}: DDP differs from single-process training by {diff}"
    model = X.seeded_resnet(cfg.seed, width=cfg.width, norm=False).to(getattr(torch, cfg.dtype))
    model.load_state_dict(r0["plain"]["state"])
    assert tuple(r0["plain"]["counts"]) == X.count_correct(model, eval_set)
    assert r0["plain"]["padded_counts"][1] == 102  # DistributedSampler repeats one sample
