"""The class autograder's options: the command line, then the course's ``autograder.toml``, then the defaults.

One home for what ``autograder`` commands share (:mod:`autograder.cli`, and the commands that live in their
own modules: :mod:`autograder.doctor`, :mod:`autograder.sample`): the gradebook's URL, the runner's
settings, the cluster to grade on, the grading options and where their values come from.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

GIB = 2**30


def db_url(args: argparse.Namespace) -> str:
    return args.db_url or f"sqlite:///{Path(args.course).resolve() / 'gradebook.db'}"


def settings(args: argparse.Namespace) -> Any:
    from .runner import Settings

    course_root = Path(args.course).resolve()
    hide = [str(course_root)]
    if args.db_url and args.db_url.startswith("sqlite:///"):
        hide.append(str(Path(args.db_url.removeprefix("sqlite:///")).resolve().parent))
    return Settings(cell_timeout=args.cell_timeout, submission_timeout=args.timeout,
                    memory_bytes=int(args.memory * GIB), processes=args.processes,
                    sandbox=not args.no_sandbox, cpu=args.cpu, hide=tuple(hide), threads=args.threads)


def cluster_choice(args: argparse.Namespace) -> Any:
    from .engine import ClusterChoice

    if args.scheduler:
        return ClusterChoice(kind="address", address=args.scheduler)
    if args.slurm:
        from .slurm import slurm_options

        return ClusterChoice(kind="slurm", workers=args.workers, slurm=slurm_options(args))
    return ClusterChoice(workers=args.workers, cpu_workers=args.cpu_workers)


# Grading options: command line first, then the course's autograder.toml ([grading], [cluster],
# [gradebook]), then these defaults.
DEFAULTS: dict[str, Any] = {
    "workers": None, "cpu": False, "cpu_workers": False, "no_sandbox": False, "scheduler": None, "slurm": False,
    "partition": None, "account": None, "walltime": "01:00:00", "gres": "gpu:1", "job_memory": "16GB",
    "cell_timeout": 120.0, "timeout": 600.0, "memory": 6.0, "processes": 512, "retries": 1, "db_url": None,
    "threads": None,
}
# autograder.toml key -> option
CONFIG_KEYS = {
    "grading": {"cell_timeout": "cell_timeout", "timeout": "timeout", "memory_gib": "memory",
                "processes": "processes", "retries": "retries", "cpu": "cpu", "threads": "threads"},
    "cluster": {"workers": "workers", "scheduler": "scheduler", "partition": "partition", "account": "account",
                "walltime": "walltime", "gres": "gres", "job_memory": "job_memory", "cpu_workers": "cpu_workers"},
    "gradebook": {"db_url": "db_url"},
}


def load_config(course_root: Path) -> dict[str, Any]:
    """Options from ``<course>/autograder.toml`` (see book/cluster.md for a complete example)."""
    path = Path(course_root) / "autograder.toml"
    if not path.is_file():
        return {}
    import tomllib

    data = tomllib.loads(path.read_text())
    options: dict[str, Any] = {}
    for section, keys in CONFIG_KEYS.items():
        table = data.get(section, {})
        unknown = set(table) - set(keys) - ({"kind"} if section == "cluster" else set())
        if unknown:
            raise ValueError(f"{path}: unknown key(s) in [{section}]: {', '.join(sorted(unknown))} "
                             f"(known: {', '.join(sorted(keys))})")
        options.update({keys[k]: v for k, v in table.items() if k in keys})
    kind = data.get("cluster", {}).get("kind", "local")
    if kind not in ("local", "address", "slurm"):
        raise ValueError(f"{path}: [cluster] kind must be local, address or slurm, not {kind!r}")
    if kind == "slurm":
        options["slurm"] = True
    if kind == "address" and not options.get("scheduler"):
        raise ValueError(f"{path}: [cluster] kind = 'address' needs scheduler = 'tcp://host:port'")
    if kind != "address":
        options.pop("scheduler", None) if kind == "local" else None
    return options


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """Fill the options left unset on the command line from autograder.toml, then the defaults."""
    config = load_config(Path(args.course))
    explicit = set()        # set on the command line or in autograder.toml: the course's nbgrader config yields
    for key, default in DEFAULTS.items():
        current = getattr(args, key, None)
        if current is None or (isinstance(default, bool) and not current):
            setattr(args, key, config.get(key, default))
            if key in config:
                explicit.add(key)
        else:
            explicit.add(key)
    args.explicit = explicit
    return args


def apply_course_config(args: argparse.Namespace) -> str | None:
    """The course's own ``nbgrader_config.py`` for ``autograder grade`` (:mod:`autograder.nbconfig`): its
    ``c.Execute.timeout`` and ``execute_retries`` where neither the command line nor autograder.toml set
    them; an error message (nothing to grade) when it asks for what the autograder cannot honour."""
    from .nbconfig import grading_options, refusal_text, refusals

    root = Path(args.course).resolve()
    found = refusals(root)
    if found:
        return refusal_text(root, found)
    applied = []
    for key, value in grading_options(root).items():
        if key in getattr(args, "explicit", set()):
            continue
        if key == "cell_timeout":
            applied.append(f"c.Execute.timeout = {value:g} s per cell" if value else
                           "c.Execute.timeout = None (no limit per cell but the submission's)")
            value = value or args.timeout
        else:
            applied.append(f"c.Execute.execute_retries = {value}")
        setattr(args, key, value)
    if applied:
        print(f"the course's nbgrader_config.py: {'; '.join(applied)}")
    return None


def add_grading_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("where and how to run (also settable in <course>/autograder.toml)")
    g.add_argument("--workers", type=int, help="workers (local default: one per GPU; without GPUs, cores / 2; "
                   "Slurm default 2)")
    g.add_argument("--cpu", action="store_true",
                   help="grade exercises that want a GPU on CPU (for self-checks and CI; marked in every record)")
    g.add_argument("--cpu-workers", action="store_true", help="CPU workers even on a machine with GPUs")
    g.add_argument("--no-sandbox", action="store_true",
                   help="run student code WITHOUT bubblewrap (only if you trust every submission)")
    g.add_argument("--scheduler", metavar="ADDRESS", help="grade on an existing Dask cluster (tcp://host:8786)")
    g.add_argument("--slurm", action="store_true", help="start the Dask workers as Slurm jobs (see --partition ...)")
    g.add_argument("--partition", help="Slurm partition")
    g.add_argument("--account", help="Slurm account")
    g.add_argument("--walltime", help="Slurm walltime of each worker job (default 01:00:00)")
    g.add_argument("--gres", help="Slurm GRES per worker (default gpu:1; '' for CPU workers)")
    g.add_argument("--job-memory", help="Slurm memory per worker job (default 16GB)")
    g.add_argument("--cell-timeout", type=float, help="seconds per cell of the student's notebook (a course's own "
                   "nbgrader_config.py: its c.Execute.timeout, nbgrader's 30 by default; else 120)")
    g.add_argument("--timeout", type=float, help="seconds per submission, its notebooks and hidden checks, from when its sandboxes are ready (600)")
    g.add_argument("--memory", type=float, help="GiB of memory for each sandbox (6)")
    g.add_argument("--processes", type=int, help="processes allowed in each sandbox (512)")
    g.add_argument("--threads", type=int, help="compute threads (OMP_NUM_THREADS) of each sandboxed process "
                   "(default: the worker's share of the cores, halved where the kernel and the checks run at once)")
    g.add_argument("--retries", type=int, help="re-runs of an infrastructure failure (1)")
