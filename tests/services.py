"""Real services for the cluster tests: a one-node Slurm with fake GPUs, and a private PostgreSQL.

Both live entirely in a directory of their own (configuration, state, sockets,
logs, pid files); nothing under /etc is written and no system service is
started or stopped.  Starting is idempotent (a service already up in that
directory is reused), stopping kills exactly the processes that were started
(by their pid files, then every process still carrying the directory's marker
in its environment) and removes the directory.

For humans::

    python tests/services.py up [slurm|postgres]      # default both; prints what to export
    python tests/services.py down [slurm|postgres]
    python tests/services.py status

(directories ``/tmp/dlperf-services/slurm`` and ``/tmp/dlperf-services/postgres``;
``DLPERF_SERVICES_DIR`` moves them).  The pytest fixtures in ``tests/test_slurm.py``
use fresh temporary directories instead, so they never meet a human's services.

Slurm
    Debian's ``slurm-wlm`` and ``munge`` (installed with apt-get when missing and
    we are root).  A private munged (own key and socket, ``AuthInfo=socket=``),
    slurmctld and slurmd on 127.0.0.1 with free ports, one node ``localhost``
    (all of this machine's CPUs, 90 % of its memory, ``Gres=gpu:2`` backed by
    ``/dev/loop0`` and ``/dev/loop1``: Slurm only hands out indices, so a job
    with ``--gres=gpu:1`` gets ``CUDA_VISIBLE_DEVICES=0`` or ``1``), partition
    ``grading`` (default).  CPUs and GPUs are consumable, memory is not
    (``CR_CPU``: ``--mem`` is only checked against the node, so two 16 GB workers
    fit on a small machine).  Commands find it through ``SLURM_CONF``.
PostgreSQL
    Debian's ``postgresql`` server binaries (apt-get when missing); ``initdb``
    and ``postgres`` run as the ``postgres`` user (they refuse root), listening
    on 127.0.0.1 at a free port with the unix socket in the private directory;
    database ``gradebook`` owned by user ``grader`` with a random password; the
    SQLAlchemy URL uses psycopg2 (``psycopg2-binary`` is pip-installed into the
    running interpreter's environment when missing).
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

DEFAULT_DIR = Path(os.environ.get("DLPERF_SERVICES_DIR", "/tmp/dlperf-services"))
MARKER = "DLPERF_SERVICE_DIR"     # put into every daemon's environment: how "ours" is recognised
STATE = "service.json"


class ServiceUnavailable(RuntimeError):
    """The service cannot be started on this machine (not root, no apt, ...): the reason, for a skip."""


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def _log(msg: str) -> None:
    print(f"[services] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def leftover_processes(root: Path) -> dict[int, str]:
    """Live processes started for the services in ``root``: pid -> command line.

    A process is ours when its environment carries ``DLPERF_SERVICE_DIR=root``
    (set for every daemon we start, inherited by what they fork: slurmstepd),
    or ``SLURM_CONF`` pointing into ``root`` (Slurm jobs), or its working
    directory is inside ``root`` (postgres backends, which overwrite their
    environment area with their process titles).
    """
    root = str(Path(root))
    found = {}
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        pid = int(entry.name)
        env = _environ(pid)
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = ""
        if (env.get(MARKER) == root or env.get("SLURM_CONF", "").startswith(root + "/")
                or cwd == root or cwd.startswith(root + "/")) and _alive(pid):
            found[pid] = _cmdline(pid)
    return found


def _reap(pid: int) -> None:
    """Collect ``pid``'s exit status when it is our child (no zombie left behind)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _stop_pid(pid: int, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
    _reap(pid)
    if not _alive(pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(pid)
        if not _alive(pid):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _spawn(cmd: list[str], root: Path, log: Path, env: dict[str, str] | None = None,
           user: str | None = None) -> subprocess.Popen:
    """Start a daemon in the foreground mode of its own session, marked as ours, output to ``log``."""
    full_env = {**os.environ, **(env or {}), MARKER: str(root)}
    with open(log, "ab") as out:
        kwargs = {}
        if user:
            kwargs = {"user": user, "group": pwd.getpwnam(user).pw_gid, "extra_groups": []}
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                env=full_env, start_new_session=True, cwd=root, **kwargs)


def ensure_packages(binaries: dict[str, str], packages: list[str]) -> float:
    """Make sure every binary exists (name -> path or name), installing ``packages`` with apt-get.

    Returns the seconds spent installing (0 when nothing was missing); raises
    :class:`ServiceUnavailable` with the reason when it cannot install.
    """
    missing = [b for b, path in binaries.items() if not (Path(path).exists() or shutil.which(path))]
    if not missing:
        return 0.0
    if os.geteuid() != 0:
        raise ServiceUnavailable(f"{', '.join(missing)} missing and not root: cannot apt-get install "
                                 f"{' '.join(packages)}")
    apt = shutil.which("apt-get")
    if not apt:
        raise ServiceUnavailable(f"{', '.join(missing)} missing and no apt-get to install {' '.join(packages)}")
    t0 = time.monotonic()
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = [apt, "install", "-y", "-q", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=180", *packages]
    _log(f"installing {' '.join(packages)} with apt-get (a one-off, ~25 s)")
    out = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env)
    if out.returncode != 0:                   # stale package lists: update once, try again
        subprocess.run([apt, "update", "-q"], check=False, capture_output=True, text=True, env=env)
        out = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise ServiceUnavailable(f"apt-get install {' '.join(packages)} failed:\n{out.stdout[-1500:]}"
                                 f"{out.stderr[-1500:]}")
    still = [b for b, path in binaries.items() if not (Path(path).exists() or shutil.which(path))]
    if still:
        raise ServiceUnavailable(f"installed {' '.join(packages)} but {', '.join(still)} still missing")
    return time.monotonic() - t0


def _wait(check, timeout: float, what: str, logs: list[Path], procs: list[subprocess.Popen] = ()) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{what}: {p.args[0]} exited with {p.returncode}\n{_tails(logs)}")
        time.sleep(0.2)
    raise RuntimeError(f"{what}: not ready after {timeout:.0f} s\n{_tails(logs)}")


def _tails(logs: list[Path], n: int = 2000) -> str:
    parts = []
    for log in logs:
        with contextlib.suppress(OSError):
            parts.append(f"--- {log} ---\n{log.read_text(errors='replace')[-n:]}")
    return "\n".join(parts)


def _read_state(root: Path) -> dict | None:
    try:
        return json.loads((root / STATE).read_text())
    except (OSError, ValueError):
        return None


def _stop_root(root: Path, pids: dict[str, int], order: list[str]) -> None:
    ours = leftover_processes(root)           # a pid from the state file may since belong to someone else
    for name in order:
        if name in pids and (pids[name] in ours or not _alive(pids[name])):
            _stop_pid(pids[name])
    for pid in leftover_processes(root):       # whatever they forked that is still there
        _stop_pid(pid, timeout=5)
    shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Slurm
# ---------------------------------------------------------------------------------------------

SLURM_BINARIES = {"munged": "/usr/sbin/munged", "slurmctld": "/usr/sbin/slurmctld", "slurmd": "/usr/sbin/slurmd",
                  "sbatch": "sbatch", "sinfo": "sinfo"}
SLURM_ORDER = ["slurmd", "slurmctld", "munged"]      # stop order


@dataclass
class Slurm:
    root: str
    conf: str                       # export SLURM_CONF=conf for sbatch, squeue, dask-jobqueue
    partition: str
    node: str
    gpus: int
    cpus: int
    pids: dict[str, int] = field(default_factory=dict)
    install_seconds: float = 0.0
    start_seconds: float = 0.0

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": self.conf}

    def run(self, *cmd: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(list(cmd), check=False, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **self.env})


def _memory_mib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return 1024


def _hardware() -> dict[str, str]:
    """This machine as slurmd sees it (``slurmd -C``: CPUs, sockets, cores, threads, RealMemory)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["/usr/sbin/slurmd", "-C"], check=False, capture_output=True, text=True, timeout=20).stdout
        return dict(item.split("=", 1) for item in out.split() if "=" in item)
    return {}


def _fake_gpu_files(n: int) -> list[str]:
    """``/dev/loop0`` ... : existing device files Slurm can name as GPUs (created with mknod when absent)."""
    files = []
    for i in range(n):
        path = Path(f"/dev/loop{i}")
        if not path.exists():
            os.mknod(path, 0o660 | 0o060000, os.makedev(7, i))   # block device, loop major 7
        files.append(str(path))
    return files


def slurm_up(root: Path | str = DEFAULT_DIR / "slurm", partition: str = "grading", gpus: int = 2,
             timeout: float = 90, oversubscribe: int = 0) -> Slurm:
    """A one-node Slurm in ``root`` (reused when already up there), ready when ``sinfo`` says idle.
    ``oversubscribe=N``: N jobs share a CPU (a class's servers and graders on 2 cores), ``root`` mode 0711
    so that other local users (a hub's students) reach Slurm; GPUs and the munge key are never shared."""
    root = Path(root)
    state = _read_state(root)
    if state and all(_alive(p) for p in state["pids"].values()):
        return Slurm(**state)
    if state or root.exists():
        slurm_down(root)
    if os.geteuid() != 0:
        raise ServiceUnavailable("a private slurmd must run as root (it starts jobs as their users)")
    install = ensure_packages(SLURM_BINARIES, ["slurm-wlm", "munge"])
    t0 = time.monotonic()
    for sub in ("etc", "munge", "state", "spool", "log", "run"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    root.chmod(0o711 if oversubscribe else 0o700)   # 0711: other local users (students) reach Slurm
    (root / "munge").chmod(0o755)        # munged wants its socket directory searchable by all
    key = root / "munge" / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o600)
    sock = root / "munge" / "munge.socket"
    logs = [root / "log" / n for n in ("munged.log", "slurmctld.log", "slurmd.log")]
    hw = _hardware()
    cpus = int(hw.get("CPUs", os.cpu_count() or 1))
    memory = max(512, int(int(hw.get("RealMemory", _memory_mib())) * 0.9))   # room for the rest of the machine
    layout = " ".join(f"{k}={hw[k]}" for k in ("Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore")
                      if k in hw)
    files = _fake_gpu_files(gpus)
    ctld_port = free_port()
    slurmd_port = free_port()
    while slurmd_port == ctld_port:
        slurmd_port = free_port()
    host = socket.gethostname().split(".")[0]
    conf = root / "etc" / "slurm.conf"
    share = f" OverSubscribe=FORCE:{oversubscribe}" if oversubscribe else ""
    conf.write_text(f"""\
# written by tests/services.py: a private one-node Slurm (fake GPUs)
ClusterName=dlperf
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd.pid
SlurmctldLogFile={logs[1]}
SlurmdLogFile={logs[2]}
PlugStackConfig={root}/etc/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
MinJobAge=30
GresTypes=gpu
NodeName=localhost NodeAddr=127.0.0.1 NodeHostname=localhost CPUs={cpus} {layout} RealMemory={memory} Gres=gpu:{gpus} State=UNKNOWN
PartitionName={partition} Nodes=localhost Default=YES MaxTime=INFINITE State=UP{share}
""")
    (root / "etc" / "gres.conf").write_text(
        "AutoDetect=off\n" + "".join(f"NodeName=localhost Name=gpu File={f}\n" for f in files))
    (root / "etc" / "plugstack.conf").write_text("")
    env = {"SLURM_CONF": str(conf)}
    pids: dict[str, int] = {}
    procs = []
    try:
        p = _spawn(["/usr/sbin/munged", "-F", "--force", f"--socket={sock}", f"--key-file={key}",
                    f"--pid-file={root}/munge/munged.pid", f"--log-file={logs[0]}",
                    f"--seed-file={root}/munge/munged.seed"], root, root / "log" / "munged.out", env)
        pids["munged"] = p.pid
        procs.append(p)
        _wait(sock.exists, 20, "munged", logs, procs)
        p = _spawn(["/usr/sbin/slurmctld", "-D", "-i", "-f", str(conf)], root, root / "log" / "slurmctld.out", env)
        pids["slurmctld"] = p.pid
        procs.append(p)
        p = _spawn(["/usr/sbin/slurmd", "-D", "-N", "localhost", "-f", str(conf)], root,
                   root / "log" / "slurmd.out", env)
        pids["slurmd"] = p.pid
        procs.append(p)
        slurm = Slurm(root=str(root), conf=str(conf), partition=partition, node="localhost", gpus=gpus, cpus=cpus,
                      pids=pids, install_seconds=install)
        (root / STATE).write_text(json.dumps(asdict(slurm)))

        def idle() -> bool:
            out = slurm.run("sinfo", "-h", "-N", "-o", "%T", timeout=10)
            return out.returncode == 0 and out.stdout.strip() == "idle"

        _wait(idle, timeout, "slurm (sinfo: node idle)", logs, procs)
    except BaseException:
        _stop_root(root, pids, SLURM_ORDER)
        raise
    slurm.start_seconds = time.monotonic() - t0
    (root / STATE).write_text(json.dumps(asdict(slurm)))
    return slurm


def slurm_down(root: Path | str = DEFAULT_DIR / "slurm") -> None:
    """Cancel our jobs, stop our slurmd, slurmctld and munged, remove ``root``."""
    root = Path(root)
    state = _read_state(root)
    pids = state["pids"] if state else {}
    conf = root / "etc" / "slurm.conf"
    if conf.exists() and pids.get("slurmctld") and _alive(pids["slurmctld"]):
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            subprocess.run(["scancel", "--full", "--quiet", "--partition", state["partition"]],
                           env={**os.environ, "SLURM_CONF": str(conf)}, check=False, capture_output=True, timeout=15)
    _stop_root(root, pids, SLURM_ORDER)


# ---------------------------------------------------------------------------------------------
# PostgreSQL
# ---------------------------------------------------------------------------------------------


def _pg_bindir() -> Path:
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (candidate / "postgres").exists() and (candidate / "initdb").exists():
            return candidate
    found = shutil.which("postgres")
    return Path(found).resolve().parent if found else Path("/usr/lib/postgresql/missing/bin")


@dataclass
class Postgres:
    root: str
    url: str                        # postgresql+psycopg2://grader:pw@127.0.0.1:PORT/gradebook
    port: int
    user: str
    password: str
    database: str
    pids: dict[str, int] = field(default_factory=dict)
    install_seconds: float = 0.0
    start_seconds: float = 0.0


def ensure_psycopg2() -> None:
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        _log(f"installing psycopg2-binary into {sys.prefix}")
        out = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "psycopg2-binary"],
                             check=False, capture_output=True, text=True)
        if out.returncode != 0:
            raise ServiceUnavailable(f"psycopg2 missing and pip install psycopg2-binary failed:\n{out.stderr[-1500:]}")


def postgres_up(root: Path | str = DEFAULT_DIR / "postgres", database: str = "gradebook", user: str = "grader",
                timeout: float = 60) -> Postgres:
    """A private PostgreSQL in ``root`` (reused when already up there) with ``database`` owned by ``user``."""
    root = Path(root)
    state = _read_state(root)
    if state and all(_alive(p) for p in state["pids"].values()):
        return Postgres(**state)
    if state or root.exists():
        postgres_down(root)
    install = 0.0
    if not ((_pg_bindir() / "postgres").exists() and (_pg_bindir() / "initdb").exists()):
        install = ensure_packages({"postgres": str(_pg_bindir() / "postgres")}, ["postgresql"])
    bindir = _pg_bindir()
    ensure_psycopg2()
    t0 = time.monotonic()
    run_as = None
    if os.geteuid() == 0:           # initdb and postgres refuse root
        try:
            run_as = pwd.getpwnam("postgres").pw_name
        except KeyError as exc:
            raise ServiceUnavailable("running as root and there is no 'postgres' user to run the server") from exc
    data, sockdir, logdir = root / "data", root / "socket", root / "log"
    for d in (root, sockdir, logdir):
        d.mkdir(parents=True, exist_ok=True)
    if run_as:
        ent = pwd.getpwnam(run_as)
        for d in (root, sockdir, logdir):
            os.chown(d, ent.pw_uid, ent.pw_gid)
    root.chmod(0o700)
    password = secrets.token_hex(12)
    port = free_port()
    logs = [logdir / "initdb.log", logdir / "postgres.log"]
    pids: dict[str, int] = {}

    def as_user(cmd: list[str], log: Path, timeout: float = 120) -> None:
        p = _spawn(cmd, root, log, {"LC_ALL": "C.UTF-8"}, user=run_as)
        try:
            if p.wait(timeout) != 0:
                raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode})\n{_tails([log])}")
        except subprocess.TimeoutExpired:
            p.kill()
            raise

    try:
        as_user([str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "--auth-host=scram-sha-256",
                 "-E", "UTF8", "--no-sync"], logs[0])
        # local socket connections trust (only the postgres user can reach the 0700 socket dir),
        # TCP on loopback needs the password
        (data / "pg_hba.conf").write_text("local all all trust\n"
                                          "host all all 127.0.0.1/32 scram-sha-256\n")
        p = _spawn([str(bindir / "postgres"), "-D", str(data), "-h", "127.0.0.1", "-p", str(port),
                    "-k", str(sockdir), "-c", "fsync=off", "-c", "synchronous_commit=off",
                    "-c", "full_page_writes=off", "-c", "shared_buffers=32MB", "-c", "max_connections=50"],
                   root, logs[1], {"LC_ALL": "C.UTF-8"}, user=run_as)
        pids["postgres"] = p.pid
        pg = Postgres(root=str(root), url=f"postgresql+psycopg2://{user}:{password}@127.0.0.1:{port}/{database}",
                      port=port, user=user, password=password, database=database, pids=pids, install_seconds=install)
        (root / STATE).write_text(json.dumps(asdict(pg)))

        def ready() -> bool:
            return subprocess.run([str(bindir / "pg_isready"), "-q", "-h", str(sockdir), "-p", str(port)],
                                  check=False, capture_output=True).returncode == 0

        _wait(ready, timeout, "postgres", logs, [p])
        psql = [str(bindir / "psql"), "-q", "-v", "ON_ERROR_STOP=1", "-h", str(sockdir), "-p", str(port),
                "-U", "postgres", "-d", "postgres", "-c"]
        as_user([*psql, f"CREATE ROLE {user} LOGIN PASSWORD '{password}'"], logdir / "psql.log")
        as_user([*psql, f"CREATE DATABASE {database} OWNER {user}"], logdir / "psql.log")
    except BaseException:
        _stop_root(root, pids, ["postgres"])
        raise
    pg.start_seconds = time.monotonic() - t0
    (root / STATE).write_text(json.dumps(asdict(pg)))
    return pg


def postgres_down(root: Path | str = DEFAULT_DIR / "postgres") -> None:
    """``pg_ctl stop -m fast`` on our cluster, then make sure its processes are gone; remove ``root``."""
    root = Path(root)
    state = _read_state(root)
    pids = state["pids"] if state else {}
    data = root / "data"
    if pids.get("postgres") and _alive(pids["postgres"]) and data.exists():
        run_as = "postgres" if os.geteuid() == 0 else None
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            p = _spawn([str(_pg_bindir() / "pg_ctl"), "stop", "-D", str(data), "-m", "fast", "-w", "-t", "20"],
                       root, root / "log" / "pg_ctl.log", user=run_as)
            p.wait(30)
    _stop_root(root, pids, ["postgres"])


# ---------------------------------------------------------------------------------------------
# Context managers (what the pytest fixtures use) and the command line
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def slurm_service(root: Path | str, **kwargs) -> Iterator[Slurm]:
    try:
        yield slurm_up(root, **kwargs)
    finally:
        slurm_down(root)


@contextlib.contextmanager
def postgres_service(root: Path | str, **kwargs) -> Iterator[Postgres]:
    try:
        yield postgres_up(root, **kwargs)
    finally:
        postgres_down(root)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument("service", nargs="?", choices=["slurm", "postgres", "all"], default="all")
    parser.add_argument("--dir", default=str(DEFAULT_DIR), help=f"where the services live (default {DEFAULT_DIR})")
    args = parser.parse_args(argv)
    base = Path(args.dir)
    names = ["slurm", "postgres"] if args.service == "all" else [args.service]
    try:
        for name in names:
            root = base / name
            if args.action == "up":
                if name == "slurm":
                    s = slurm_up(root)
                    print(f"slurm: up in {s.start_seconds:.1f} s (install {s.install_seconds:.1f} s), "
                          f"partition {s.partition}, {s.cpus} CPUs, gpu:{s.gpus}\n  export SLURM_CONF={s.conf}")
                else:
                    p = postgres_up(root)
                    print(f"postgres: up in {p.start_seconds:.1f} s (install {p.install_seconds:.1f} s)\n"
                          f"  {p.url}")
            elif args.action == "down":
                (slurm_down if name == "slurm" else postgres_down)(root)
                print(f"{name}: down")
            else:
                state = _read_state(root)
                live = {k: v for k, v in (state or {}).get("pids", {}).items() if _alive(v)}
                print(f"{name}: {'up ' + str(live) if state and live else 'down'}")
    except ServiceUnavailable as exc:
        print(f"unavailable: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
