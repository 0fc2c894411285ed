"""Dask workers as Slurm jobs (``autograder grade --slurm``), through ``dask_jobqueue.SLURMCluster``.

Each worker is one Slurm job: one task, one CPU, ``--mem`` of ``job_memory``,
``--time`` of ``walltime``, and, unless ``gres`` is empty, ``--gres=<gres>``.
Slurm's GRES plugin then sets the job's ``CUDA_VISIBLE_DEVICES`` to the GPU it
allocated, and the Dask worker (and every kernel and check it starts) inherits
it: nothing here picks GPUs.  A GPU worker advertises the Dask resource
``GPU=<count>``; a CPU worker gets ``CUDA_VISIBLE_DEVICES=`` (empty) like the
local CPU workers.  The workers run this interpreter (``sys.executable``) in
the repository directory with the repository on ``PYTHONPATH``, so the
environment (and the repository) must be visible from the compute nodes, as
on any cluster with a shared file system.

Networking: when every node of the partition is this machine (a one-node test
Slurm, ``NodeAddr=127.0.0.1``), the scheduler listens on 127.0.0.1; otherwise
on dask-jobqueue's default (all interfaces, advertised by the address that
routes to the nodes).  ``interface`` in the options (or ``DLPERF_SLURM_INTERFACE``)
chooses a network interface for scheduler and workers instead (``ib0``).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_START_TIMEOUT = 600.0      # seconds for all worker jobs to start and connect (queues can be slow)


def slurm_options(args: argparse.Namespace) -> dict[str, Any]:
    """The Slurm part of the command line as a plain dict (what :class:`ClusterChoice` keeps and prints).

    Keys, named as ``SLURMCluster``'s parameters where it has one; ``None`` / empty values are left out:

    ``queue``        the partition (``--partition``; ``#SBATCH -p``), else Slurm's default partition
    ``account``      ``--account`` (``#SBATCH -A``)
    ``walltime``     ``--walltime`` of each worker job (``#SBATCH -t``), e.g. ``01:00:00``
    ``memory``       ``--job-memory`` of each worker job (``#SBATCH --mem``, also the worker's memory limit)
    ``gres``         ``--gres`` of each worker job, e.g. ``gpu:1`` (``#SBATCH --gres=``); absent = CPU workers

    :func:`slurm_cluster` also reads ``interface`` (network interface for scheduler and workers),
    ``start_timeout`` (seconds to wait for the workers, default 600), ``log_directory`` and
    ``local_directory``, which the command line does not set.
    """
    options = {
        "queue": getattr(args, "partition", None),
        "account": getattr(args, "account", None),
        "walltime": getattr(args, "walltime", None),
        "memory": getattr(args, "job_memory", None),
        "gres": (getattr(args, "gres", None) or "").strip(),
    }
    return {k: v for k, v in options.items() if v not in (None, "")}


def gpu_count(gres: str | None) -> int:
    """GPUs per job asked for by a GRES string: ``gpu:1`` -> 1, ``gpu:a100:2`` -> 2, ``gpu`` -> 1, ``''`` -> 0.

    >>> [gpu_count(g) for g in ("gpu:1", "gpu:a100:2", "gpu", "", "gpu:2,shard:1", "shard:3")]
    [1, 2, 1, 0, 2, 0]
    """
    for item in (gres or "").split(","):
        parts = item.strip().split(":")
        if parts[0] in ("gpu", "gres/gpu"):
            last = parts[-1] if len(parts) > 1 else "1"
            return int(last) if last.isdigit() else 1
    return 0


def _run(cmd: list[str], timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout)


def _partition_is_local(queue: str | None) -> bool:
    """Whether every node of the partition (default one if None) is this machine by a loopback address."""
    cmd = ["sinfo", "-h", "-N", "-o", "%N"] + (["-p", queue] if queue else [])
    try:
        nodes = sorted(set(_run(cmd).stdout.split()))
        if not nodes:
            return False
        for node in nodes:
            out = _run(["scontrol", "show", "node", node]).stdout
            addr = re.search(r"NodeAddr=(\S+)", out)
            if not addr or not (addr.group(1).startswith("127.") or addr.group(1) == "localhost"):
                return False
        return True
    except (OSError, subprocess.SubprocessError):
        return False


def _squeue(job_ids: list[str]) -> str:
    cmd = ["squeue", "-o", "%.10i %.10P %.16j %.8T %.10M %.20R"]
    if job_ids:
        cmd += ["-j", ",".join(job_ids)]
    try:
        out = _run(cmd, timeout=15)
        return (out.stdout + out.stderr).strip() or "(squeue printed nothing)"
    except (OSError, subprocess.SubprocessError) as exc:
        return f"(squeue failed: {exc})"


def _log_tails(log_directory: str, job_ids: list[str], n: int = 1500) -> str:
    parts = []
    for job_id in job_ids:
        for path in sorted(Path(log_directory).glob(f"*-{job_id}.*")):
            try:
                text = path.read_text(errors="replace").strip()
            except OSError:
                continue
            if text:
                parts.append(f"--- {path} ---\n{text[-n:]}")
    return "\n".join(parts)


def slurm_cluster(choice: Any) -> tuple[Any, str]:
    """Start ``choice.workers`` (default 2) Dask workers as Slurm jobs; return the cluster and what it is.

    ``choice.slurm`` is :func:`slurm_options`' dict.  Returns once every worker has
    connected; raises ``RuntimeError`` (with ``squeue``'s view and the jobs' logs)
    when Slurm refuses the job or the workers are not all there after
    ``start_timeout`` seconds, cancelling the jobs it submitted.
    """
    from dask_jobqueue import SLURMCluster

    opts = dict(choice.slurm or {})
    n = int(choice.workers or 2)
    if shutil.which("sbatch") is None:
        raise RuntimeError("--slurm: sbatch not found; run the grader on a Slurm login node (or set PATH)")
    gres = opts.get("gres") or ""
    gpus = gpu_count(gres)
    queue, account = opts.get("queue"), opts.get("account")
    memory = opts.get("memory") or "16GB"
    walltime = opts.get("walltime") or "01:00:00"
    user = os.environ.get("USER") or str(os.getuid())
    log_directory = opts.get("log_directory") or os.environ.get("DLPERF_SLURM_LOGS") or str(
        Path.home() / ".cache" / "dlperf" / "slurm-logs")         # the compute nodes write there: shared home
    local_directory = opts.get("local_directory") or str(Path(tempfile.gettempdir()) / f"dlperf-dask-{user}")
    interface = opts.get("interface") or os.environ.get("DLPERF_SLURM_INTERFACE")
    start_timeout = float(opts.get("start_timeout") or DEFAULT_START_TIMEOUT)

    bindir = Path(sys.executable).parent      # the environment's commands (alembic, jupyter) first on PATH
    repo = shlex.quote(str(REPO))
    prologue = [f"cd {repo}", f"export PYTHONPATH={repo}${{PYTHONPATH:+:$PYTHONPATH}}",
                f"export PATH={shlex.quote(str(bindir))}:$PATH"]
    if not gpus:
        prologue.append("export CUDA_VISIBLE_DEVICES=")
    scheduler_options: dict[str, Any] = {"dashboard_address": ":0"}   # a free port, no clash
    kwargs: dict[str, Any] = {}
    if interface:
        kwargs["interface"] = interface
    elif _partition_is_local(queue):
        scheduler_options["host"] = "127.0.0.1"   # the workers find their own address by routing to it
    cluster = SLURMCluster(
        cores=1, processes=1, memory=memory, walltime=walltime, queue=queue, account=account,
        job_name="dlperf-grader",
        job_extra_directives=[f"--gres={gres}"] if gres else [],
        worker_extra_args=["--resources", f"GPU={gpus}"] if gpus else [],
        job_script_prologue=prologue, python=sys.executable, shebang="#!/usr/bin/env bash",
        local_directory=local_directory, log_directory=log_directory,
        scheduler_options=scheduler_options, **kwargs,
    )
    try:
        _test_only(cluster)
        cluster.scale(jobs=n)
        try:
            cluster.wait_for_workers(n, timeout=start_timeout)
        except Exception as exc:   # TimeoutError of distributed, or a job that failed to submit
            job_ids = [str(w.job_id) for w in cluster.workers.values() if getattr(w, "job_id", None)]
            raise RuntimeError(
                f"--slurm: {len(cluster.scheduler_info.get('workers', {}))} of {n} Dask workers connected "
                f"after {start_timeout:.0f} s ({type(exc).__name__}: {exc}).\n"
                f"squeue:\n{_squeue(job_ids)}\n{_log_tails(log_directory, job_ids)}\n"
                f"job script:\n{cluster.job_script()}") from exc
    except BaseException:
        cluster.close()
        raise
    where = f"partition {queue}" if queue else "the default partition"
    per = f", GRES {gres} each" if gres else ", CPU only"
    return cluster, f"{n} Dask workers as Slurm jobs on {where}{per}"


def _test_only(cluster: Any) -> None:
    """``sbatch --test-only`` the worker script: a wrong partition, account or GRES fails here, clearly."""
    with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False) as f:
        f.write(cluster.job_script())
    try:
        out = _run(["sbatch", "--test-only", f.name])
    finally:
        os.unlink(f.name)
    if out.returncode != 0:
        raise RuntimeError(f"--slurm: Slurm refuses the worker job (sbatch --test-only):\n"
                           f"{(out.stderr + out.stdout).strip()}\njob script:\n{cluster.job_script()}")
