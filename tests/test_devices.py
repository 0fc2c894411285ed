"""Device discovery never crashes and always says what it chose."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import dlperf


def run_without_gpus(code: str) -> str:
    """Run ``code`` in a fresh interpreter that can see no CUDA device at all."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_discovery_on_a_machine_without_gpus():
    out = run_without_gpus(
        "import dlperf\n"
        "d = dlperf.default_device()\n"
        "ds = dlperf.get_devices(4)\n"
        "print('RESULT', d, [str(x) for x in ds], dlperf.accelerator_count())\n"
    )
    lines = out.splitlines()
    assert lines[0].startswith("Using cpu (")
    assert "Asked for 4 devices, found no CUDA device: using 4 simulated devices, all on the CPU" in lines[1]
    if dlperf.has_mps():  # Apple machines keep their MPS device
        pytest.skip("MPS present")
    assert lines[-1] == "RESULT cpu ['cpu', 'cpu', 'cpu', 'cpu'] 0"


def test_get_devices_refuses_nonsense():
    with pytest.raises(ValueError):
        dlperf.get_devices(0, verbose=False)


def test_by_device_picks_sizes():
    assert dlperf.by_device("cpu", cpu=1, cuda=2) == 1
    assert dlperf.by_device(torch.device("cuda", 3), cpu=1, cuda=2) == 2
    assert dlperf.by_device("mps", cpu=1, cuda=2) == 1
    assert dlperf.by_device("mps", cpu=1, cuda=2, mps=3) == 3


def test_describe_cpu():
    text = dlperf.describe("cpu")
    assert text.startswith("cpu (") and "logical cores" in text
    dlperf.synchronize("cpu")  # a no-op, but it must not fail
    dlperf.synchronize()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_discovery_with_a_gpu(capsys):
    assert dlperf.default_device() == torch.device("cuda", 0)
    n = torch.cuda.device_count()
    assert dlperf.get_devices(n) == [torch.device("cuda", i) for i in range(n)]
    assert dlperf.get_devices(n + 1) == [torch.device("cuda", 0)] * (n + 1)  # simulated on the GPU
    out = capsys.readouterr().out
    assert "CUDA" in out and f"found {n} CUDA device(s): using {n + 1} simulated devices, all on cuda:0" in out
    assert "compute capability" in dlperf.describe("cuda")
