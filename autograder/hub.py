"""The course on a JupyterHub whose single-user servers are Slurm jobs (batchspawner's ``SlurmSpawner``).

:func:`write_hub` writes, into one folder of the hub host, everything a hub for the class
needs besides its packages (``jupyterhub`` 6, ``batchspawner`` 1.3, ``configurable-http-proxy``
from npm):

``jupyterhub_config.py``
    JupyterHub with its own database and cookie secret in the folder; users authenticated by
    PAM (real local accounts: batchspawner submits each server as its user's job, and reads the
    user's home with ``pwd``), only the class's students and instructors allowed; each server
    ``batchspawner.SlurmSpawner``'s default batch script with the resources of
    :class:`HubSettings` (partition, run time, memory, CPUs, ``--gres=gpu:N`` when the servers
    get GPUs, free ``sbatch`` options), started through ``batchspawner-singleuser`` (which tells
    the hub the port the server took), JupyterLab as the default page.  Slurm's commands by
    absolute path (``sudo``'s ``secure_path`` hides them otherwise).
``jupyter/nbgrader_config.py``
    what every single-user server's nbgrader reads (the folder is on the servers'
    ``JUPYTER_CONFIG_PATH``): the course id and the exchange, so that nbgrader's *Assignments*
    tab lists, fetches and submits; ``Validator.validate_all`` so that *Validate* runs the
    self-checks.
``api_token``
    a token for a hub service ``course-admin`` (mode 0600, read by the configuration, never
    written into it): the instructor's scripts and the tests use it with the REST API (list
    servers, stop them).

The hub runs as root, as batchspawner's documentation has it: it submits each user's job
*as that user*, through ``exec_prefix`` (``sudo -E -u <user>`` where sudo is installed, else
util-linux ``setpriv``, which does the same for a root process without sudo).  Servers outlive
a restart of the hub (``JupyterHub.cleanup_servers = False``): students keep their work when
the hub is restarted during a class, and the restarted hub finds their jobs again.

Command line (what ``tests/test_hub.py`` and the instructors' page use)::

    python -m autograder.hub write DIR --user ada --user bob --admin teacher \\
        --exchange /srv/nbgrader/exchange --partition grading --gpus-per-server 1
    cd DIR && jupyterhub -f jupyterhub_config.py
"""

from __future__ import annotations

import argparse
import os
import secrets
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

BINDIR = Path(sys.executable).parent          # this environment: jupyterhub-singleuser, nbgrader, python
REPO = Path(__file__).resolve().parents[1]
PROXY = REPO / ".hub" / "node_modules" / ".bin" / "configurable-http-proxy"   # npm install --prefix .hub
SERVICE = "course-admin"                       # the hub service whose token the instructor's scripts use


@dataclass
class HubSettings:
    """What the hub's configuration says (every field has the command-line option of the same name)."""

    users: list[str]                            # students (local accounts)
    admins: list[str] = field(default_factory=list)   # instructors (local accounts, hub admins)
    course_id: str = "dlperf"
    exchange: str = "/usr/local/share/nbgrader/exchange"   # nbgrader's default; must exist, mode 0777
    ip: str = "127.0.0.1"                       # where the proxy listens for browsers
    port: int = 8000
    hub_ip: str = "127.0.0.1"                   # where the hub's API listens; the servers call it
    hub_port: int = 8081
    proxy_api_port: int = 8001
    partition: str = ""                         # Slurm partition of the servers (default: Slurm's)
    runtime: str = "02:00:00"                   # --time of each server job: the class's length
    memory: str = "2G"                          # --mem of each server job
    cpus: int = 1                               # --cpus-per-task of each server job
    gpus_per_server: int = 0                    # --gres=gpu:N of each server job (0: none)
    sbatch_options: str = ""                    # more #SBATCH options, e.g. --oversubscribe
    server_ip: str = ""                         # the servers' listening address (single node: 127.0.0.1)
    server_args: list[str] = field(default_factory=list)   # more options of jupyterhub-singleuser
    start_timeout: int = 180                    # seconds for a job to start and report its port
    proxy: str = str(PROXY)                     # configurable-http-proxy's command
    env: dict[str, str] = field(default_factory=dict)   # more environment for the servers (SLURM_CONF)


def closed_folders(paths: list[Path] | None = None) -> list[Path]:
    """Folders on the way to this environment's interpreter, its commands and the repository that other
    users cannot enter (no ``o+x``): the students' jobs run as the students and must execute them
    (e.g. ``/root`` when the interpreter is pyenv's under root's home).  Empty: nothing is in the way."""
    if paths is None:
        paths = [Path(sys.executable).resolve(), BINDIR, REPO]
    closed: list[Path] = []
    for path in paths:
        for folder in [*reversed(Path(path).parents), Path(path)]:
            if folder.is_dir() and not folder.stat().st_mode & 0o001 and folder not in closed:
                closed.append(folder)
    return closed


def _which(name: str) -> str:
    return shutil.which(name) or f"/usr/bin/{name}"


def exec_prefix() -> str:
    """How the root hub runs ``sbatch``/``squeue``/``scancel`` as the user whose server it is."""
    if shutil.which("sudo"):
        return "sudo -E -u {username}"          # batchspawner's default
    # setpriv keeps the environment (SLURM_CONF, HOME ...) as sudo -E does; the group from the account
    return "setpriv --reuid={username} --regid=$(id -g {username}) --init-groups"


def gres(settings: HubSettings) -> str:
    """The ``--gres`` of each server job: ``gpu:1`` for one GPU per server; empty for CPU servers.

    >>> gres(HubSettings(users=["ada"], gpus_per_server=1)), gres(HubSettings(users=["ada"]))
    ('gpu:1', '')
    """
    return f"gpu:{settings.gpus_per_server}" if settings.gpus_per_server > 0 else ""


def hub_config(settings: HubSettings, folder: Path) -> str:
    """The text of ``jupyterhub_config.py`` for ``settings``, its state kept in ``folder``."""
    folder = Path(folder).resolve()
    s = settings
    environment = {
        "JUPYTER_CONFIG_PATH": str(folder / "jupyter"),   # the course's nbgrader_config.py
        "PATH": f"{BINDIR}:/usr/local/bin:/usr/bin:/bin",
        **s.env,
    }
    args = ([f"--ServerApp.ip={s.server_ip}"] if s.server_ip else []) + list(s.server_args)
    q = repr
    return f"""\
# JupyterHub for the course {s.course_id}: written by `python -m autograder.hub write` (autograder/hub.py).
import batchspawner  # noqa: F401  adds /hub/api/batchspawner, where each job reports its port

c = get_config()  # noqa: F821

# The hub: its state in this folder; browsers come through the proxy.
c.JupyterHub.bind_url = {q(f"http://{s.ip}:{s.port}")}
c.JupyterHub.hub_bind_url = {q(f"http://{s.hub_ip}:{s.hub_port}")}
c.JupyterHub.db_url = {q(f"sqlite:///{folder / 'jupyterhub.sqlite'}")}
c.JupyterHub.cookie_secret_file = {q(str(folder / 'jupyterhub_cookie_secret'))}
c.JupyterHub.pid_file = {q(str(folder / 'jupyterhub.pid'))}
c.ConfigurableHTTPProxy.command = [{q(s.proxy)}]
c.ConfigurableHTTPProxy.api_url = {q(f"http://127.0.0.1:{s.proxy_api_port}")}
c.ConfigurableHTTPProxy.pid_file = {q(str(folder / 'proxy.pid'))}
# Servers outlive a restart of the hub (students keep their kernels); stop them through the API.
c.JupyterHub.cleanup_servers = False
c.JupyterHub.cleanup_proxy = True

# Who: local accounts, checked by PAM; the class's students and its instructors (hub admins).
c.JupyterHub.authenticator_class = "pam"
c.PAMAuthenticator.open_sessions = False
c.Authenticator.allowed_users = {q(set(s.users) | set(s.admins))}
c.Authenticator.admin_users = {q(set(s.admins))}

# The instructor's scripts: a service token (read from a 0600 file) that may list and stop servers.
with open({q(str(folder / 'api_token'))}) as f:
    c.JupyterHub.services = [{{"name": {q(SERVICE)}, "api_token": f.read().strip()}}]
c.JupyterHub.load_roles = [{{"name": "course-admin", "services": [{q(SERVICE)}],
                            "scopes": ["list:users", "read:users", "admin:servers", "read:servers"]}}]

# Each student's server: a Slurm job (batchspawner's default batch script) running JupyterLab.
c.JupyterHub.spawner_class = "batchspawner.SlurmSpawner"
c.SlurmSpawner.exec_prefix = {q(exec_prefix())}
c.SlurmSpawner.batch_submit_cmd = {q(_which("sbatch") + " --parsable")}
c.SlurmSpawner.batch_query_cmd = {q(_which("squeue") + " -h -j {job_id} -o '%T %B'")}
c.SlurmSpawner.batch_cancel_cmd = {q(_which("scancel") + " {job_id}")}
c.SlurmSpawner.req_partition = {q(s.partition)}
c.SlurmSpawner.req_runtime = {q(s.runtime)}
c.SlurmSpawner.req_memory = {q(s.memory)}
c.SlurmSpawner.req_nprocs = {q(str(s.cpus))}
c.SlurmSpawner.req_gres = {q(gres(s))}
c.SlurmSpawner.req_options = {q(s.sbatch_options)}
c.SlurmSpawner.batchspawner_singleuser_cmd = {q(str(BINDIR / 'batchspawner-singleuser'))}
c.Spawner.cmd = [{q(str(BINDIR / 'jupyterhub-singleuser'))}]
c.Spawner.args = {q(args)}
c.Spawner.default_url = "/lab"
c.Spawner.environment = {q(environment)}
c.Spawner.start_timeout = {s.start_timeout}
c.Spawner.http_timeout = {s.start_timeout}
c.SlurmSpawner.startup_poll_interval = 0.5
"""


def nbgrader_config(settings: HubSettings) -> str:
    """What every single-user server's nbgrader reads: the course and its exchange."""
    return f"""\
# nbgrader in the students' servers: written by `python -m autograder.hub write`.
c = get_config()  # noqa: F821
c.CourseDirectory.course_id = {settings.course_id!r}
c.Exchange.root = {settings.exchange!r}
# Validate runs every cell, the self-checks included (by default only graded cells, which hold none).
c.Validator.validate_all = True
"""


def write_hub(folder: Path, settings: HubSettings) -> Path:
    """Write the hub's folder (configuration, the servers' nbgrader configuration, a fresh service
    token if there is none); create the exchange (mode 0777, as nbgrader requires). Returns the
    configuration file."""
    folder = Path(folder).resolve()
    (folder / "jupyter").mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)                             # the servers read jupyter/ as their users
    token = folder / "api_token"
    if not token.exists():
        token.touch(0o600)
        token.write_text(secrets.token_hex(32) + "\n")
    exchange = Path(settings.exchange)
    exchange.mkdir(parents=True, exist_ok=True)
    exchange.chmod(0o777)
    (folder / "jupyter" / "nbgrader_config.py").write_text(nbgrader_config(settings))
    config = folder / "jupyterhub_config.py"
    config.write_text(hub_config(settings, folder))
    return config


def main(argv: list[str] | None = None) -> int:
    d = HubSettings(users=[])
    p = argparse.ArgumentParser(prog="python -m autograder.hub", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="action", required=True)
    w = sub.add_parser("write", help="write DIR/jupyterhub_config.py and the servers' nbgrader configuration")
    w.add_argument("folder", type=Path)
    w.add_argument("--user", action="append", default=[], help="a student's local account (repeat)")
    w.add_argument("--admin", action="append", default=[], help="an instructor's local account (repeat)")
    for name in ("course_id", "exchange", "ip", "hub_ip", "partition", "runtime", "memory", "sbatch_options",
                 "server_ip", "proxy"):
        w.add_argument("--" + name.replace("_", "-"), default=getattr(d, name))
    for name in ("port", "hub_port", "proxy_api_port", "cpus", "gpus_per_server", "start_timeout"):
        w.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(d, name))
    w.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="environment of the servers' jobs (repeat), e.g. SLURM_CONF=/etc/slurm/slurm.conf")
    a = p.parse_args(argv)
    env = dict(item.split("=", 1) for item in a.env)
    if "SLURM_CONF" in os.environ:
        env.setdefault("SLURM_CONF", os.environ["SLURM_CONF"])
    fields = {k: v for k, v in vars(a).items() if k in HubSettings.__dataclass_fields__}
    settings = HubSettings(**{**fields, "users": a.user, "admins": a.admin, "env": env})
    config = write_hub(a.folder, settings)
    for folder in closed_folders():
        print(f"warning: other users cannot enter {folder}; the students' servers cannot run this "
              f"environment's Python (chmod o+x {folder}, or install the environment elsewhere)", file=sys.stderr)
    print(f"wrote {config}\nstart the hub (as root):  cd {shlex.quote(str(config.parent))} && "
          f"{BINDIR / 'jupyterhub'} -f jupyterhub_config.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
