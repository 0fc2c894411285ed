"""The course's traffic counts against a GPU's own counters: Nsight Compute's DRAM and L2 bytes.

The book counts what Triton kernels move with the interpreter (:mod:`dlperf.kernels.traffic`: bytes asked for
and 32-byte sectors, per program, with no cache between programs) and models what reaches HBM with closed
forms (:func:`dlperf.kernels.grouped.hbm_bytes`'s L2 model, :func:`dlperf.kernels.flash.flash_bytes`).  On a
GPU this script launches the same kernels once each under ``ncu`` (Nsight Compute, which flushes the caches
before each kernel it measures) and reads, per launch:

* ``dram__bytes_read.sum`` and ``dram__bytes_write.sum``: bytes between the L2 and HBM;
* ``lts__t_sectors_srcunit_tex_op_read.sum`` and ``..._op_write.sum``: 32-byte sectors the SMs asked of the
  L2 (what the interpreter's sector count models, where L1 catches nothing);
* ``gpu__time_duration.sum``.

Beside each it puts what the interpreter counts for the same launch (run here in interpreter processes on
CPU copies, :func:`dlperf.kernels.traffic.count`), or the model's figure where the interpreter would take too
long (the 8192-square product, attention over 4096 tokens).  Writes ``ncu-traffic.json`` (every figure and
the machine), ``ncu-traffic.md`` (the table) and ``ncu-raw.csv`` (what ncu printed) into ``--out``.

Usage: ``python scripts/ncu_traffic.py [--out DIR] [--time-limit SECONDS]``; ``make gpu-check`` runs it as its
``ncu`` step.  Without a CUDA device or without ``ncu`` it says so and exits 2.  Inside ncu it is run again
with ``--launch FILE`` (launch each kernel once, write the order of the launches to FILE).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dlperf.kernels.ncu import (DRAM_READ, DRAM_WRITE, FA_BLOCK, FA_SHAPE, L2_READ, L2_WRITE, LN_SHAPE,  # noqa: E402
                                MM_BK, MM_GROUPS, MM_N, MM_TILE, N_ADD, N_GATHER, STRIDES, TIME, parse, table)

METRICS = (DRAM_READ, DRAM_WRITE, L2_READ, L2_WRITE, TIME)
KERNELS = ("add_kernel", "strided_load_kernel", "layer_norm_kernel", "matmul_kernel", "flash_fwd_kernel")


def cases(device: str):
    """(label, launcher, args, kwargs) for every launch, in launch order; tensors made on ``device``."""
    import torch

    from dlperf.kernels import flash, grouped, triton_kernels as K

    g = torch.Generator().manual_seed(0)

    def rand(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g).to(dtype).to(device)

    out = [("add", K.add, (rand(N_ADD), rand(N_ADD)), {})]
    for s in STRIDES:
        out.append((f"gather_stride_{s}", K.strided_load, (rand((N_GATHER - 1) * s + 1), N_GATHER, s), {}))
    m, n = LN_SHAPE
    out.append(("layer_norm", K.layer_norm, (rand(m, n), rand(n), rand(n)), {}))
    if device != "cpu":       # too large for the interpreter: compared with the models
        a, b = rand(MM_N, MM_N, dtype=torch.bfloat16), rand(MM_N, MM_N, dtype=torch.bfloat16)
        for gm in MM_GROUPS:
            out.append((f"matmul_group_{gm}", grouped.matmul, (a, b, MM_TILE, MM_TILE, MM_BK, gm), {}))
        q, k, v = (rand(*FA_SHAPE, dtype=torch.float16) for _ in range(3))
        for causal in (False, True):
            out.append((f"flash_{'causal' if causal else 'full'}", flash.flash_attention, (q, k, v),
                        {"causal": causal, "block_m": FA_BLOCK, "block_n": FA_BLOCK}))
    return out


def launch(order_file: Path) -> None:
    """Inside ncu: launch every case once on the GPU, in order, and write the labels in that order."""
    import torch

    labels = []
    for label, fn, args, kwargs in cases("cuda"):
        fn(*args, **kwargs)
        torch.cuda.synchronize()
        labels.append(label)
    order_file.write_text(json.dumps(labels))


def find_ncu() -> str | None:
    found = shutil.which("ncu")
    if found:
        return found
    for pattern in ("/usr/local/cuda*/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu", "/usr/local/NVIDIA-Nsight-Compute*/ncu"):
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[-1]
    return None


def interpreter_counts() -> dict[str, dict]:
    """The interpreter's counts of the cases small enough for it, in parallel interpreter processes."""
    from dlperf.kernels.traffic import count

    def one(case):
        label, fn, args, kwargs = case
        _, traffic = count(fn, *args, in_subprocess=True, **kwargs)
        return label, {"loaded": traffic.loaded_bytes, "stored": traffic.stored_bytes,
                       "sector_bytes": traffic.sector_bytes}

    with ThreadPoolExecutor(max_workers=max(1, min(8, (os.cpu_count() or 2) - 1))) as pool:
        return dict(pool.map(one, cases("cpu")))


def models(l2_bytes: float, sms: int) -> dict[str, dict]:
    """The book's models for the cases the interpreter does not count."""
    from dlperf.kernels import flash, grouped

    out = {}
    least = 2 * MM_N * MM_N * 2
    for gm in MM_GROUPS:
        out[f"matmul_group_{gm}"] = {
            "model_hbm_read": grouped.hbm_bytes(MM_N, MM_N, MM_N, MM_TILE, MM_TILE, MM_BK, 2, gm, l2_bytes, sms),
            "least_read": least, "asked_read": MM_N**3 * 2 * (2 / MM_TILE), "stored": MM_N * MM_N * 2}
    b, h, n, d = FA_SHAPE
    for causal in (False, True):
        fb = flash.flash_bytes(b * h, n, n, d, 2, FA_BLOCK, FA_BLOCK, causal)
        out[f"flash_{'causal' if causal else 'full'}"] = {
            "loaded": fb["load"], "stored": fb["store"], "least_read": 3 * b * h * n * d * 2,
            "standard_bytes": flash.standard_bytes(b * h, n, n, d, 2)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "ncu")
    parser.add_argument("--time-limit", type=float, default=600)
    parser.add_argument("--launch", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.launch is not None:
        launch(args.launch)
        return 0
    import torch

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    ncu = find_ncu()
    if not torch.cuda.is_available() or ncu is None:
        print(f"ncu-traffic: needs a CUDA device and Nsight Compute (cuda: {torch.cuda.is_available()}, ncu: {ncu})")
        return 2
    started = time.monotonic()
    props = torch.cuda.get_device_properties(0)
    l2, sms = float(props.L2_cache_size), props.multi_processor_count
    with ThreadPoolExecutor(max_workers=1) as pool:
        counted = pool.submit(interpreter_counts)        # beside ncu: the interpreter runs on the CPUs
        order_file = out / "launch-order.json"
        cmd = [ncu, "--csv", "--print-units", "base", "--clock-control", "none", "--metrics", ",".join(METRICS),
               "--kernel-name", "regex:" + "|".join(KERNELS),
               sys.executable, str(Path(__file__).resolve()), "--launch", str(order_file)]
        print("ncu-traffic:", " ".join(cmd), flush=True)
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=max(30, args.time_limit - 30),
                                  env={**os.environ, "PYTHONUNBUFFERED": "1"})
            raw, code = done.stdout, done.returncode
            if done.stderr:
                raw += "\n# stderr\n" + done.stderr
        except subprocess.TimeoutExpired as exc:
            raw, code = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or ""), 124
        (out / "ncu-raw.csv").write_text(raw)
        try:
            counts = counted.result(timeout=max(10, args.time_limit - (time.monotonic() - started)))
        except Exception as exc:       # keep what ncu measured
            print(f"ncu-traffic: the interpreter's counts failed: {type(exc).__name__}: {exc}")
            counts = {}
    measured = parse(raw)
    labels = json.loads(order_file.read_text()) if order_file.is_file() else []
    modelled = models(l2, sms)
    rows = []
    for label, launch_ in zip(labels, measured):
        row = {"label": label, "kernel": launch_["kernel"], "metrics": launch_["metrics"]}
        if label in counts:
            c = counts[label]
            row.update(interpreter=c, expected_read=c["loaded"], expected_write=c["stored"])
        elif label in modelled:
            mdl = modelled[label]
            row.update(model=mdl, expected_read=mdl.get("model_hbm_read", mdl.get("loaded")),
                       expected_write=mdl.get("stored"))
        rows.append(row)
    from dlperf.gpu_reference import provenance

    report = {"ncu": ncu, "exit": code, **provenance("cuda"),     # device, capability, torch, CUDA, driver, ...
              "l2_bytes": l2, "sms": sms, "metrics": list(METRICS),
              "launches": rows, "unmatched_labels": labels[len(measured):], "seconds": round(time.monotonic() - started, 1)}
    (out / "ncu-traffic.json").write_text(json.dumps(report, indent=1))
    (out / "ncu-traffic.md").write_text(f"# ncu against the course's counts on {report['device']}\n\n{table(rows)}\n")
    print(table(rows))
    print(f"ncu-traffic: exit {code}, {len(measured)} launches measured of {len(labels)}, "
          f"{report['seconds']} s")
    return 0 if code == 0 and rows and len(measured) == len(labels) else 1


if __name__ == "__main__":
    sys.exit(main())
