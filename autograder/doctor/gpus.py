"""The checks of the node's GPUs: what ``nvidia-smi`` and torch see, CUDA in a sandbox and in the process that runs
a student's code, the workers' pinning, NCCL between two processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from .. import course
from .node import _sandbox_args
from .report import FAIL, NA, NO_GPU, OK, WARN

def gpu_inventory() -> dict[str, Any]:
    """What ``nvidia-smi`` and torch say about the GPUs (no CUDA context is created)."""
    info: dict[str, Any] = {"smi": [], "driver": None, "torch_count": 0, "torch_names": [], "error": None}
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30)
            rows = [[c.strip() for c in line.split(",")] for line in out.stdout.splitlines() if line.strip()]
            info["smi"] = [{"name": r[0], "driver": r[1], "memory": r[2]} for r in rows if len(r) == 3]
            info["driver"] = info["smi"][0]["driver"] if info["smi"] else None
            if out.returncode != 0:
                info["error"] = f"nvidia-smi exited {out.returncode}: {(out.stderr or out.stdout).strip()[-200:]}"
        except (OSError, subprocess.SubprocessError) as exc:
            info["error"] = f"nvidia-smi failed: {exc}"
    import torch

    try:
        if torch.cuda.is_available():
            info["torch_count"] = torch.cuda.device_count()
            info["torch_names"] = [torch.cuda.get_device_name(i) for i in range(info["torch_count"])]
    except Exception as exc:  # noqa: BLE001 - a broken driver is reported
        info["error"] = f"torch.cuda: {type(exc).__name__}: {exc}"
    return info


def check_gpus(slot: dict[str, Any], info: dict[str, Any], required: bool) -> None:
    import torch

    slot["data"] = info
    smi, count = info["smi"], info["torch_count"]
    if not smi and not count:
        why = "nvidia-smi not found" if shutil.which("nvidia-smi") is None else "nvidia-smi lists none"
        slot.update(verdict=FAIL if required else NO_GPU,
                    detail=f"no GPU ({why}; torch {torch.__version__} sees none)"
                    + (": --gpu asks for one" if required else ""))
        return
    names = ", ".join(f"{g['name']} ({g['memory']})" for g in smi) or ", ".join(info["torch_names"])
    detail = (f"{len(smi) or count} GPU(s): {names}; driver {info['driver'] or '?'}; torch {torch.__version__} "
              f"(CUDA {torch.version.cuda}) sees {count}")
    if count == 0:
        build = "a CPU-only build of torch" if not torch.version.cuda else "torch cannot use them"
        slot.update(verdict=FAIL, detail=f"{detail}: {build}{' (' + info['error'] + ')' if info['error'] else ''}")
    elif smi and count != len(smi) and os.environ.get("CUDA_VISIBLE_DEVICES") is None:
        slot.update(verdict=WARN, detail=f"{detail}: nvidia-smi and torch disagree")
    else:
        slot.update(verdict=OK, detail=detail)


_CUDA_PROBE = """
import json, os
# First the process that runs a student's code for the hidden checks (a host, forked from a zygote that
# was forked from this process before it touched CUDA, as a check run does), then this process itself.
from autograder.trusted import Student, zygote
zygote.set_zygote(zygote.Zygote.fork())
SOURCE = "import torch\\ndef f():\\n    x = torch.ones(256, 256, device='cuda')\\n    return float((x @ x).sum().item())\\n"
try:
    with Student(parts=[("<doctor>", SOURCE)], timeout=120) as s:
        host = {"ok": s.call("f") == 256.0 ** 3, "isolation": s.process.isolation,
                "pid_namespace": s.process.pid_namespace}
except Exception as exc:
    host = {"ok": False, "error": (type(exc).__name__ + ": " + str(exc))[:600]}
import torch
torch.cuda.init()
x = torch.ones(1024, 1024, device="cuda")
total = (x @ x).sum().item()
torch.cuda.synchronize()
print(json.dumps({"count": torch.cuda.device_count(), "name": torch.cuda.get_device_name(0),
                  "visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "matmul_ok": total == 1024.0 ** 3,
                  "host": host}))
"""


def first_gpu() -> str:
    """The GPU a grading worker of this node would get first (``CUDA_VISIBLE_DEVICES`` as the engine pins it)."""
    from ..engine import local_gpus

    gpus = local_gpus()
    return gpus[0] if gpus else "0"


def check_cuda_in_sandbox(slot: dict[str, Any], memory: int, processes: int) -> None:
    """torch.cuda inside a sandbox made as the runner makes the student's (GPU device nodes bound in)."""
    from ..sandbox import Sandbox, gpu_device_nodes

    gpu = first_gpu()
    with tempfile.TemporaryDirectory(prefix="doctor-cuda-") as tmp:
        with Sandbox(**_sandbox_args(memory, processes, gpu, Path(tmp)), name="doctor-cuda") as box:
            env = {**box.base_env(), "PYTHONPATH": str(course.REPO)}
            out = subprocess.run(box.command([sys.executable, "-c", _CUDA_PROBE], env),
                                 capture_output=True, text=True, timeout=300, cwd=tmp)
            describe = box.describe()
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        slot.update(verdict=FAIL, detail=f"torch.cuda.init() failed in the sandbox (exit {out.returncode}; "
                    f"{len(gpu_device_nodes())} device nodes bound): {out.stderr.strip()[-400:]}")
        return
    got = json.loads(lines[-1])
    slot["data"] = got
    host = got.get("host") or {}
    if got["count"] != 1 or not got["matmul_ok"]:
        slot.update(verdict=FAIL, detail=f"the sandbox saw {got['count']} GPU(s) with CUDA_VISIBLE_DEVICES="
                    f"{got['visible']} (expected 1), matmul correct: {got['matmul_ok']}")
    elif not host.get("ok"):
        slot.update(verdict=FAIL, detail=f"CUDA works in the sandbox but not in the process that runs a student's code "
                    f"for the hidden checks ({host.get('error') or 'wrong result'}): every hidden test that uses the "
                    "GPU would fail")
    else:
        slot.update(verdict=OK, detail=f"CUDA_VISIBLE_DEVICES={gpu} in the sandbox: torch.cuda.init() and a 1024x1024 "
                    f"matmul on {got['name']} worked, 1 device visible, and a matmul in the process that runs a "
                    f"student's code ({host.get('isolation')}, "
                    f"{'its own' if host.get('pid_namespace') else 'no'} PID namespace). Sandbox: {describe}")


def _worker_view() -> dict[str, Any]:
    """On a Dask worker: its CUDA_VISIBLE_DEVICES and, where it names a GPU, what torch sees."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    view: dict[str, Any] = {"visible": visible, "count": 0, "names": []}
    if visible and visible.strip() not in ("", "-1"):
        import torch

        view["count"] = torch.cuda.device_count()
        view["names"] = [torch.cuda.get_device_name(i) for i in range(view["count"])]
    return view


def check_worker_pinning(slot: dict[str, Any], gpus: int) -> None:
    """The engine's local Dask cluster: one worker per GPU, each seeing its own GPU only."""
    from ..engine import ClusterChoice, connect

    with connect(ClusterChoice()) as (client, what):
        views = client.run(_worker_view)
    seen = {str(client_addr): view for client_addr, view in views.items()}
    pins = sorted(str(v["visible"]) for v in seen.values())
    slot["data"] = {"workers": list(seen.values()), "cluster": what}
    if not gpus:
        if all(v["visible"] == "" for v in seen.values()):
            slot.update(verdict=NO_GPU, detail=f"no GPU: {what}, each with CUDA_VISIBLE_DEVICES='' (they cannot "
                        "see a GPU)")
        else:
            slot.update(verdict=FAIL, detail=f"{what}, but CUDA_VISIBLE_DEVICES is {pins}: a CPU worker must see none")
        return
    each_one = all(v["count"] == 1 for v in seen.values())
    distinct = len(set(pins)) == len(pins)
    detail = (f"{what}: CUDA_VISIBLE_DEVICES " + ", ".join(pins) + "; each worker's torch sees "
              + ", ".join(f"{v['count']} ({', '.join(v['names'])})" for v in seen.values()))
    if len(seen) != gpus or not each_one or not distinct:
        slot.update(verdict=FAIL, detail=f"{detail}: expected {gpus} worker(s), each with its own single GPU")
    else:
        slot.update(verdict=OK, detail=detail)


def nccl_sum() -> dict[str, Any]:
    """Worker of the NCCL check (run by :func:`dlperf.launch.launch`): all-reduce the ranks on the GPUs."""
    import torch
    import torch.distributed as dist

    from dlperf.launch import init_from_env

    rank, world, device = init_from_env()
    t = torch.full((1024,), float(rank + 1), device=device)
    dist.all_reduce(t)
    torch.cuda.synchronize(device)
    return {"rank": rank, "backend": dist.get_backend(), "value": float(t[0].item()), "device": str(device)}


def check_nccl(slot: dict[str, Any], gpus: int) -> None:
    if gpus < 2:
        slot.update(verdict=NO_GPU if gpus == 0 else NA,
                    detail="no GPU" if gpus == 0 else "one GPU: NCCL between two processes needs two")
        return
    from dlperf.launch import launch

    results = launch("autograder.doctor.gpus:nccl_sum", 2, backend="nccl", timeout=180, verbose=False)
    slot["data"] = {"results": results}
    if all(r["value"] == 3.0 and r["backend"] == "nccl" for r in results):
        slot.update(verdict=OK, detail="2 processes, one GPU each (" + ", ".join(r["device"] for r in results)
                    + "): an NCCL all_reduce of 1+2 gave 3 on both")
    else:
        slot.update(verdict=FAIL, detail=f"NCCL all_reduce of 1+2 gave {results}")
