"""The student path, end to end, with the real tools: nbgrader's command line, JupyterLab, headless Chromium.

Everything happens in a temporary folder: an instructor's course root, a shared exchange
folder (nbgrader's exchange on a shared machine or JupyterHub), and the home folder of the
student ada, with her own Jupyter folders, nbgrader configuration and nbgrader cache, as a
separate user would have (bob and carol hand in through an LMS):

1. the instructor generates and releases ``allreduce`` with ``nbgrader generate_assignment`` /
   ``release_assignment``, from the repository's ``solutions/`` and the course's own
   ``course/nbgrader_config.py``; the student ``ada`` lists it (``nbgrader list``) and fetches it
   (``nbgrader fetch_assignment``): she gets the book's ``exercises/allreduce/allreduce.ipynb``, byte
   for byte (and nbgrader's default ``validate`` calls that untouched stub a success: see step 2);
2. ada opens it in a real JupyterLab (a ``jupyter lab`` server on a free port, driven by headless
   Chromium through selenium): Run > Run All Cells shows the first self-check failing on the stub
   (an error output, a table of ``NotImplementedError`` rows); nbgrader's *Validate* button (the
   students' configuration sets ``Validator.validate_all``) says the notebook fails; she writes the
   instructor's solutions into the three solution cells (through JupyterLab's notebook model, as
   typing would), Run > Restart Kernel and Run All Cells: every self-check prints "N of N cases
   pass." and no cell has an error; she saves (File > Save Notebook), *Validate* says success,
   File > Download gives exactly the saved file (what she would upload to an LMS); nbgrader's
   *Assignments* tab lists the assignment with a *Submit* button.
   Screenshots in ``_build/screenshots/``: ``jupyterlab-self-check.png`` (the passing self-check),
   ``jupyterlab-self-check-fails.png`` (the stub), ``jupyterlab-validate.png``, ``jupyterlab-assignments.png``;
3. ada submits with ``nbgrader submit``; the student ``bob`` uploads his notebook (the chapter's
   classic rebinding bug, ``tests/submissions/allreduce/ar_rebinding.py``) to an LMS, which names the
   file ``bob_<user id>_<submission id>_allreduce.ipynb`` in its export; ``carol`` uploads a correct
   notebook as ``allreduce (1).ipynb``;
4. the instructor collects with ``nbgrader collect`` (the exchange) and ``nbgrader zip_collect``
   (the LMS export): the submitted files are the students' files, byte for byte; ``nbgrader
   autograde`` records 10/10 for ada and bob's expected per-cell scores (5/10) in the gradebook,
   and reports an error for carol, whose notebook it does not find under its name (no points);
5. ``nbgrader generate_feedback``, ``release_feedback`` and ada's ``fetch_feedback`` bring her the
   feedback HTML; neither student's feedback shows a line of the hidden tests (nor of the
   instructor's solutions beyond what the student wrote), while the autograded notebooks (the
   instructor's side) do hold them.  nbgrader's defaults put the hidden tests in the feedback,
   as source and as traceback context: course/nbgrader_config.py hides them with nbgrader's own
   options (ClearHiddenTests in the feedback, tracebacks cut by LimitOutput).

JupyterLab, its kernels and the browser are stopped at the end, also when a step fails.
Chromium, chromedriver and selenium are required (the test fails and says how to install them).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from browser_tools import INSTALL_HINT, find_browser, start_browser
from lab_tools import _CELLS, _SCROLL_TO, _TYPE, _close_dialog, _dialog, _idle, _menu, _validate, _wait  # noqa: F401
from conftest import ROOT

from autograder import course

pytestmark = pytest.mark.slow

AID = "allreduce"
COURSE_ID = "dlperf"
BIN = Path(sys.executable).parent  # the environment's nbgrader, jupyter and alembic
SCREENSHOTS = ROOT / "_build" / "screenshots"
LMS_FILE = "bob_4242_1234567_allreduce.ipynb"  # as an LMS export names it: <student>_<user id>_<submission id>_<file>
RENAMED_FILE = "carol_4243_1234568_allreduce (1).ipynb"  # a browser's second download, uploaded as it was
BOB_SNIPPET = course.SUBMISSIONS / AID / "ar_rebinding.py"

# What the course's nbgrader_config.py does not say yet, and the student path needs
# (proposed for course/nbgrader_config.py):


# --------------------------------------------------------------------------- the course and its users


def _user_env(home: Path) -> dict[str, str]:
    """The environment of one user: this environment's tools first, Jupyter's folders in ``home``."""
    env = dict(os.environ)
    env["PATH"] = str(BIN) + os.pathsep + env.get("PATH", "")
    for var, sub in (("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
                     ("JUPYTER_RUNTIME_DIR", "runtime"), ("IPYTHONDIR", "ipython"),
                     ("JUPYTERLAB_SETTINGS_DIR", "lab-settings"), ("JUPYTERLAB_WORKSPACES_DIR", "lab-workspaces")):
        env[var] = str(home / sub)
    env.pop("JUPYTER_PATH", None)
    return env


def nbgrader(cwd: Path, env: dict[str, str], *args: str, timeout: float = 300, succeeds: bool = True) -> str:
    """Run ``nbgrader <args>`` in ``cwd``; fail with its output unless it exits 0 (``succeeds``) or
    non-zero (``succeeds=False``). Returns stdout + stderr."""
    out = subprocess.run([str(BIN / "nbgrader"), *args], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=timeout, check=False)
    text = out.stdout + out.stderr
    assert (out.returncode == 0) == succeeds, (
        f"`nbgrader {' '.join(args)}` exited {out.returncode} in {cwd}:\n{text[-6000:]}")
    return text


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    """The course on a shared machine: instructor root, exchange, ada's home; and what each step left."""
    base = tmp_path_factory.mktemp("student-path")
    exchange = base / "exchange"
    exchange.mkdir()
    exchange.chmod(0o777)  # nbgrader's exchange root must be writable by everyone
    instructor = base / "instructor"
    instructor.mkdir()
    (instructor / "nbgrader_config.py").write_text(f'''c = get_config()  # noqa: F821
load_subconfig("nbgrader_config.py", path={str(course.COURSE)!r})  # noqa: F821 - the course's own configuration
c.CourseDirectory.root = {str(instructor)!r}
c.CourseDirectory.source_directory = {str(course.SOLUTIONS)!r}
c.CourseDirectory.release_directory = {str(instructor / "release")!r}
c.CourseDirectory.db_url = {f"sqlite:///{instructor / 'gradebook.db'}"!r}
c.Exchange.root = {str(exchange)!r}
c.Exchange.cache = {str(instructor / "nbgrader_cache")!r}
# All users here are one OS user: do not warn that ada's submission is owned by someone else.
c.CollectApp.check_owner = False
# The LMS export: "<student>_<user id>_<submission id>_<file name>" (matched against the full path).
c.FileNameCollectorPlugin.named_regexp = r".*/(?P<student_id>[^/_]+)_\\d+_\\d+_(?P<file_id>[^/]+)$"
''')
    students = {}
    for student in ("ada",):
        home = base / student
        home.mkdir()
        # A student's configuration, as a JupyterHub would provide it (there, the student id is the
        # login name; here every student is the same OS user, so it is set explicitly).
        (home / "nbgrader_config.py").write_text(f'''c = get_config()  # noqa: F821
c.CourseDirectory.course_id = {COURSE_ID!r}
c.CourseDirectory.student_id = {student!r}
c.Exchange.root = {str(exchange)!r}
c.Exchange.cache = {str(home / ".nbgrader_cache")!r}
# Validate runs every cell and reports failing self-checks (by default it looks at graded cells
# only, and these hold no visible test: it would call an untouched notebook a success).
c.Validator.validate_all = True
''')
        students[student] = SimpleNamespace(home=home, env=_user_env(home))
    return SimpleNamespace(base=base, exchange=exchange, instructor=instructor, ienv=_user_env(instructor),
                           students=students, done=set(), times={})


def _needs(path, *steps: str) -> None:
    missing = [s for s in steps if s not in path.done]
    if missing:
        pytest.fail(f"an earlier step of the student path failed: {missing}", pytrace=False)


# --------------------------------------------------------------------------- 1. release and fetch


def test_1_the_instructor_releases_and_the_student_fetches_the_book_notebook(path):
    start = time.monotonic()
    nbgrader(path.instructor, path.ienv, "generate_assignment", AID)
    nbgrader(path.instructor, path.ienv, "release_assignment", AID)
    ada = path.students["ada"]
    listed = nbgrader(ada.home, ada.env, "list")
    assert re.search(rf"\b{COURSE_ID} {AID}\b", listed), f"`nbgrader list` does not show {AID}:\n{listed}"
    nbgrader(ada.home, ada.env, "fetch_assignment", AID)
    fetched = ada.home / AID / f"{AID}.ipynb"
    assert fetched.is_file(), sorted(str(p.relative_to(ada.home)) for p in ada.home.rglob("*"))
    assert fetched.read_bytes() == course.release_notebook(AID).read_bytes(), (
        "the notebook the exchange delivers is not exercises/allreduce/allreduce.ipynb (the book's download): "
        "is exercises/ stale? (`make exercises`)")
    # Why the students' configuration sets Validator.validate_all (and why the book tells students to
    # trust the self-checks): nbgrader's default Validate looks at graded cells only, which hold no
    # visible test here, so it calls the untouched stub a success.
    default = nbgrader(ada.home, ada.env, "validate", str(fetched), "--Validator.validate_all=False")
    assert "Success! Your notebook passes all the tests." in default, default[-3000:]
    path.times["release and fetch"] = time.monotonic() - start
    path.done.add("fetch")


# --------------------------------------------------------------------------- 2. JupyterLab


class JupyterLab:
    """``jupyter lab`` serving ``root`` on 127.0.0.1 with a random token; stopped with its kernels."""

    def __init__(self, root: Path, env: dict[str, str], log: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.token = secrets.token_hex(16)
        self.origin = f"http://127.0.0.1:{self.port}"
        self.log = log
        # no "Would you like to get notified about official Jupyter news?" toast over the screenshots
        settings = Path(env["JUPYTERLAB_SETTINGS_DIR"]) / "@jupyterlab" / "apputils-extension"
        settings.mkdir(parents=True, exist_ok=True)
        (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
        self.process = subprocess.Popen(
            [str(BIN / "jupyter"), "lab", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
             "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}",
             f"--ServerApp.root_dir={root}", "--expose-app-in-browser", "--allow-root"],
            cwd=root, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(self.api("status"), timeout=5):
                    break
            except (urllib.error.URLError, OSError):
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"JupyterLab did not start:\n{log.read_text()[-4000:]}") from None
                time.sleep(0.3)

    def api(self, what: str) -> str:
        return f"{self.origin}/api/{what}?token={self.token}"

    def url(self, notebook: str) -> str:
        return f"{self.origin}/lab/tree/{notebook}?token={self.token}"

    def stop(self) -> None:
        """Shut the kernels down through the server, stop the server, then kill whatever it left."""
        import psutil

        with contextlib.suppress(psutil.Error):
            started = psutil.Process(self.process.pid).children(recursive=True)
        if self.process.poll() is None:
            with contextlib.suppress(Exception):
                with urllib.request.urlopen(self.api("kernels"), timeout=5) as r:
                    kernels = json.load(r)
                for k in kernels:
                    req = urllib.request.Request(self.api(f"kernels/{k['id']}"), method="DELETE")
                    urllib.request.urlopen(req, timeout=15).close()
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        for proc in started:
            with contextlib.suppress(psutil.Error):
                proc.kill()


@pytest.fixture
def lab(path):
    """ada's JupyterLab and a headless Chromium; both stopped at the end, whatever happened."""
    try:
        find_browser()
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    _needs(path, "fetch")
    ada = path.students["ada"]
    server = JupyterLab(ada.home, ada.env, path.base / "jupyterlab.log")
    driver = None
    try:
        try:
            driver = start_browser(1500, 1000)
        except Exception as exc:  # noqa: BLE001 - a browser that does not start is the failure
            pytest.fail(f"headless Chromium did not start: {type(exc).__name__}: {exc}\n{INSTALL_HINT}",
                        pytrace=False)
        driver.execute_cdp_cmd("Browser.setDownloadBehavior",
                               {"behavior": "allow", "downloadPath": str(path.base / "downloads")})
        yield SimpleNamespace(server=server, driver=driver)
    finally:
        if driver is not None:
            driver.quit()
        server.stop()


def _screenshot(driver, grade_id: str, name: str) -> Path:
    assert driver.execute_script(_SCROLL_TO, grade_id), f"no cell {grade_id}"
    time.sleep(0.5)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    target = SCREENSHOTS / name
    target.unlink(missing_ok=True)
    assert driver.save_screenshot(str(target))
    assert target.stat().st_size > 20_000, f"{target} is suspiciously small"
    return target


def _checks(cells) -> dict:
    return {c["id"]: c for c in cells if (c["id"] or "").endswith("-check")}


@pytest.mark.timeout(600)
def test_2_in_jupyterlab_the_self_check_fails_on_the_stub_and_passes_once_solved(path, lab):
    start = time.monotonic()
    driver, ada = lab.driver, path.students["ada"]
    notebook = ada.home / AID / f"{AID}.ipynb"
    driver.get(lab.server.url(f"{AID}/{AID}.ipynb"))
    _wait(driver, "the notebook opening with an idle kernel", _idle, timeout=120)
    driver.execute_script("window.jupyterapp.shell.collapseLeft()")  # room for the self-check tables

    # The stub: Run All stops at the first self-check, which fails with its table.
    _menu(driver, "Run", "Run All Cells")
    cells = _wait(driver, "Run All Cells on the stub",
                  lambda s, cs: _idle(s, cs) and _checks(cs)[f"{AID}-sum-check"]["count"] is not None)
    first = _checks(cells)[f"{AID}-sum-check"]
    assert first["errors"] and first["errors"][0].startswith("AssertionError: self-check"), first
    assert "NotImplementedError" in first["text"] and re.search(r"\b0 of \d+ cases pass\.", first["text"]), first
    assert _checks(cells)[f"{AID}-step-check"]["count"] is None, "Run All Cells went on past the failing cell"
    _screenshot(driver, f"{AID}-sum-check", "jupyterlab-self-check-fails.png")
    verdict = _validate(driver)
    assert "Success" not in verdict and "failed" in verdict.lower(), f"Validate on the stub said:\n{verdict}"
    _close_dialog(driver)

    # The student writes the solutions into the solution cells (the model's text, as typing would set it).
    solution_ids = set(course.solution_cells(AID))
    solved = {c.metadata["nbgrader"]["grade_id"]: c.source for c in course.reference_submission(AID).cells
              if c.metadata.get("nbgrader", {}).get("grade_id") in solution_ids}
    assert driver.execute_script(_TYPE, solved) == len(solved) == 3

    # "Before you submit": Restart Kernel and Run All Cells.
    _menu(driver, "Run", "Restart Kernel and Run All Cells…")
    _dialog(driver, lambda t: "Restart" in t, timeout=20)
    _close_dialog(driver)
    code = sum(c.cell_type == "code" for c in nbformat.read(notebook, as_version=4).cells)
    fresh_run = list(range(1, code + 1))  # every code cell executed once, in order, by the restarted kernel
    cells = _wait(driver, "Restart Kernel and Run All Cells on the solved notebook",
                  lambda s, cs: _idle(s, cs) and [c["count"] for c in cs if c["type"] == "code"] == fresh_run,
                  timeout=240)
    checks = _checks(cells)
    assert len(checks) == 3, sorted(checks)
    for grade_id, cell in checks.items():
        assert not cell["errors"], f"{grade_id} fails on the solved notebook: {cell['errors']}\n{cell['text'][-2000:]}"
        counts = re.findall(r"\b(\d+) of (\d+) cases pass\.", cell["text"])
        assert counts and counts[-1][0] == counts[-1][1], f"{grade_id}: {cell['text'][-1500:]}"
    assert not [c["id"] for c in cells if c["errors"]], "cells with errors on the solved notebook"
    shot = _screenshot(driver, f"{AID}-sum-check", "jupyterlab-self-check.png")

    # Save, Validate, Download.
    _menu(driver, "File", "Save Notebook")
    _wait(driver, "saving the notebook", lambda s, cs: not s["dirty"], timeout=30, settle=0.5)
    saved = nbformat.read(notebook, as_version=4)
    sources = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in saved.cells}
    assert all(sources[k] == v for k, v in solved.items()), "the saved notebook lacks the solutions typed in"
    verdict = _validate(driver)
    assert "Success! Your notebook passes all the tests." in verdict, f"Validate, solved notebook:\n{verdict}"
    _screenshot(driver, f"{AID}-sum-check", "jupyterlab-validate.png")
    _close_dialog(driver)
    _menu(driver, "File", "Download")
    downloaded = path.base / "downloads" / f"{AID}.ipynb"
    deadline = time.monotonic() + 30
    while not downloaded.is_file() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert downloaded.is_file(), f"File > Download wrote nothing: {list((path.base / 'downloads').glob('*'))}"
    assert downloaded.read_bytes() == notebook.read_bytes(), "the downloaded notebook is not the saved one"

    # nbgrader's Assignments tab (the JupyterHub way to submit) lists the fetched assignment with a Submit button.
    _menu(driver, "Nbgrader", "Assignment List")
    deadline, section = time.monotonic() + 60, ""
    while time.monotonic() < deadline:
        text = driver.execute_script("return document.body.innerText")
        section = text.partition("Downloaded assignments")[2].partition("Submitted assignments")[0]
        if AID in section:
            break
        time.sleep(0.3)
    assert AID in section and COURSE_ID in section and "Submit" in section, f"Assignments tab: {section[:500]!r}"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SCREENSHOTS / "jupyterlab-assignments.png"))
    path.times["JupyterLab"] = time.monotonic() - start
    print(f"\nscreenshot: {shot.relative_to(ROOT)}")
    path.done.add("jupyterlab")


# --------------------------------------------------------------------------- 3. submit


def test_3_ada_submits_through_the_exchange_and_bob_through_an_lms_export(path):
    _needs(path, "jupyterlab")
    start = time.monotonic()
    ada = path.students["ada"]
    nbgrader(ada.home, ada.env, "submit", AID)
    inbound = sorted((path.exchange / COURSE_ID / "inbound").glob(f"ada+{AID}+*"))
    assert len(inbound) == 1, inbound
    assert (inbound[0] / f"{AID}.ipynb").read_bytes() == (ada.home / AID / f"{AID}.ipynb").read_bytes()
    assert sorted(p.name for p in inbound[0].iterdir()) == [f"{AID}.ipynb", "submission_secret.txt", "timestamp.txt"]

    # bob downloaded his notebook from JupyterLab like ada, and uploaded it to the LMS; the
    # instructor puts the LMS's export of the submissions into nbgrader's downloaded/<id>/archive/.
    snippet = course.Snippet.parse(BOB_SNIPPET)
    archive = path.instructor / "downloaded" / AID / "archive"
    archive.mkdir(parents=True)
    nbformat.write(course.build_submission(AID, snippet.cells, release=path.instructor / "release"), archive / LMS_FILE)
    # carol uploads a correct notebook, but under the name her browser gave a second download
    nbformat.write(course.reference_submission(AID, release=path.instructor / "release"), archive / RENAMED_FILE)
    path.bob = snippet
    path.times["submit"] = time.monotonic() - start
    path.done.add("submit")


# --------------------------------------------------------------------------- 4. collect and autograde


def test_4_the_instructor_collects_both_paths_and_autogrades(path):
    _needs(path, "submit")
    from nbgrader.api import Gradebook, MissingEntry

    start = time.monotonic()
    nbgrader(path.instructor, path.ienv, "collect", AID)
    nbgrader(path.instructor, path.ienv, "zip_collect", AID)
    submitted = path.instructor / "submitted"
    assert sorted(p.name for p in submitted.iterdir()) == ["ada", "bob", "carol"]
    ada = path.students["ada"]
    assert (submitted / "ada" / AID / f"{AID}.ipynb").read_bytes() == (ada.home / AID / f"{AID}.ipynb").read_bytes()
    assert (submitted / "bob" / AID / f"{AID}.ipynb").read_bytes() == (
        path.instructor / "downloaded" / AID / "archive" / LMS_FILE).read_bytes()

    # One autograde for the class; it reports an error for carol, whose notebook has another name.
    log = nbgrader(path.instructor, path.ienv, "autograde", AID, timeout=600, succeeds=False)
    errors = re.findall(r"error processing assignment '\w+' for student '(\w+)'", log)
    assert errors == ["carol"], f"autograde errors for {errors}, expected carol's only:\n{log[-5000:]}"
    points = course.graded_cells(AID)
    with Gradebook(f"sqlite:///{path.instructor / 'gradebook.db'}") as gb:
        got = {}
        for student in ("ada", "bob", "carol"):
            try:
                sub = gb.find_submission(AID, student)
            except MissingEntry:
                got[student] = None
                continue
            got[student] = (float(sub.score), float(sub.max_score),
                            {g.name: float(g.score) for nb in sub.notebooks for g in nb.grades})
    assert got["ada"] == (10.0, 10.0, points), f"ada (the reference solution): {got['ada']}"
    assert got["bob"][2] == path.bob.expect, f"bob ({BOB_SNIPPET.name}): {got['bob']}, expected {path.bob.expect}"
    assert got["bob"][:2] == (sum(path.bob.expect.values()), 10.0), got["bob"]
    assert got["carol"] is None or got["carol"][0] == 0.0, f"carol's renamed notebook was graded: {got['carol']}"
    path.times["collect and autograde"] = time.monotonic() - start
    path.done.add("autograde")


def test_4b_the_class_autograder_collects_and_grades_the_same_submissions(path):
    """The same class through the course's own grader: exchange and LMS export collected, graded sandboxed.

    carol's renamed upload, which nbgrader's autograde could not grade, is collected under the
    exercise's name and gets the reference solution's full score.
    """
    _needs(path, "submit")
    from autograder.gradebook import Writer
    from autograder.sandbox import SandboxUnavailable, check_available

    try:
        check_available()
    except SandboxUnavailable as exc:
        pytest.skip(f"no sandbox: {exc}")
    start = time.monotonic()
    root = path.base / "autograder-course"
    root.mkdir()

    def autograder(*args: str) -> str:
        out = subprocess.run([sys.executable, "-m", "autograder", "--course", str(root), *args], capture_output=True,
                             text=True, cwd=course.REPO, env=path.ienv, timeout=900)
        assert out.returncode == 0, f"autograder {' '.join(args)}:\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}"
        return out.stdout

    assert "ada" in autograder("collect", AID, "--exchange", str(path.exchange))
    lms = autograder("collect", AID, "--from", str(path.instructor / "downloaded" / AID / "archive"))
    assert "2 collected (bob, carol)" in lms, lms
    assert (root / "submitted" / "carol" / AID / f"{AID}.ipynb").is_file()
    autograder("grade", AID, "--cpu", "--workers=1", "--cell-timeout=120", "--timeout=400")
    with Writer(f"sqlite:///{root / 'gradebook.db'}", root) as writer:
        records = {r["student"]: r for r in writer.records(AID)}
    points = course.graded_cells(AID)
    assert {s: r["outcome"] for s, r in records.items()} == {"ada": "graded", "bob": "graded", "carol": "graded"}
    assert {k: v["score"] for k, v in records["ada"]["cells"].items()} == points
    assert {k: v["score"] for k, v in records["bob"]["cells"].items()} == path.bob.expect
    assert records["carol"]["score"] == 10.0
    assert all(r["cpu_only"] and r["sandbox"].startswith("bwrap") for r in records.values())
    path.times["class autograder: collect and grade"] = time.monotonic() - start


# --------------------------------------------------------------------------- 5. feedback


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def html_text(html: str) -> str:
    """The text of an HTML page as a reader sees it (highlighted code splits lines into many tags)."""
    parser = _Text()
    parser.feed(html)
    return "".join(parser.parts)


def revealed(text: str, submission: Path) -> list[str]:
    """Secret lines (solutions, hidden tests) in ``text`` that the student's own submission does not hold."""
    own = "\n".join(c.source for c in nbformat.read(submission, as_version=4).cells)
    return sorted(line for line in course.secret_lines(AID) if line in text and line not in own)


def test_5_feedback_reaches_the_student_without_the_hidden_tests(path):
    _needs(path, "autograde")
    start = time.monotonic()
    nbgrader(path.instructor, path.ienv, "generate_feedback", AID)
    # release_feedback needs the exchange's timestamp and secret: only for exchange submissions
    # (bob's feedback goes back through the LMS: feedback/bob/allreduce/allreduce.html).
    nbgrader(path.instructor, path.ienv, "release_feedback", AID, "--student", "ada")
    ada = path.students["ada"]
    nbgrader(ada.home, ada.env, "fetch_feedback", AID)
    fetched = sorted((ada.home / AID / "feedback").glob(f"*/{AID}.html"))
    assert len(fetched) == 1, sorted(str(p) for p in (ada.home / AID).rglob("*"))
    feedback = {"ada": fetched[0], "bob": path.instructor / "feedback" / "bob" / AID / f"{AID}.html"}
    assert fetched[0].read_bytes() == (path.instructor / "feedback" / "ada" / AID / f"{AID}.html").read_bytes()

    texts = {s: html_text(p.read_text()) for s, p in feedback.items()}
    assert "(Score: 10.0 / 10.0)" in texts["ada"], texts["ada"][:500]
    assert f"(Score: {sum(path.bob.expect.values()):.1f} / 10.0)" in texts["bob"], texts["bob"][:500]
    # bob still learns what failed: the messages of the failed hidden tests are there
    assert "CheckFailed" in texts["bob"] and "it still holds its own value" in texts["bob"]

    problems = []
    for student, text in texts.items():
        submission = path.instructor / "submitted" / student / AID / f"{AID}.ipynb"
        autograded = path.instructor / "autograded" / student / AID / f"{AID}.ipynb"
        # the check has something to find: the instructor's graded copy holds the hidden tests
        graded = "\n".join(c.source for c in nbformat.read(autograded, as_version=4).cells)
        assert len(revealed(graded, submission)) >= 50, f"{autograded}: no hidden test found in it"
        leaked = revealed(text, submission)
        if leaked:
            problems.append(f"{student}'s feedback shows {len(leaked)} secret lines, e.g.\n    "
                            + "\n    ".join(leaked[:8]))
    path.times["feedback"] = time.monotonic() - start
    print("\nstudent path, seconds per step: " + ", ".join(f"{k} {v:.1f}" for k, v in path.times.items()))
    assert not problems, "\n".join(problems)
