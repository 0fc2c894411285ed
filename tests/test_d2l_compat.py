"""d2l loads on a modern stack; what cannot work here fails clearly, never silently."""

from __future__ import annotations

import subprocess
import sys

CODE = r"""
from dlperf.d2l_compat import OfflineError, VisionUnavailable, load_d2l, torchvision_status
d2l = load_d2l()
print("STATUS", torchvision_status().split(" ")[0])
print("GPUS", d2l.try_all_gpus() == [] or all(str(d).startswith("cuda") for d in d2l.try_all_gpus()))
acc = d2l.Accumulator(2); acc.add(1, 2); print("ACC", acc[0], acc[1])
try:
    d2l.download("fashion_mnist")
except OfflineError as e:
    print("OFFLINE", "offline" in str(e))
if torchvision_status() != "real":
    try:
        d2l.load_data_fashion_mnist(32)
    except VisionUnavailable as e:
        print("VISION", "torchvision" in str(e))
"""


def test_d2l_loads_and_fails_clearly():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if line.split(" ", 1)[0].isupper())
    assert lines["GPUS"] == "True"
    assert lines["ACC"] == "1.0 2.0"
    assert lines["OFFLINE"] == "True"
    if lines["STATUS"] != "real":
        assert lines["VISION"] == "True"
        assert "its vision helpers will raise VisionUnavailable" in out.stdout  # said once, up front
