"""The process-group launcher: real gloo groups, results by rank, failures reported, no hangs."""

from __future__ import annotations

import time

import pytest
import torch

from dlperf.launch import WorkerError, launch

pytestmark = pytest.mark.timeout(240)


def test_allreduce_over_four_real_processes():
    out = launch("dist_workers:sum_ranks", 4, args=(2.0,), backend="gloo", verbose=False)
    assert [o["rank"] for o in out] == [0, 1, 2, 3] == [o["env_rank"] for o in out]
    assert all(o["world"] == 4 for o in out)
    for o in out:
        assert torch.equal(o["sum"], torch.full((5,), 2.0 * (0 + 1 + 2 + 3)))


def test_a_raising_worker_is_reported_with_its_traceback_and_nobody_hangs():
    started = time.monotonic()
    with pytest.raises(WorkerError) as info:
        launch("dist_workers:fail_on_rank", 3, args=(2,), backend="gloo", pg_timeout=120, verbose=False)
    assert info.value.rank == 2
    assert "ValueError: boom on rank 2" in str(info.value) and "fail_on_rank" in info.value.worker_traceback
    assert time.monotonic() - started < 60  # the barrier's 120 s timeout was never waited for


def test_a_worker_that_dies_silently_is_reported_with_its_exit_code():
    with pytest.raises(WorkerError) as info:
        launch("dist_workers:exit_on_rank", 2, args=(1,), backend="gloo", pg_timeout=120, verbose=False)
    assert info.value.rank == 1 and info.value.exitcode == 3


def test_timeout_kills_the_workers():
    with pytest.raises(TimeoutError, match="did not finish within 5 s"):
        launch("dist_workers:sleep_forever", 2, backend="gloo", timeout=5, verbose=False)


def test_functions_a_worker_cannot_import_are_refused_up_front():
    def local():
        return 1

    with pytest.raises(TypeError, match="cannot import it"):
        launch(local, 2, verbose=False)
    with pytest.raises(ValueError, match="module:function"):
        launch("no_colon", 2, verbose=False)


def test_fork_workers_refuse_cuda_backends():
    with pytest.raises(ValueError, match="forked workers cannot use CUDA"):
        launch("dist_workers:sum_ranks", 1, backend="nccl", start_method="fork", verbose=False)
