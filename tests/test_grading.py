"""The grading instruments: self-check tables, clean-process checks, point-to-point accounting on real gloo groups."""

from __future__ import annotations

import statistics
import textwrap
import time

import pytest
import torch

from dlperf import grading
from dlperf.grading import CheckFailed, SelfCheck, isolated
from dlperf.launch import WorkerError, launch

pytestmark = pytest.mark.timeout(300)

RING = textwrap.dedent('''
    import torch
    import torch.distributed as dist

    def ring(tensor):
        rank, n = dist.get_rank(), dist.get_world_size()
        chunks = list(tensor.view(-1).tensor_split(n))
        right, left = (rank + 1) % n, (rank - 1) % n
        buf = torch.empty_like(chunks[0])
        for k in range(n - 1):
            s, r = (rank - k) % n, (rank - k - 1) % n
            incoming = buf[: chunks[r].numel()]
            for req in [dist.isend(chunks[s], right), dist.irecv(incoming, left)]:
                req.wait()
            chunks[r].add_(incoming)
        for k in range(n - 1):
            s, r = (rank + 1 - k) % n, (rank - k) % n
            for req in [dist.isend(chunks[s], right), dist.irecv(chunks[r], left)]:
                req.wait()
''')

WHOLE_BUFFER = textwrap.dedent('''
    import torch
    import torch.distributed as dist

    def ring(tensor):
        rank, n = dist.get_rank(), dist.get_world_size()
        total, current, incoming = tensor.clone(), tensor.clone(), torch.empty_like(tensor)
        for _ in range(n - 1):
            for req in [dist.isend(current, (rank + 1) % n), dist.irecv(incoming, (rank - 1) % n)]:
                req.wait()
            total += incoming
            current, incoming = incoming, current
        tensor.copy_(total)
''')

COLLECTIVE = "import torch.distributed as dist\n\ndef ring(tensor):\n    dist.all_reduce(tensor)\n"
COLLECTIVE_VIA_GROUP = ("import torch.distributed as dist\n\ndef ring(tensor):\n"
                        "    dist.distributed_c10d._get_default_group().allreduce([tensor]).wait()\n")


# -- self-check tables ------------------------------------------------------------------------

def test_self_check_prints_a_table_and_raises_on_the_first_failure(capsys):
    check = SelfCheck("double")
    check.row("x=2", 4, 4, ok=True)
    check.run("x=3", lambda: (7, 6, False), hint="2 * x")
    check.run("stub", lambda: (_ for _ in ()).throw(NotImplementedError()))
    with pytest.raises(AssertionError, match="2 of 3 cases fail .first: x=3"):
        check.done()
    out = capsys.readouterr().out
    assert "Self-check: double" in out and "hint (x=3): 2 * x" in out and "the stub is still there" in out
    assert out.count("NO") == 2 and "1 of 3 cases pass." in out


def test_self_check_passes_quietly_apart_from_its_table(capsys):
    check = SelfCheck("t")
    check.row("tensor", torch.arange(10.0), torch.arange(10.0), ok=True)
    check.done()
    assert "tensor(10,) float32 [0, 1, 2, ...]" in capsys.readouterr().out


# -- solution source and clean-process checks -------------------------------------------------

def test_solution_source_is_the_whole_defining_file_and_handles_classes():
    source = grading.solution_source(SelfCheck, grading.isolated)
    assert source.count("def isolated(") == 1  # one file, given once
    with pytest.raises(TypeError):
        grading.solution_source(42)


def _check_double(student, x):
    assert type(student.double(x)) is int, "double must return an int"
    assert student.double(x) == 2 * x, f"double({x}) gave {student.double(x)}, expected {2 * x}"
    return {"value": student.double(x)}


def test_isolated_returns_the_checks_result():
    assert isolated(_check_double, source="def double(x):\n    return 2 * x\n", args=(21,)) == {"value": 42}


def test_isolated_reports_a_failed_assertion_with_its_message_only():
    with pytest.raises(CheckFailed, match=r"^double\(3\) gave 9, expected 6$"):
        isolated(_check_double, source="def double(x):\n    return 3 * x\n", args=(3,))


def _check_raises(student):
    student.broken()


def test_isolated_reports_the_students_exception_without_the_checks_source():
    with pytest.raises(CheckFailed) as info:
        isolated(_check_raises, source="def broken():\n    return {}['missing']\n")
    text = str(info.value)
    assert "your code raised" in text and "KeyError: 'missing'" in text and "return {}['missing']" in text
    assert 'File "<hidden check>"' in text and "student.broken()" not in text  # no hidden source line


def _check_nothing(student):
    return None


def test_isolated_reports_a_solution_cell_that_fails_on_its_own():
    with pytest.raises(CheckFailed, match="failed when run on its own(.|\n)*NameError"):
        isolated(_check_nothing, source="x = helper_from_another_cell()\n")


def _check_loops(student):
    student.spin()


def test_isolated_kills_a_check_that_runs_too_long():
    started = time.monotonic()
    with pytest.raises(CheckFailed, match="timed out"):
        isolated(_check_loops, source="def spin():\n    while True:\n        pass\n", timeout=3)
    assert time.monotonic() - started < 15


def _check_exits(student):
    student.leave()


def test_isolated_reports_a_process_that_dies():
    with pytest.raises(CheckFailed, match="died"):
        isolated(_check_exits, source="import os\n\ndef leave():\n    os._exit(3)\n")


def _check_sees_clean_torch(student):
    import torch
    return torch.add is not None and student.value == 1


def test_isolated_runs_in_a_process_that_the_callers_monkeypatching_does_not_reach(monkeypatch):
    monkeypatch.setattr(torch, "add", None)
    assert isolated(_check_sees_clean_torch, source="value = 1\n") is True


def _check_prints(student):
    student.chatty()
    return "done"


def test_output_of_the_students_code_does_not_reach_the_caller(capfd):
    src = "import sys\n\ndef chatty():\n    print('out')\n    print('err', file=sys.stderr)\n"
    assert isolated(_check_prints, source=src) == "done"
    captured = capfd.readouterr()
    assert "out" not in captured.out and "err" not in captured.err


# -- point-to-point accounting on real process groups ------------------------------------------

def _run(source: str, tmp_path, nprocs: int, timing=None):
    path = tmp_path / "student_solution.py"
    path.write_text(source)
    cases = [(10, "float32", 1), (1001, "int64", 2), (4099, "float64", 3)]
    return launch("dlperf.grading:allreduce_rank", nprocs, args=(str(path), "ring", cases, timing),
                  start_method="fork", verbose=False, timeout=120, pg_timeout=30)


@pytest.mark.parametrize("nprocs", [3, 4])
def test_a_chunked_ring_is_right_in_place_and_sends_2_n_minus_1_over_n_of_the_data(tmp_path, nprocs):
    reports = _run(RING, tmp_path, nprocs)
    for report in reports:
        assert report["harness_intact"]
        for case in report["cases"]:
            assert case["correct"] and case["in_place"], case
            ideal = 2 * (nprocs - 1) / nprocs * case["nbytes"]
            element = case["nbytes"] // case["numel"]
            assert abs(case["bytes_sent"] - ideal) <= 2 * (nprocs - 1) * element
            assert case["messages_sent"] == case["messages_received"] == 2 * (nprocs - 1)
            assert case["peers_sent"] == [(report["rank"] + 1) % nprocs] and case["collectives"] == []


def test_a_whole_buffer_ring_is_right_but_sends_n_minus_1_times_the_data(tmp_path):
    for report in _run(WHOLE_BUFFER, tmp_path, 4):
        for case in report["cases"]:
            assert case["correct"] and case["bytes_sent"] == 3 * case["nbytes"]


@pytest.mark.parametrize("source", [COLLECTIVE, COLLECTIVE_VIA_GROUP], ids=["dist.all_reduce", "group.allreduce"])
def test_a_collective_is_refused_wherever_it_is_called_from(tmp_path, source):
    with pytest.raises(WorkerError, match="CollectiveUsed: .*is a collective operation"):
        _run(source, tmp_path, 2)


def test_the_harness_restores_every_replaced_method():
    before = {name: vars(torch.distributed.ProcessGroup).get(name) for name in ("send", "recv", "allreduce")}
    with grading.count_point_to_point():
        assert torch.distributed.all_reduce is not before
    after = {name: vars(torch.distributed.ProcessGroup).get(name) for name in ("send", "recv", "allreduce")}
    assert after == before


def test_the_harness_times_the_solution_against_all_reduce_in_the_same_job(tmp_path):
    """The performance criterion of the ring exercise: a whole-buffer ring is clearly slower than a chunked one.

    Printed, not asserted beyond a wide margin: the ratios depend on the machine and its load.
    """
    ratios = {}
    for name, source in {"chunked ring": RING, "whole-buffer ring": WHOLE_BUFFER}.items():
        reports = _run(source, tmp_path, 4, timing=(2_000_000, "float32", 5))
        student = statistics.median(max(r["student_times"][i] for r in reports) for i in range(5))
        reference = statistics.median(max(r["reference_times"][i] for r in reports) for i in range(5))
        ratios[name] = student / reference
    print({k: round(v, 2) for k, v in ratios.items()})
    assert ratios["whole-buffer ring"] > 1.5 * ratios["chunked ring"]


def test_fork_workers_refuse_cuda_backends():
    with pytest.raises(ValueError, match="forked workers cannot use CUDA"):
        launch("dist_workers:sum_ranks", 1, backend="nccl", start_method="fork", verbose=False)


def _check_uses_keyword_arguments(student):
    import torch
    # torch functions with keyword arguments look up __builtins__ in the caller's globals
    return bool(torch.allclose(torch.full((2,), 1.5), torch.ones(2) * 1.5, rtol=1e-6))


def test_a_check_keeps_its_globals_and_builtins():
    assert isolated(_check_uses_keyword_arguments, source="") is True
