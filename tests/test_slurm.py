"""The autograder against real services: Dask workers as Slurm jobs (fake GPUs), a PostgreSQL gradebook.

The services (tests/services.py) are started once per session in private
directories and stopped at the end; the fixtures' teardown checks that none of
their processes remain.  Skipped, with the reason, only where they cannot be
started (not root, no apt-get).  ``python tests/services.py up`` starts the
same services for a human.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import services  # tests/services.py, next to this file

pytestmark = pytest.mark.cluster


def _say(config: pytest.Config, msg: str) -> None:
    """A line on the terminal even under output capture (timings)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        print(f"[cluster] {msg}")
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(f"[cluster] {msg}")


def _assert_gone(root: Path, pids: dict[str, int]) -> None:
    still = {name: pid for name, pid in pids.items() if services._alive(pid)}
    left = services.leftover_processes(root)
    assert not still and not left, f"left running after stop: {still} {left}"
    assert not root.exists(), f"{root} not removed"


@pytest.fixture(scope="session")
def slurm(pytestconfig: pytest.Config) -> Iterator[services.Slurm]:
    """A one-node Slurm (partition ``grading``, gpu:2 fake GPUs); ``SLURM_CONF`` exported for the session."""
    root = Path(tempfile.mkdtemp(prefix="dlperf-slurm-", dir="/tmp"))
    t0 = time.monotonic()
    try:
        cluster = services.slurm_up(root)
    except services.ServiceUnavailable as exc:
        services.slurm_down(root)
        pytest.skip(f"no Slurm here: {exc}")
    _say(pytestconfig, f"slurm up in {time.monotonic() - t0:.1f} s (apt install {cluster.install_seconds:.1f} s, "
                       f"daemons {cluster.start_seconds:.1f} s)")
    saved = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = cluster.conf
    try:
        yield cluster
    finally:
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved
        t0 = time.monotonic()
        services.slurm_down(root)
        _say(pytestconfig, f"slurm down in {time.monotonic() - t0:.1f} s")
        _assert_gone(root, cluster.pids)


@pytest.fixture(scope="session")
def postgres(pytestconfig: pytest.Config) -> Iterator[services.Postgres]:
    """A private PostgreSQL with a ``gradebook`` database; ``.url`` is its SQLAlchemy URL."""
    root = Path(tempfile.mkdtemp(prefix="dlperf-pg-", dir="/tmp"))
    t0 = time.monotonic()
    try:
        pg = services.postgres_up(root)
    except services.ServiceUnavailable as exc:
        services.postgres_down(root)
        pytest.skip(f"no PostgreSQL here: {exc}")
    _say(pytestconfig, f"postgres up in {time.monotonic() - t0:.1f} s (apt install {pg.install_seconds:.1f} s)")
    try:
        yield pg
    finally:
        services.postgres_down(root)
        _assert_gone(root, pg.pids)


# ---------------------------------------------------------------------------------------------
# autograder.slurm without Slurm
# ---------------------------------------------------------------------------------------------


def test_slurm_options_from_the_command_line():
    from autograder.slurm import gpu_count, slurm_options

    args = argparse.Namespace(partition="grading", account=None, walltime="00:30:00", gres="gpu:1", job_memory="8GB")
    assert slurm_options(args) == {"queue": "grading", "walltime": "00:30:00", "memory": "8GB", "gres": "gpu:1"}
    args = argparse.Namespace(partition=None, account="course", walltime="01:00:00", gres="", job_memory="16GB")
    assert slurm_options(args) == {"account": "course", "walltime": "01:00:00", "memory": "16GB"}   # CPU workers
    assert [gpu_count(g) for g in ("gpu:1", "gpu:a100:2", "gpu", "", "shard:2")] == [1, 2, 1, 0, 0]


# ---------------------------------------------------------------------------------------------
# Slurm
# ---------------------------------------------------------------------------------------------


def _squeue(slurm: services.Slurm) -> list[str]:
    return slurm.run("squeue", "-h", "-o", "%i %T").stdout.split("\n")


def _wait_no_jobs(slurm: services.Slurm, timeout: float = 30) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        jobs = [line for line in _squeue(slurm) if line.strip()]
        if not jobs or time.monotonic() > deadline:
            return jobs
        time.sleep(0.5)


def test_slurm_workers_each_get_their_own_gpu(slurm, pytestconfig):
    from autograder.engine import ClusterChoice, connect

    def job_env():        # defined here so that it travels by value (the workers cannot import this module)
        import os

        import autograder  # noqa: F401  (the workers can import the package)

        return os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("SLURM_JOB_ID")

    choice = ClusterChoice(kind="slurm", workers=2, slurm={
        "queue": slurm.partition, "walltime": "00:10:00", "memory": "1GB", "gres": "gpu:1", "start_timeout": 120,
        "log_directory": f"{slurm.root}/jobs"})
    t0 = time.monotonic()
    with connect(choice) as (client, what):
        _say(pytestconfig, f"2 Slurm GPU workers connected in {time.monotonic() - t0:.1f} s")
        assert what == "2 Dask workers as Slurm jobs on partition grading, GRES gpu:1 each"
        workers = client.scheduler_info()["workers"]
        assert len(workers) == 2
        assert all(w["resources"] == {"GPU": 1} for w in workers.values())
        futures = [client.submit(job_env, workers=[addr], allow_other_workers=False, resources={"GPU": 1}, pure=False)
                   for addr in workers]
        results = client.gather(futures)
    gpus = sorted(r[0] for r in results)
    job_ids = {r[1] for r in results}
    assert gpus == ["0", "1"], results
    assert len(job_ids) == 2 and None not in job_ids, results
    assert _wait_no_jobs(slurm) == [], "worker jobs not cancelled when the cluster closed"
    _say(pytestconfig, f"GPU workers: {time.monotonic() - t0:.1f} s in all")


def test_slurm_cpu_workers_see_no_gpu(slurm):
    from autograder.engine import ClusterChoice, connect

    def job_env():
        import os

        return os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("SLURM_JOB_ID")

    choice = ClusterChoice(kind="slurm", workers=1, slurm={"queue": slurm.partition, "walltime": "00:10:00",
                                                           "memory": "1GB", "start_timeout": 120,
                                                           "log_directory": f"{slurm.root}/jobs"})
    with connect(choice) as (client, what):
        assert what == "1 Dask workers as Slurm jobs on partition grading, CPU only"
        (info,) = client.scheduler_info()["workers"].values()
        assert not info["resources"]
        cvd, job_id = client.submit(job_env, pure=False).result()
    assert cvd == "" and job_id
    assert _wait_no_jobs(slurm) == []


def test_slurm_refusal_is_clear(slurm):
    from autograder.engine import ClusterChoice
    from autograder.slurm import slurm_cluster

    choice = ClusterChoice(kind="slurm", workers=1, slurm={"queue": "no-such-partition", "gres": "gpu:1",
                                                           "memory": "1GB", "start_timeout": 30,
                                                           "log_directory": f"{slurm.root}/jobs"})
    with pytest.raises(RuntimeError, match="(?s)Slurm refuses the worker job.*no-such-partition|invalid partition"):
        slurm_cluster(choice)
    assert _wait_no_jobs(slurm, timeout=0) == []


def test_slurm_workers_that_do_not_come_are_explained(slurm):
    """Both GPUs held by other jobs: the worker job pends, the timeout names it with squeue's reason."""
    from autograder.engine import ClusterChoice
    from autograder.slurm import slurm_cluster

    blockers = [slurm.run("sbatch", "--parsable", f"--gres=gpu:{slurm.gpus}", "--mem=100M", "-o", "/dev/null",
                          "--wrap", "sleep 120").stdout.strip()]
    try:
        choice = ClusterChoice(kind="slurm", workers=1, slurm={"queue": slurm.partition, "gres": "gpu:1",
                                                               "memory": "1GB", "start_timeout": 4,
                                                               "log_directory": f"{slurm.root}/jobs"})
        with pytest.raises(RuntimeError, match=r"(?s)0 of 1 Dask workers connected after 4 s.*squeue:.*PENDING"):
            slurm_cluster(choice)
    finally:
        slurm.run("scancel", *blockers)
    assert _wait_no_jobs(slurm) == [], "the pending worker job was not cancelled"


# ---------------------------------------------------------------------------------------------
# PostgreSQL
# ---------------------------------------------------------------------------------------------


def test_nbgrader_gradebook_on_postgres(postgres):
    from nbgrader.api import Gradebook

    from autograder.course import alembic_on_path

    alembic_on_path()     # nbgrader runs `alembic` from PATH when it opens a gradebook
    with Gradebook(postgres.url) as gb:
        assert gb.db.bind.dialect.name == "postgresql"
        gb.add_assignment("ps-cluster", duedate="2026-12-01 12:00:00")
        gb.add_student("ada", first_name="Ada", last_name="Lovelace", email="ada@example.org")
    with Gradebook(postgres.url) as gb:          # a fresh connection reads them back
        assert [a.name for a in gb.assignments] == ["ps-cluster"]
        student = gb.find_student("ada")
        assert (student.first_name, student.email) == ("Ada", "ada@example.org")
    import psycopg2

    with psycopg2.connect(host="127.0.0.1", port=postgres.port, user=postgres.user, password=postgres.password,
                          dbname=postgres.database) as conn, conn.cursor() as cur:
        cur.execute("SELECT name FROM assignment")
        assert cur.fetchall() == [("ps-cluster",)]
    with pytest.raises(psycopg2.OperationalError):      # the password is needed
        psycopg2.connect(host="127.0.0.1", port=postgres.port, user=postgres.user, password="wrong",
                         dbname=postgres.database)


# ---------------------------------------------------------------------------------------------
# Clean-up: a whole cycle, stopped while busy
# ---------------------------------------------------------------------------------------------


def test_services_stop_leaves_nothing(slurm, postgres, pytestconfig):
    """Stopping kills exactly what was started, even with a job running and a client connected.

    (The session's own services are checked the same way when their fixtures end.)  Runs after
    the fixtures so that it is skipped for the same reasons.
    """
    import psycopg2

    t0 = time.monotonic()
    s_root = Path(tempfile.mkdtemp(prefix="dlperf-slurm-", dir="/tmp"))
    p_root = Path(tempfile.mkdtemp(prefix="dlperf-pg-", dir="/tmp"))
    try:
        s = services.slurm_up(s_root)
        assert services.slurm_up(s_root).pids == s.pids          # idempotent: the running one is reused
        p = services.postgres_up(p_root)
        assert services.postgres_up(p_root).pids == p.pids
        job = s.run("sbatch", "--parsable", "--gres=gpu:1", "--mem=100M", "-o", "/dev/null", "--wrap", "sleep 300")
        assert job.returncode == 0, job.stderr
        deadline = time.monotonic() + 30
        while not any("sleep 300" in cmd for cmd in services.leftover_processes(s_root).values()):
            assert time.monotonic() < deadline, ("the job's process did not appear (or is not seen as ours)",
                                                 s.run("squeue").stdout, services.leftover_processes(s_root))
            time.sleep(0.3)
        conn = psycopg2.connect(host="127.0.0.1", port=p.port, user=p.user, password=p.password, dbname=p.database)
        assert len(services.leftover_processes(p_root)) >= 2                # postmaster + backends
        conn.close()
    finally:
        services.slurm_down(s_root)
        services.postgres_down(p_root)
    _assert_gone(s_root, s.pids)
    _assert_gone(p_root, p.pids)
    out = subprocess.run(["ps", "-eo", "pid,stat,args"], check=False, capture_output=True, text=True).stdout
    assert str(s_root) not in out and str(p_root) not in out
    _say(pytestconfig, f"second Slurm + PostgreSQL up, busy and down in {time.monotonic() - t0:.1f} s")


def _grading_now(slurm: services.Slurm, job: str) -> bool:
    """Whether a worker job is in the middle of a submission: a student's kernel among its processes.

    (Not the check run, nor a kernel still waiting: a worker keeps a warm slot for its next submission
    while idle; a warm kernel that took its submission names itself ``student-kernel``.)"""
    out = slurm.run("scontrol", "listpids", job).stdout
    for line in out.splitlines()[1:]:
        fields = line.split()
        if fields and fields[0].isdigit():
            try:
                cmd = Path(f"/proc/{fields[0]}/cmdline").read_bytes()
                comm = Path(f"/proc/{fields[0]}/comm").read_text().strip()
            except OSError:
                continue
            if b"ipykernel_launcher" in cmd or comm == "student-kernel":
                return True
    return False


def test_grading_a_class_through_slurm_into_postgres(slurm, postgres, tmp_path, pytestconfig):
    """The sample class's honest part graded by Slurm-launched workers into PostgreSQL, a worker job killed
    in the middle: the grades equal local grading, every submission is recorded once."""
    import sqlalchemy as sa

    from autograder import course, sample
    from autograder.gradebook import Writer
    from autograder.sandbox import SandboxUnavailable, check_available

    try:
        check_available()
    except SandboxUnavailable as exc:
        pytest.skip(f"no sandbox: {exc}")
    # ten: after both workers have recorded one (the two slowest come first), enough is left to kill one mid-way
    # (with six, a class graded in 18 s once left no poll of the loop below a busy job: the kill never came)
    samples = sample.honest("gradscaler")[:10]
    export = sample.write_export(samples, tmp_path / "export.zip")
    limits = ["--cpu", "--cell-timeout=60", "--timeout=300", "--memory=2"]

    def autograder(root, *args, **kwargs):
        return subprocess.run([sys.executable, "-m", "autograder", "--course", str(root), *args],
                              capture_output=True, text=True, cwd=course.REPO, **kwargs)

    # Local grading, the reference.
    local = tmp_path / "local"
    local.mkdir()
    assert autograder(local, "collect", "gradscaler", "--from", str(export)).returncode == 0
    t0 = time.monotonic()
    done = autograder(local, "grade", "gradscaler", "--workers=2", *limits, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    _say(pytestconfig, f"local grading of {len(samples)} submissions: {time.monotonic() - t0:.0f} s")
    with Writer(f"sqlite:///{local / 'gradebook.db'}", local) as writer:
        expected = {r["student"]: (r["score"], r["cells"]) for r in writer.records("gradscaler")}

    # Through Slurm into PostgreSQL.
    remote = tmp_path / "cluster"
    remote.mkdir()
    assert autograder(remote, "collect", "gradscaler", "--from", str(export)).returncode == 0
    engine = sa.create_engine(postgres.url)
    t0 = time.monotonic()
    grader = subprocess.Popen(
        [sys.executable, "-m", "autograder", "--course", str(remote), "--db-url", postgres.url, "grade", "gradscaler",
         "--slurm", f"--partition={slurm.partition}", "--gres=gpu:1", "--workers=2", "--job-memory=2GB",
         "--walltime=00:30:00", *limits], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        cwd=course.REPO)
    killed = None
    deadline = time.monotonic() + 600
    while killed is None and time.monotonic() < deadline and grader.poll() is None:
        time.sleep(0.25)
        try:
            with engine.connect() as conn:   # wait until both workers have recorded a submission
                n = conn.execute(sa.text("SELECT count(DISTINCT worker) FROM autograder_runs")).scalar_one()
        except sa.exc.SQLAlchemyError:
            continue
        jobs = [line.split()[0] for line in _squeue(slurm) if "RUNNING" in line]
        busy = [job for job in jobs if _grading_now(slurm, job)]
        if n >= 2 and len(jobs) == 2 and busy:
            killed = busy[0]
            subprocess.run(["scancel", "--signal=KILL", "--full", killed], env={**os.environ, **slurm.env},
                           check=True)
    out, _ = grader.communicate(timeout=900)
    _say(pytestconfig, f"Slurm grading with a worker job killed: {time.monotonic() - t0:.0f} s")
    assert grader.returncode == 0, out[-4000:]
    for line in out.splitlines():
        if "died" in line or "again" in line:
            _say(pytestconfig, "grader: " + line.strip())
    assert killed is not None, "the class was graded before a worker job could be killed:\n" + out[-3000:]

    with Writer(postgres.url, remote) as writer:
        records = writer.records("gradscaler")
        histories = {s.student: writer.history("gradscaler", s.student) for s in samples}
    got = {r["student"]: (r["score"], r["cells"]) for r in records}
    assert got == expected
    assert all(len(h) == 1 for h in histories.values()), {k: len(v) for k, v in histories.items()}
    # The killed job was in the middle of a submission (Dask had given it work): run again, recorded once.
    rerun = {r["student"]: r["attempts"] for r in records if r["attempts"] > 1}
    _say(pytestconfig, f"submissions run again after the kill: {rerun}")
    assert rerun, out[-3000:]
    # Each worker job had its own GPU (fake: Slurm's GRES gives the index), and the records say which.
    seen: dict[str, set[str]] = {}
    for r in records:
        assert r["device"].startswith("cpu [CUDA_VISIBLE_DEVICES=") and r["cpu_only"], r["device"]
        seen.setdefault(r["worker"], set()).add(r["device"].split("=")[1].rstrip("]"))
    assert all(len(v) == 1 for v in seen.values()), seen
    assert sorted(v for values in seen.values() for v in values) == ["0", "1"], seen
    assert _wait_no_jobs(slurm) == [], "worker jobs left after grading"
    # nbgrader's own tables hold the same scores (the gradebook is nbgrader's, on PostgreSQL).
    from nbgrader.api import Gradebook

    with Gradebook(postgres.url) as gb:
        assert {s: gb.find_submission("gradscaler", s).score for s in expected} == \
            {s: v[0] for s, v in expected.items()}


def test_grading_on_an_existing_dask_scheduler(tmp_path, pytestconfig):
    """``--scheduler ADDRESS``: a Dask scheduler and one worker started by hand (as a lab runs them), on loopback."""
    import socket as socketlib

    from autograder import course, sample
    from autograder.gradebook import Writer
    from autograder.sandbox import SandboxUnavailable, check_available

    try:
        check_available()
    except SandboxUnavailable as exc:
        pytest.skip(f"no sandbox: {exc}")
    with socketlib.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    bindir = Path(sys.executable).parent
    env = {**os.environ, "PYTHONPATH": str(course.REPO), "CUDA_VISIBLE_DEVICES": ""}
    daemons = [subprocess.Popen([str(bindir / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port),
                                 "--dashboard-address", ":0"], env=env, cwd=course.REPO,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        daemons.append(subprocess.Popen([str(bindir / "dask"), "worker", address, "--nthreads", "1", "--nworkers", "1",
                                         "--name", "lab-worker", "--memory-limit", "0"], env=env, cwd=course.REPO,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        samples = sample.honest("gradscaler")[:2]
        root = tmp_path / "course"
        root.mkdir()
        export = sample.write_export(samples, tmp_path / "export.zip")
        run = [sys.executable, "-m", "autograder", "--course", str(root)]
        assert subprocess.run([*run, "collect", "gradscaler", "--from", str(export)], cwd=course.REPO).returncode == 0
        t0 = time.monotonic()
        out = subprocess.run([*run, "grade", "gradscaler", "--cpu", f"--scheduler={address}", "--cell-timeout=60",
                              "--timeout=300"], cwd=course.REPO, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        assert f"1 worker(s) of the Dask scheduler at {address}" in out.stdout
        _say(pytestconfig, f"2 submissions on an existing scheduler: {time.monotonic() - t0:.0f} s")
        with Writer(f"sqlite:///{root / 'gradebook.db'}", root) as writer:
            records = writer.records("gradscaler")
        assert not sample.compare(samples, records), sample.compare(samples, records)
        assert {r["worker"] for r in records} == {"lab-worker"}
    finally:
        for p in reversed(daemons):
            p.terminate()
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
