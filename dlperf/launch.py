"""Start real process groups from a notebook: N workers, gloo on CPU, NCCL on GPUs.

A notebook cannot hand its own functions to new processes: worker processes
are *spawned* (a fresh interpreter, required for CUDA), and a spawned process
imports the worker function by its module and name, which a function defined
in a notebook's ``__main__`` does not have.  So worker code lives in
importable modules (``dlperf`` itself, or a ``.py`` file a chapter writes), and
:func:`launch` runs it::

    results = launch("mymodule:train", nprocs=4, args=(epochs,))

Each worker gets the same environment ``torchrun`` would give it (``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``), joins the default process group before the function is
called, and leaves it afterwards.  The same worker code therefore also runs
under ``torchrun`` when it calls :func:`init_from_env` (a no-op under
:func:`launch`).  Return values come back to the caller, ordered by rank.

With gloo, each worker gets ``cpu_count // nprocs`` intra-op threads (as
torchrun sets ``OMP_NUM_THREADS``).  Workers share the caller's stdout and
stderr: what they print appears under the notebook cell, so worker code should
return its results rather than print them.

Failures never hang the caller: when a worker raises, its traceback is sent
back and re-raised as :class:`WorkerError`; when it dies without a word
(segfault, ``os._exit``, killed), its exit code is reported; in both cases the
other workers, which may be blocked in a collective waiting for the dead one,
are terminated.  A whole-run ``timeout`` bounds everything else.
"""

from __future__ import annotations

import importlib
import os
import pickle
import queue as queue_module
import socket
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

__all__ = ["WorkerError", "default_backend", "free_port", "init_from_env", "launch"]


class WorkerError(RuntimeError):
    """A worker failed; ``rank``, ``exitcode`` and the worker's ``worker_traceback`` say how."""

    def __init__(self, rank: int, message: str, worker_traceback: str = "", exitcode: int | None = None):
        self.rank = rank
        self.exitcode = exitcode
        self.worker_traceback = worker_traceback
        text = f"worker rank {rank} {message}"
        if worker_traceback:
            text += "\n\n--- traceback in the worker ---\n" + worker_traceback.rstrip()
        super().__init__(text)


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_backend(nprocs: int) -> str:
    """``"nccl"`` when there is one CUDA device per rank and NCCL is built in, else ``"gloo"``."""
    if torch.cuda.is_available() and torch.cuda.device_count() >= nprocs and dist.is_nccl_available():
        return "nccl"
    return "gloo"


def _resolve(target: Callable[..., Any] | str) -> tuple[str, str]:
    """``(module, qualified name)`` of an importable function, or a clear error."""
    if isinstance(target, str):
        module, sep, name = target.partition(":")
        if not sep or not module or not name:
            raise ValueError(f"worker {target!r}: write it as 'module:function'")
        return module, name
    module = getattr(target, "__module__", None)
    name = getattr(target, "__qualname__", None)
    if module is None or name is None:
        raise TypeError(f"{target!r} is not a function that a worker process can import")
    if module == "__main__" or "<locals>" in name or "<lambda>" in name:
        raise TypeError(
            f"{name} is defined in {'the notebook (__main__)' if module == '__main__' else 'a function'}, "
            "so a spawned worker process cannot import it. Put the worker function in a .py module "
            "(for example with %%writefile in a notebook) and pass it as launch('module:function', ...)."
        )
    return module, name


def _import(module: str, name: str) -> Callable[..., Any]:
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def init_from_env(backend: str | None = None, timeout: float = 60.0) -> tuple[int, int, torch.device]:
    """Join the default process group from torchrun's environment variables.

    Returns ``(rank, world_size, device)``; the device is ``cuda:LOCAL_RANK``
    under NCCL, else the CPU.  Under :func:`launch` the group already exists
    and this only reports it, so worker code can call it unconditionally.
    """
    if not dist.is_initialized():
        world = int(os.environ.get("WORLD_SIZE", "1"))
        backend = backend or default_backend(world)
        kwargs: dict[str, Any] = {}
        if backend == "nccl":
            # Bind the rank to its GPU before the group exists, so NCCL knows its device.
            local = torch.device("cuda", int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", "0"))))
            torch.cuda.set_device(local)
            kwargs["device_id"] = local
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout), **kwargs)
    rank, world = dist.get_rank(), dist.get_world_size()
    if dist.get_backend() == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    return rank, world, device


def _worker(rank: int, nprocs: int, module: str, name: str, args: tuple, env: dict[str, str], backend: str,
            pg_timeout: float, results: Any) -> None:
    os.environ.update(env)
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank)})
    if backend == "gloo":
        # Share the cores between the ranks, as torchrun does with OMP_NUM_THREADS:
        # n ranks with all cores each would oversubscribe the machine n times over.
        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    try:
        fn = _import(module, name)
        init_from_env(backend, timeout=pg_timeout)
        value = fn(*args)
        payload = pickle.dumps(value)  # plain pickle: tensors travel as bytes, no shared memory to outlive us
        results.put((rank, "ok", payload))
    except BaseException:  # noqa: BLE001 - everything goes back to the caller
        results.put((rank, "error", traceback.format_exc()))
    finally:
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - the peer may be gone; we are exiting anyway
                pass


def launch(
    target: Callable[..., Any] | str,
    nprocs: int,
    *,
    args: Sequence[Any] = (),
    backend: str | None = None,
    timeout: float = 300.0,
    pg_timeout: float = 60.0,
    env: dict[str, str] | None = None,
    verbose: bool = True,
    start_method: str = "spawn",
) -> list[Any]:
    """Run ``target(*args)`` in ``nprocs`` spawned processes joined by a process group.

    ``target`` is an importable function or ``"module:function"``.  ``backend``
    defaults to :func:`default_backend`.  ``timeout`` bounds the whole run in
    seconds; ``pg_timeout`` is the process group's own timeout for a collective.
    Returns the workers' return values ordered by rank; raises
    :class:`WorkerError` (with the worker's traceback) or :class:`TimeoutError`.

    ``start_method="fork"`` starts the workers as copies of this process
    instead of fresh interpreters: much faster when ``torch`` is already
    imported (no 2-3 s import per worker), CPU and gloo only (CUDA cannot be
    used in a forked child).  The graders use it from their clean child process.
    """
    if start_method not in ("spawn", "fork"):
        raise ValueError(f"start_method must be 'spawn' or 'fork', not {start_method!r}")
    if nprocs < 1:
        raise ValueError(f"nprocs must be at least 1, not {nprocs}")
    module, name = _resolve(target)
    backend = backend or ("gloo" if start_method == "fork" else default_backend(nprocs))
    if start_method == "fork" and backend != "gloo":
        raise ValueError("forked workers cannot use CUDA: use start_method='spawn' with NCCL")
    if backend == "nccl" and torch.cuda.device_count() < nprocs:
        raise ValueError(f"NCCL needs one GPU per rank: {nprocs} ranks, {torch.cuda.device_count()} GPU(s); use gloo")
    worker_env = {
        "WORLD_SIZE": str(nprocs),
        "LOCAL_WORLD_SIZE": str(nprocs),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        **(env or {}),
    }
    if backend == "gloo":
        worker_env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nprocs)))
        if sys.platform.startswith("linux"):
            worker_env.setdefault("GLOO_SOCKET_IFNAME", os.environ.get("GLOO_SOCKET_IFNAME", "lo"))
    if verbose:
        print(f"Launching {nprocs} worker process(es) of {module}:{name} with the {backend} backend")

    ctx = mp.get_context(start_method)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(r, nprocs, module, name, tuple(args), worker_env, backend, pg_timeout, results),
                    daemon=True, name=f"dlperf-worker-{r}")
        for r in range(nprocs)
    ]
    for p in procs:
        p.start()

    values: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(values) < nprocs:
            try:
                rank, status, payload = results.get(timeout=0.1)
            except queue_module.Empty:
                dead = [r for r, p in enumerate(procs) if r not in values and p.exitcode is not None]
                if dead:
                    _drain(results, values, procs)  # it may have reported just before exiting
                    _raise_silent_death(values, procs)
                if time.monotonic() > deadline:
                    missing = sorted(set(range(nprocs)) - set(values))
                    raise TimeoutError(f"workers {missing} did not finish within {timeout:.0f} s")
                continue
            if status == "error":
                # A worker that dies silently makes its peers fail too ("connection closed"):
                # give the dead one a moment to show itself, and report it as the cause.
                time.sleep(1.0)
                _raise_silent_death(values, procs, secondary=(rank, payload))
                raise WorkerError(rank, "raised an exception", worker_traceback=payload)
            values[rank] = pickle.loads(payload)
    finally:
        for p in procs:
            if p.is_alive() and len(values) < nprocs:
                p.terminate()
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
        results.close()
    return [values[r] for r in range(nprocs)]


def _drain(results: Any, values: dict[int, Any], procs: list[Any]) -> None:
    """Collect what is still in the queue (a worker's last report races with its exit)."""
    while True:
        try:
            rank, status, payload = results.get(timeout=0.5)
        except queue_module.Empty:
            return
        if status == "error":
            _raise_silent_death(values, procs, secondary=(rank, payload))
            raise WorkerError(rank, "raised an exception", worker_traceback=payload)
        values[rank] = pickle.loads(payload)


def _raise_silent_death(values: dict[int, Any], procs: list[Any], secondary: tuple[int, str] | None = None) -> None:
    """Raise for the first worker that exited abnormally without reporting, if any."""
    for rank, p in enumerate(procs):
        if rank in values or p.exitcode in (None, 0) or (secondary and secondary[0] == rank):
            continue
        note = f"; rank {secondary[0]} then failed too (its traceback follows)" if secondary else ""
        raise WorkerError(rank, f"died with exit code {p.exitcode} without reporting a result{note}",
                          worker_traceback=secondary[1] if secondary else "", exitcode=p.exitcode)
    for rank, p in enumerate(procs):
        if rank not in values and p.exitcode == 0 and secondary is None:
            raise WorkerError(rank, "exited without reporting a result", exitcode=0)
