"""A class on JupyterHub over Slurm, end to end: students in a real browser, the grader on the same cluster.

Everything is real and started here, in one temporary folder: a one-node Slurm
(tests/services.py, CPUs shared by up to 4 jobs), a PostgreSQL gradebook,
JupyterHub 6 with configurable-http-proxy and batchspawner's ``SlurmSpawner``,
configured by ``python -m autograder.hub write`` (autograder/hub.py), PAM logins
of local accounts made for the test (``useradd``), and headless Chromium:

1. the instructor (root, on the hub's host) releases ``allreduce`` to nbgrader's
   exchange; three students log in through the hub's login page (a wrong password is
   refused); each one's JupyterLab is a Slurm job running as that student (``squeue``,
   the hub's API and the job's processes agree);
2. in the browser, ada and bob fetch the exercise from nbgrader's *Assignments* tab,
   write their solution cells (ada the reference, bob the chapter's rebinding bug),
   run every cell (the self-check passes for ada, fails for bob), save and submit from the
   same tab; cat never submits;
3. the hub is restarted mid-class: the servers, their Slurm jobs and ada's page survive;
4. the instructor collects from the exchange and grades with the class autograder, its
   Dask workers Slurm jobs on the same partition, into PostgreSQL; writes feedback and
   releases it; ada and bob fetch their feedback in the browser, which shows their own
   score and no line of the hidden tests; the export and nbgrader's gradebook agree;
5. the servers are stopped through the hub's API, the hub, Slurm and PostgreSQL are
   stopped: no process of theirs, nor of the students, is left.

The tests are steps of one class and run in order; a step whose predecessor failed fails
at once.  Needs root (accounts, Slurm), jupyterhub and batchspawner in the environment,
configurable-http-proxy in .hub/ (npm), Chromium: skipped with the reason when missing.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hub_tools  # noqa: E402
import services  # noqa: E402
from browser_tools import find_browser, start_browser  # noqa: E402
from lab_tools import _CELLS, _TYPE, _idle, _menu, _wait  # noqa: E402

from autograder import course  # noqa: E402

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

AID = "allreduce"
COURSE_ID = "dlperf"
BIN = Path(sys.executable).parent
# What each one submits (None: nothing); they log in in this order, so ada is the browser's user after it.
STUDENTS = {"cat": None, "bob": "ar_rebinding", "ada": "reference"}
PREFIX = "dlh-"                     # the accounts' names: never a human's account


def _say(config: pytest.Config, msg: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        print(f"[hub] {msg}")
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(f"[hub] {msg}")


def _requirements() -> str | None:
    """Why the class cannot run here (a reason to skip), or None."""
    if os.geteuid() != 0:
        return "the hub runs as root (local accounts, jobs submitted as the students)"
    try:
        import batchspawner  # noqa: F401
        import jupyterhub  # noqa: F401
    except ImportError as exc:
        return f"{exc.name} is not installed (pip install 'jupyterhub>=6.1,<7' 'batchspawner==1.3.0')"
    from autograder import hub

    if not Path(hub.PROXY).exists():
        return f"no {hub.PROXY} (npm install --prefix .hub configurable-http-proxy@5)"
    try:
        find_browser()
    except RuntimeError as exc:
        return str(exc)
    return None


@pytest.fixture(scope="module")
def klass(pytestconfig):
    """The class: Slurm, PostgreSQL, accounts, the released exercise, the hub, a browser; all stopped after."""
    reason = _requirements()
    if reason:
        pytest.skip(reason)
    from autograder import hub

    t_start = time.monotonic()
    base = Path(tempfile.mkdtemp(prefix="dlperf-hub-", dir="/tmp"))
    base.chmod(0o755)                                        # the students' homes are inside
    opened = {f: f.stat().st_mode for f in hub.closed_folders()}   # e.g. /root holding pyenv's Python
    k = SimpleNamespace(base=base, done=set(), times={}, users={}, slurm=None, pg=None, hub=None, driver=None,
                        opened=opened, say=lambda m: _say(pytestconfig, m))
    try:
        for folder, mode in opened.items():
            folder.chmod(mode | 0o001)
        k.slurm = services.slurm_up(base / "slurm", gpus=len(STUDENTS) + 1, oversubscribe=4)
        k.pg = services.postgres_up(base / "postgres")
        k.times["set-up: Slurm and PostgreSQL"] = time.monotonic() - t_start
        (base / "home").mkdir(mode=0o755)
        for short in STUDENTS:
            name = PREFIX + short
            k.users[short] = SimpleNamespace(name=name, home=base / "home" / name,
                                             password=hub_tools.add_user(name, base / "home" / name))
            _quiet_lab(k.users[short])
        k.exchange = base / "exchange"
        k.instructor = base / "instructor"
        k.ienv = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "SLURM_CONF": k.slurm.conf,
                  "DLPERF_SLURM_LOGS": str(base / "slurm-jobs")}
        t0 = time.monotonic()
        _course(k)
        k.times["set-up: generate and release"] = time.monotonic() - t0
        ports = [services.free_port() for _ in range(3)]
        settings = hub.HubSettings(
            users=[u.name for u in k.users.values()], course_id=COURSE_ID, exchange=str(k.exchange),
            port=ports[0], hub_port=ports[1], proxy_api_port=ports[2], partition=k.slurm.partition,
            runtime="00:30:00", memory="1G", cpus=1, gpus_per_server=1, server_ip="127.0.0.1",
            server_args=["--LabApp.expose_app_in_browser=True"], start_timeout=120,
            env={"SLURM_CONF": k.slurm.conf})
        k.hub_folder = base / "hub"
        hub.write_hub(k.hub_folder, settings)
        k.hub = hub_tools.Hub(k.hub_folder, f"http://127.0.0.1:{ports[0]}", f"http://127.0.0.1:{ports[1]}/hub/api",
                              {"SLURM_CONF": k.slurm.conf})
        k.hub.start()
        k.driver = start_browser(1400, 1000)
        k.times["set-up"] = time.monotonic() - t_start
        yield k
    finally:
        _teardown(k)


def _quiet_lab(user) -> None:
    """No "get notified about official Jupyter news?" toast over the page (the student's own setting)."""
    settings = user.home / ".jupyter" / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    subprocess.run(["chown", "-R", f"{user.name}:{user.name}", str(user.home / ".jupyter")], check=True)


def _course(k) -> None:
    """The instructor's course root (the course's nbgrader configuration, late submissions scored 0, the
    gradebook in PostgreSQL); generate the exercise and release it into the exchange."""
    k.instructor.mkdir()
    (k.instructor / "nbgrader_config.py").write_text(f'''c = get_config()  # noqa: F821
load_subconfig("nbgrader_config.py", path={str(course.COURSE)!r})  # noqa: F821
c.CourseDirectory.root = {str(k.instructor)!r}
c.CourseDirectory.source_directory = {str(course.SOLUTIONS)!r}
c.CourseDirectory.release_directory = {str(k.instructor / "release")!r}
c.CourseDirectory.db_url = {k.pg.url!r}
c.Exchange.root = {str(k.exchange)!r}
c.LateSubmissionPlugin.penalty_method = "zero"
''')
    k.exchange.mkdir(mode=0o777)
    k.exchange.chmod(0o777)
    _nbgrader(k, "generate_assignment", AID)         # also enters its cells and points in the gradebook
    _nbgrader(k, "release_assignment", AID)


def _nbgrader(k, *args: str) -> str:
    out = subprocess.run([str(BIN / "nbgrader"), *args], cwd=k.instructor, env=k.ienv, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, f"nbgrader {' '.join(args)}:\n{out.stdout[-3000:]}{out.stderr[-3000:]}"
    return out.stdout + out.stderr


def _teardown(k) -> None:
    """Stop everything that was started, whatever happened; the last test asserts that nothing is left."""
    if k.driver is not None:
        with contextlib.suppress(Exception):
            k.driver.quit()
    if k.hub is not None:
        with contextlib.suppress(Exception):
            if k.hub.process is not None:
                k.hub.stop_servers([u.name for u in k.users.values()], timeout=20)
        k.hub.stop()
        for pid in services.leftover_processes(k.hub_folder):
            services._stop_pid(pid, timeout=5)
    if k.slurm is not None:
        services.slurm_down(k.base / "slurm")
    if k.pg is not None:
        services.postgres_down(k.base / "postgres")
    for user in k.users.values():
        hub_tools.remove_user(user.name)
    for folder, mode in k.opened.items():
        folder.chmod(mode & 0o7777)
    import shutil

    shutil.rmtree(k.base, ignore_errors=True)


def _needs(k, *steps: str) -> None:
    missing = [s for s in steps if s not in k.done]
    if missing:
        pytest.fail(f"an earlier step of the class failed: {missing}", pytrace=False)


def _jobs(k) -> dict[str, tuple[str, str, str]]:
    """squeue: job id -> (user, state, name)."""
    out = k.slurm.run("squeue", "-h", "-o", "%i %u %T %j").stdout
    return {f[0]: (f[1], f[2], f[3]) for f in (line.split() for line in out.splitlines()) if len(f) == 4}


def _text(driver) -> str:
    return driver.execute_script("return document.body.innerText")


# --------------------------------------------------------------------------- 1. log in: servers are Slurm jobs


def test_1_students_log_in_and_each_server_is_their_slurm_job(klass):
    from selenium.webdriver.common.by import By

    k, driver = klass, klass.driver
    t0 = time.monotonic()
    # A wrong password is refused at the login page (PAM), and no job is submitted.
    driver.get(f"{k.hub.origin}/hub/login")
    driver.find_element(By.ID, "username_input").send_keys(k.users["ada"].name)
    driver.find_element(By.ID, "password_input").send_keys("not-her-password")
    driver.find_element(By.ID, "login_submit").click()
    time.sleep(1)
    assert "Invalid username or password" in _text(driver), _text(driver)[:500]
    assert _jobs(k) == {}

    for short, user in k.users.items():
        k.times[f"log in {short}"] = hub_tools.log_in(driver, k.hub.origin, user.name, user.password)
    jobs = _jobs(k)
    servers = {u.name: k.hub.server(u.name) for u in k.users.values()}
    assert all(s and s["ready"] for s in servers.values()), servers
    by_user = {user: (job, state, name) for job, (user, state, name) in jobs.items()}
    gpus = {}
    assert set(by_user) == set(servers), jobs
    for name, server in servers.items():
        job, state, job_name = by_user[name]
        assert (state, job_name) == ("RUNNING", "spawner-jupyterhub"), jobs
        assert server["state"]["job_id"] == job, (server, jobs)       # the hub knows the job it started
        own = [pid for pid, cmd in hub_tools.processes_of(name).items() if "jupyterhub-singleuser" in cmd]
        assert own, hub_tools.processes_of(name)                    # the server runs as the student
        gpus[name] = services._environ(own[-1]).get("CUDA_VISIBLE_DEVICES")
    # one GPU per server (--gres=gpu:1; the test's Slurm has fake ones): each server its own
    assert sorted(gpus.values()) == [str(i) for i in range(len(STUDENTS))], gpus
    k.jobs = {name: by_user[name][0] for name in servers}
    k.times["1 log in (3 students)"] = time.monotonic() - t0
    k.say(f"set-up {k.times['set-up']:.1f} s; 3 students logged in, 3 server jobs, in {time.monotonic() - t0:.1f} s")
    k.done.add("login")


# --------------------------------------------------------------------------- 2. fetch, self-check, submit


def _assignments_tab(driver, list_id: str, contains: str, timeout: float = 60) -> None:
    """Open nbgrader's Assignments tab (Nbgrader > Assignment List) and wait for ``contains`` in a list."""
    _menu(driver, "Nbgrader", "Assignment List")
    _wait_list(driver, list_id, contains, timeout)


def _wait_list(driver, list_id: str, contains: str, timeout: float = 60) -> str:
    """Wait until nbgrader's list ``list_id`` (released_, fetched_, submitted_assignments_list) shows ``contains``."""
    from selenium.webdriver.common.by import By

    deadline, text = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        text = " | ".join(e.text for e in driver.find_elements(By.CSS_SELECTOR, f"#{list_id} .list_item"))
        if contains in text:
            return text
        time.sleep(0.3)
    raise AssertionError(f"Assignments tab: no {contains!r} in #{list_id} in {timeout:.0f} s: {text[:600]!r}")


def _click_in(driver, list_id: str, label: str) -> None:
    """Click the button labelled ``label`` in the row of AID in nbgrader's list ``list_id``."""
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for row in driver.find_elements(By.CSS_SELECTOR, f"#{list_id} .list_item"):
            if AID in row.text:
                for button in row.find_elements(By.CSS_SELECTOR, "button"):
                    if button.text.strip() == label:
                        button.click()
                        return
        time.sleep(0.3)
    raise AssertionError(f"no {label!r} button for {AID} in #{list_id}: {_text(driver)[:800]!r}")


def _solution_sources(short: str, release: Path) -> dict[str, str]:
    """The solution cells' code the student types: the reference, or a wrong submission's."""
    if STUDENTS[short] == "reference":
        nb = course.reference_submission(AID, release=release)
    else:
        snippet = course.Snippet.parse(course.SUBMISSIONS / AID / f"{STUDENTS[short]}.py")
        nb = course.build_submission(AID, snippet.cells, release=release)
    ids = set(course.solution_cells(AID))
    return {c.metadata["nbgrader"]["grade_id"]: c.source for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade_id") in ids}


def _work_and_submit(k, short: str) -> None:
    """In the browser, as ``short``: fetch, write the solution cells, run every cell, save, submit."""
    driver, user = k.driver, k.users[short]
    t0 = time.monotonic()
    if f"/user/{user.name}/" not in driver.current_url:
        hub_tools.log_in(driver, k.hub.origin, user.name, user.password)
    _assignments_tab(driver, "released_assignments_list", AID)
    _click_in(driver, "released_assignments_list", "Fetch")
    _wait_list(driver, "fetched_assignments_list", AID)
    notebook = user.home / AID / f"{AID}.ipynb"
    assert notebook.read_bytes() == course.release_notebook(AID).read_bytes()      # the book's notebook
    assert notebook.stat().st_uid == os.stat(user.home).st_uid      # fetched by the student's own server

    driver.get(f"{k.hub.origin}/user/{user.name}/lab/tree/{AID}/{AID}.ipynb")
    _wait(driver, "the notebook opening with an idle kernel", _idle, timeout=120)
    solved = _solution_sources(short, course.EXERCISES)
    assert driver.execute_script(_TYPE, solved) == len(solved) == 3
    _menu(driver, "Run", "Run All Cells")
    code = sum(c.cell_type == "code" for c in nbformat.read(notebook, as_version=4).cells)
    checks = [f"{AID}-{part}-check" for part in ("sum", "step", "split")]

    def finished(state, cells) -> bool:
        ran = [c for c in cells if c["id"] in checks and c["count"] is not None]
        return _idle(state, cells) and (any(c["errors"] for c in ran) or len(ran) == len(checks))

    cells = _wait(driver, "Run All Cells", finished, timeout=240)
    ran = {c["id"]: c for c in cells if c["id"] in checks and c["count"] is not None}
    if STUDENTS[short] == "reference":
        assert len(ran) == 3 and not any(c["errors"] for c in ran.values()), ran
        assert all(re.search(r"\b(\d+) of \1 cases pass\.", c["text"]) for c in ran.values()), ran
        assert [c["count"] for c in cells if c["type"] == "code"] == list(range(1, code + 1))
    else:   # the self-check tells bob before he submits (he submits all the same)
        failed = [c for c in ran.values() if c["errors"]]
        assert failed and failed[0]["errors"][0].startswith("AssertionError: self-check"), ran
    _menu(driver, "File", "Save Notebook")
    _wait(driver, "saving", lambda s, cs: not s["dirty"], timeout=30, settle=0.5)
    saved = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source
             for c in nbformat.read(notebook, as_version=4).cells}
    assert all(saved[g] == src for g, src in solved.items())

    _assignments_tab(driver, "fetched_assignments_list", AID)
    _click_in(driver, "fetched_assignments_list", "Submit")
    _wait_list(driver, "submitted_assignments_list", AID)
    inbound: list[Path] = []
    deadline = time.monotonic() + 30
    while not inbound and time.monotonic() < deadline:
        inbound = sorted((k.exchange / COURSE_ID / "inbound").glob(f"{user.name}+{AID}+*"))
        time.sleep(0.3)
    assert len(inbound) == 1, (inbound, _text(driver)[:800])
    assert (inbound[0] / f"{AID}.ipynb").read_bytes() == notebook.read_bytes()
    k.times[f"2 fetch, self-check, submit: {short}"] = time.monotonic() - t0
    k.say(f"{short}: fetched, self-checked, submitted in {time.monotonic() - t0:.1f} s")
    k.done.add(f"submit {short}")


def test_2_ada_fetches_runs_the_self_check_and_submits_in_the_browser(klass):
    _needs(klass, "login")
    _work_and_submit(klass, "ada")


def test_3_the_deadline_passes_and_bob_submits_late(klass):
    """The instructor sets the deadline after ada's submission; bob's comes after it (the course scores
    late work 0: nbgrader's LateSubmissionPlugin, which the autograder applies)."""
    _needs(klass, "login", "submit ada")
    k = klass
    time.sleep(1.1)                                   # the deadline is in whole seconds, after ada's submission
    k.deadline = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    _nbgrader(k, "db", "assignment", "add", AID, f"--duedate={k.deadline}")
    time.sleep(1.1)
    _work_and_submit(k, "bob")


# --------------------------------------------------------------------------- 3. the hub restarted mid-class


def test_4_the_hub_restarted_during_the_class_keeps_every_server(klass):
    _needs(klass, "login")
    k, driver = klass, klass.driver
    t0 = time.monotonic()
    before = _jobs(k)
    k.hub.stop()
    assert _jobs(k) == before, "stopping the hub stopped servers"
    k.hub.start()
    servers = {u.name: k.hub.server(u.name) for u in k.users.values()}
    assert all(s and s["ready"] for s in servers.values()), servers
    assert {n: s["state"]["job_id"] for n, s in servers.items()} == k.jobs
    assert _jobs(k) == before
    # bob (the browser's last user) is still logged in, his JupyterLab answers through the new proxy
    bob = k.users["bob"].name
    driver.get(f"{k.hub.origin}/user/{bob}/lab")
    deadline = time.monotonic() + 60
    while not driver.execute_script("return !!window.jupyterapp") and time.monotonic() < deadline:
        time.sleep(0.3)
    assert f"/user/{bob}/lab" in driver.current_url, (driver.current_url, _text(driver)[:800])
    # and ada's server stays closed to him
    driver.get(f"{k.hub.origin}/user/{k.users['ada'].name}/lab")
    time.sleep(1)
    assert "403" in _text(driver) and not driver.execute_script("return !!window.jupyterapp"), _text(driver)[:800]
    k.times["4 hub restart"] = time.monotonic() - t0
    k.done.add("restart")


# --------------------------------------------------------------------------- 4. grade on Slurm, feedback


def _autograder(k, *args: str, timeout: float = 600) -> str:
    out = subprocess.run([sys.executable, "-m", "autograder", "--course", str(k.instructor), "--db-url", k.pg.url,
                          *args], cwd=course.REPO, env=k.ienv, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"autograder {' '.join(args)}:\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}"
    return out.stdout


def test_5_the_instructor_grades_on_the_same_slurm_and_releases_feedback(klass):
    _needs(klass, "submit ada", "submit bob")
    from autograder.gradebook import Writer

    k = klass
    t0 = time.monotonic()
    ada, bob, cat = (k.users[s].name for s in ("ada", "bob", "cat"))
    collected = _autograder(k, "collect", AID, "--exchange", str(k.exchange))
    assert ada in collected and bob in collected and cat not in collected, collected
    out = _autograder(k, "grade", AID, "--slurm", f"--partition={k.slurm.partition}", "--gres=", "--workers=1",
                      "--job-memory=1GB", "--walltime=00:20:00", "--cpu", "--cell-timeout=120", "--timeout=400")
    assert "1 Dask workers as Slurm jobs on partition grading, CPU only" in out, out[-3000:]
    k.times["5 collect and grade on Slurm"] = time.monotonic() - t0
    with Writer(k.pg.url, k.instructor) as writer:
        records = {r["student"]: r for r in writer.records(AID)}
    points = course.graded_cells(AID)
    bob_expect = course.Snippet.parse(course.SUBMISSIONS / AID / f"{STUDENTS['bob']}.py").expect
    assert set(records) == {ada, bob}, sorted(records)
    assert {c: v["score"] for c, v in records[ada]["cells"].items()} == points
    assert {c: v["score"] for c, v in records[bob]["cells"].items()} == bob_expect
    assert all(r["worker"] and r["outcome"] == "graded" for r in records.values()), records
    k.raw = {ada: sum(points.values()), bob: sum(bob_expect.values())}
    # bob's submission is late, by the exchange's timestamp against the deadline, and scored 0 for it
    from nbgrader.api import Gradebook

    with Gradebook(k.pg.url) as gb:
        late = {s: gb.find_submission(AID, s).total_seconds_late for s in k.raw}
    assert late[ada] == 0 and late[bob] > 0, (late, k.deadline)
    k.late = late

    _autograder(k, "feedback", AID)
    out = subprocess.run([str(BIN / "nbgrader"), "release_feedback", AID], cwd=k.instructor, env=k.ienv,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert len(list((k.exchange / COURSE_ID / "feedback").glob("*.html"))) == 2
    k.times["5 grade and release feedback"] = time.monotonic() - t0
    k.done.add("graded")


@pytest.mark.parametrize("short", ["bob", "ada"])
def test_6_each_student_fetches_feedback_with_their_score_and_no_hidden_test(klass, short):
    _needs(klass, "graded")
    k, driver, user = klass, klass.driver, klass.users[short]
    t0 = time.monotonic()
    if f"/user/{user.name}/" not in driver.current_url:
        hub_tools.log_in(driver, k.hub.origin, user.name, user.password)
    _assignments_tab(driver, "submitted_assignments_list", AID)
    _click_in(driver, "submitted_assignments_list", "Fetch Feedback")
    fetched: list[Path] = []
    deadline = time.monotonic() + 60
    while not fetched and time.monotonic() < deadline:
        fetched = sorted((user.home / AID / "feedback").glob(f"*/{AID}.html"))
        time.sleep(0.3)
    assert len(fetched) == 1, sorted(str(p) for p in (user.home / AID).rglob("*"))
    rel = fetched[0].relative_to(user.home)
    driver.get(f"{k.hub.origin}/user/{user.name}/files/{rel}")
    shown = _text(driver)
    # their score, less the late penalty that the feedback names (bob's late work scores 0)
    penalty = k.raw[user.name] if k.late[user.name] else 0.0
    assert f"{AID} (Score: {k.raw[user.name] - penalty:.1f} / 10.0)" in shown, shown[:800]
    assert ("Late submission penalty" in shown) == bool(penalty), shown[:800]
    if penalty:
        assert f"Late submission penalty (Score: -{penalty:.1f})" in shown, shown[:800]
    own = "\n".join(c.source for c in nbformat.read(user.home / AID / f"{AID}.ipynb", as_version=4).cells)
    leaked = sorted(line for line in course.secret_lines(AID) if line in shown and line not in own)
    assert not leaked, f"{short}'s feedback shows hidden lines: {leaked[:5]}"
    k.times[f"6 feedback: {short}"] = time.monotonic() - t0
    k.done.add(f"feedback {short}")


def test_7_the_export_and_nbgraders_gradebook_agree(klass):
    _needs(klass, "graded")
    from nbgrader.api import Gradebook

    k = klass
    ada, bob = k.users["ada"].name, k.users["bob"].name
    export = _autograder(k, "export", "--to", "-")
    rows = {r["student_id"]: r for r in csv.DictReader(io.StringIO(export)) if r.get("assignment") == AID}
    assert set(rows) == {ada, bob}, export                   # cat submitted nothing
    got = {s: (float(r["raw_score"]), float(r["penalty"]), float(r["score"])) for s, r in rows.items()}
    assert got == {ada: (k.raw[ada], 0.0, k.raw[ada]), bob: (k.raw[bob], k.raw[bob], 0.0)}, export
    with Gradebook(k.pg.url) as gb:
        assert {s: gb.find_submission(AID, s).score for s in k.raw} == k.raw


def test_7b_a_server_job_that_dies_is_reported_and_the_next_login_starts_another(klass):
    """ada's server job is killed (a node lost): the hub says her server is not running, her next start
    is a new Slurm job, and her saved notebook is there, unchanged."""
    _needs(klass, "login", "submit ada")
    k, driver, ada = klass, klass.driver, klass.users["ada"]
    t0 = time.monotonic()
    notebook = ada.home / AID / f"{AID}.ipynb"
    saved = notebook.read_bytes()
    old = k.jobs[ada.name]
    k.slurm.run("scancel", "--signal=KILL", "--full", old)
    deadline = time.monotonic() + 60
    while old in _jobs(k) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert old not in _jobs(k), _jobs(k)
    if f"/user/{ada.name}/" not in driver.current_url:
        hub_tools.log_in(driver, k.hub.origin, ada.name, ada.password)
    driver.get(f"{k.hub.origin}/user/{ada.name}/lab")
    deadline = time.monotonic() + 60
    while "not running" not in _text(driver) and time.monotonic() < deadline:
        time.sleep(0.5)
        if "not running" not in _text(driver):
            driver.refresh()
    assert "not running" in _text(driver), (driver.current_url, _text(driver)[:800])
    assert k.hub.server(ada.name) is None                     # the hub knows
    k.hub.api("POST", f"/users/{ada.name}/server")            # her next start (the page's Launch button)
    deadline = time.monotonic() + 120
    while not (k.hub.server(ada.name) or {}).get("ready") and time.monotonic() < deadline:
        time.sleep(0.5)
    new = k.hub.server(ada.name)["state"]["job_id"]
    assert new != old and _jobs(k)[new][:2] == (ada.name, "RUNNING"), _jobs(k)
    driver.get(f"{k.hub.origin}/user/{ada.name}/lab/tree/{AID}/{AID}.ipynb")
    _wait(driver, "her notebook opening in the new server", _idle, timeout=120)
    assert notebook.read_bytes() == saved
    k.times["7b server job killed, started again"] = time.monotonic() - t0


# --------------------------------------------------------------------------- 8. nothing left


def test_8_stopping_the_class_leaves_nothing(klass):
    _needs(klass, "login")
    k = klass
    t0 = time.monotonic()
    names = [u.name for u in k.users.values()]
    k.hub.stop_servers(names)
    assert _jobs(k) == {}, "server jobs left after stopping the servers through the hub"
    k.hub.stop()
    assert services.leftover_processes(k.hub_folder) == {}
    k.driver.quit()
    k.driver = None
    services.slurm_down(k.base / "slurm")
    services.postgres_down(k.base / "postgres")
    k.slurm = k.pg = None
    assert services.leftover_processes(k.base) == {}
    assert {n: hub_tools.processes_of(n) for n in names} == {n: {} for n in names}
    k.times["8 stop"] = time.monotonic() - t0
    k.say("seconds: " + ", ".join(f"{s} {v:.1f}" for s, v in k.times.items()))
