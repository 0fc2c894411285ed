"""autograder/hub.py without a hub: the configuration it writes, as JupyterHub and batchspawner read it.

(tests/test_hub.py runs the configuration for real: a hub, Slurm, students in Chromium.)
"""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

from autograder import hub


def _load(config: Path):
    from traitlets.config.loader import PyFileConfigLoader

    pytest.importorskip("batchspawner")          # the configuration imports it (its port handler)
    return PyFileConfigLoader(config.name, path=str(config.parent)).load_config()


def _batch_script(c) -> str:
    """batchspawner's default Slurm script, filled in with the configuration's req_* values."""
    from batchspawner.batchspawner import SlurmSpawner, format_template

    s = c.SlurmSpawner
    subvars = {"homedir": "/home/ada", "keepvars": "PATH", "partition": s.req_partition, "runtime": s.req_runtime,
               "memory": s.req_memory, "gres": s.req_gres, "nprocs": s.req_nprocs, "reservation": "",
               "options": s.req_options, "prologue": "", "epilogue": "", "srun": "srun", "cmd": "CMD"}
    return format_template(SlurmSpawner.batch_script.default_value, **subvars)


def test_the_cli_writes_a_configuration_jupyterhub_loads(tmp_path):
    exchange = tmp_path / "exchange"
    out = subprocess.run([sys.executable, "-m", "autograder.hub", "write", str(tmp_path / "hub"), "--user", "ada",
                          "--user", "bob", "--admin", "teacher", "--exchange", str(exchange), "--partition", "gpu",
                          "--gpus-per-server", "1", "--memory", "8G", "--cpus", "2", "--runtime", "02:00:00",
                          "--sbatch-options=--reservation=class", "--env", "SLURM_CONF=/etc/slurm/x.conf"],
                         capture_output=True, text=True, cwd=hub.REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    folder = tmp_path / "hub"
    c = _load(folder / "jupyterhub_config.py")
    assert c.JupyterHub.spawner_class == "batchspawner.SlurmSpawner"
    assert c.JupyterHub.authenticator_class == "pam"
    assert c.Authenticator.allowed_users == {"ada", "bob", "teacher"} and c.Authenticator.admin_users == {"teacher"}
    assert c.JupyterHub.cleanup_servers is False            # a restarted hub keeps the class's servers
    assert c.SlurmSpawner.batch_submit_cmd.split()[0].startswith("/")   # sudo's secure_path: full paths
    env = c.Spawner.environment
    assert env["SLURM_CONF"] == "/etc/slurm/x.conf" and env["JUPYTER_CONFIG_PATH"] == str(folder / "jupyter")
    script = _batch_script(c)
    for line in ("#SBATCH --partition=gpu", "#SBATCH --time=02:00:00", "#SBATCH --mem=8G", "#SBATCH --gres=gpu:1",
                 "#SBATCH --cpus-per-task=2", "#SBATCH --reservation=class", "srun CMD"):
        assert line in script, script
    token = folder / "api_token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600 and len(token.read_text().strip()) == 64
    assert token.read_text().strip() not in (folder / "jupyterhub_config.py").read_text()
    assert c.JupyterHub.services[0]["api_token"] == token.read_text().strip()
    assert stat.S_IMODE(exchange.stat().st_mode) == 0o777
    nbg = (folder / "jupyter" / "nbgrader_config.py").read_text()
    assert f"c.Exchange.root = {str(exchange)!r}" in nbg and "c.CourseDirectory.course_id = 'dlperf'" in nbg


def test_cpu_servers_ask_for_no_gpu(tmp_path):
    settings = hub.HubSettings(users=["ada"], exchange=str(tmp_path / "x"))
    c = _load(hub.write_hub(tmp_path / "hub", settings))
    script = _batch_script(c)
    assert "--gres" not in script and "#SBATCH --mem=2G" in script


def test_a_second_write_keeps_the_token(tmp_path):
    settings = hub.HubSettings(users=["ada"], exchange=str(tmp_path / "x"))
    hub.write_hub(tmp_path / "hub", settings)
    first = (tmp_path / "hub" / "api_token").read_text()
    hub.write_hub(tmp_path / "hub", hub.HubSettings(users=["ada", "bob"], exchange=str(tmp_path / "x")))
    assert (tmp_path / "hub" / "api_token").read_text() == first


def test_closed_folders_finds_what_students_cannot_enter():
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(dir="/tmp"))      # pytest's own tmp_path is closed to others itself
    try:
        base.chmod(0o755)
        closed = base / "closed"
        (closed / "env" / "bin").mkdir(parents=True)
        closed.chmod(0o700)
        assert hub.closed_folders([closed / "env" / "bin"]) == [closed]
        closed.chmod(0o711)
        assert hub.closed_folders([closed / "env" / "bin"]) == []
    finally:
        shutil.rmtree(base)


def test_jobs_are_submitted_as_the_student():
    prefix = hub.exec_prefix()
    assert "{username}" in prefix
    assert prefix.startswith("sudo -E -u") or prefix.startswith("setpriv --reuid={username}")
