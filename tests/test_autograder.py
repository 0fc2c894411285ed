"""The class autograder, for real: Dask workers, bubblewrap sandboxes, nbgrader's gradebook, the CLI.

The sample class (:mod:`autograder.sample`: the reference, the stub, every
wrong-submission fixture and the adversarial submissions, as an LMS zip) is
collected and graded once by the ``autograder`` command, as an instructor
would, and every record is compared with what its submission must get.  The
other tests read that run, or grade small classes of their own: crash safety
(the grader killed with SIGKILL in the middle), infrastructure failures (a GPU
exercise on a runner without GPU), refusing to run without the sandbox.
"""

from __future__ import annotations

import base64
import csv
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import early
import nbformat
import pytest
import torch

from autograder import course, notebook, redteam, sample
from autograder.gradebook import Writer
from autograder.sandbox import SandboxUnavailable, check_available

ASSIGNMENT = "gradscaler"
PY = sys.executable
# Short limits: the adversarial loops and hogs should not make the suite slow.
LIMITS = ["--cpu", "--workers=2", "--cell-timeout=20", "--timeout=120", "--memory=2", "--processes=256"]


def _sandbox_or_skip() -> None:
    try:
        check_available()
    except SandboxUnavailable as exc:
        pytest.skip(f"no sandbox on this machine: {exc}")


def autograder(root: Path, *args: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess:
    result = subprocess.run([PY, "-m", "autograder", "--course", str(root), *args], capture_output=True, text=True,
                            timeout=timeout, cwd=course.REPO)
    if check and result.returncode != 0:
        raise AssertionError(f"autograder {' '.join(args)} exited {result.returncode}:\n{result.stdout[-4000:]}\n"
                             f"{result.stderr[-4000:]}")
    return result


# ---------------------------------------------------------------------------------------------
# Pure parts
# ---------------------------------------------------------------------------------------------


def _nbs(assignment: str = ASSIGNMENT) -> tuple[nbformat.NotebookNode, nbformat.NotebookNode]:
    return (nbformat.read(course.source_notebook(assignment), as_version=4),
            nbformat.read(course.release_notebook(assignment), as_version=4))


def test_prepare_restores_and_reports_tampering() -> None:
    source, release = _nbs()
    nb = course.reference_submission(ASSIGNMENT)
    for cell in nb.cells:
        gid = notebook.grade_id(cell)
        if gid == "gradscaler-step-check":
            cell.source = "print('fine')\n"
        if gid == "gradscaler-e2e-test":
            cell.source = "pass\n"
    nb.cells = [c for c in nb.cells if notebook.grade_id(c) != "gradscaler-state-test"]
    prepared = notebook.prepare(nbformat.writes(nb), source, release, ASSIGNMENT)
    assert prepared.tampered == ["edited locked cell gradscaler-step-check (restored)",
                                 "edited test cell gradscaler-e2e-test (restored)",
                                 "deleted gradscaler-state-test (put back)"]
    restored = {notebook.grade_id(c): c.source for c in prepared.notebook.cells if notebook.grade_id(c)}
    originals = {notebook.grade_id(c): c.source for c in source.cells if notebook.grade_id(c)}
    for gid in ("gradscaler-step-check", "gradscaler-e2e-test", "gradscaler-state-test"):
        assert restored[gid] == originals[gid]
    # The order of the instructor's cells is kept, the deleted one back in its place.
    order = [notebook.grade_id(c) for c in prepared.notebook.cells if notebook.grade_id(c)]
    assert order == [notebook.grade_id(c) for c in source.cells if notebook.grade_id(c)]
    # The student's kernel never receives a hidden test; the check run gets all of them.
    assert all(c.source == "" for c in prepared.student_run().cells if notebook.is_test(c))
    job = prepared.check_job()
    assert [t["grade_id"] for t in job["tests"]] == list(course.graded_cells(ASSIGNMENT))
    assert {s["grade_id"]: s["names"] for s in job["solutions"]} == {
        "gradscaler-unscale": ["unscale_grads_"], "gradscaler-scaler": ["FLOAT32_MAX", "GradScaler"]}


@pytest.mark.parametrize("assignment", course.assignments())
def test_trusted_grading_does_not_rerun_the_self_checks(assignment: str) -> None:
    """The self-checks (read-only, ungraded, ``-check``) are each exercise's work done twice when grading:
    the kernel gets them blank in trusted mode, and the feedback says they were not re-run; nbgrader mode
    runs them as nbgrader does.  Nothing else is left out: the solutions and the setup run as submitted."""
    source, release = _nbs(assignment)
    checks = {notebook.grade_id(c) for c in source.cells if notebook.is_self_check(c)}
    named = {notebook.grade_id(c) for c in source.cells
             if str(notebook.grade_id(c) or "").endswith("-check") and "SelfCheck(" in c.source}
    assert checks and checks == named
    submission = nbformat.writes(course.reference_submission(assignment))
    trusted = notebook.prepare(submission, source, release, assignment)
    run = trusted.student_run()
    for cell, ran in zip(trusted.notebook.cells, run.cells):
        blank = notebook.is_test(cell) or notebook.grade_id(cell) in checks
        assert (ran.source == "") == (blank or not cell.source.strip()), notebook.grade_id(cell)
    merged = notebook.merge(trusted, run, {})
    for cell in merged.cells:
        if notebook.grade_id(cell) in checks:
            assert [o.get("text") for o in cell.outputs] == [notebook.SELF_CHECK_NOTE]
    both = notebook.prepare(submission, source, release, assignment, keep_tests=True).student_run()
    assert {notebook.grade_id(c) for c in both.cells if c.source.strip()} >= checks


def test_prepare_rejects_what_is_not_the_assignment() -> None:
    source, release = _nbs()
    others = {"allreduce": notebook.grade_ids(_nbs("allreduce")[0])}
    with pytest.raises(notebook.InvalidSubmission, match="invalid JSON at line 1"):
        notebook.prepare(b'{"cells": [', source, release, ASSIGNMENT)
    with pytest.raises(notebook.InvalidSubmission, match="not UTF-8"):
        notebook.prepare(b"\xff\xfe\x00", source, release, ASSIGNMENT)
    with pytest.raises(notebook.InvalidSubmission, match="assignment 'allreduce', not 'gradscaler'"):
        notebook.prepare(nbformat.writes(course.reference_submission("allreduce")), source, release, ASSIGNMENT,
                         others)
    stripped = course.reference_submission(ASSIGNMENT)
    for cell in stripped.cells:
        cell.metadata.pop("nbgrader", None)
    with pytest.raises(notebook.InvalidSubmission, match="none of its graded or locked cells"):
        notebook.prepare(nbformat.writes(stripped), source, release, ASSIGNMENT, others)


def test_defined_names() -> None:
    assert notebook.defined_names("import torch.nn as nn\nfrom x import y\ndef f(): pass\nclass C: pass\n"
                                  "a, (b, c) = 1, (2, 3)\nz: int = 3\n") == {"nn", "y", "f", "C", "a", "b", "c", "z"}
    assert notebook.defined_names("def broken(:\n") == set()


# ---------------------------------------------------------------------------------------------
# The sample class, graded once by the command
# ---------------------------------------------------------------------------------------------


DECOY_ROOTS = [Path("/srv"), Path("/opt"), Path("/var/tmp"), Path("/home"), course.REPO.parent]


def _make_decoys() -> tuple[list[Path], list[Path]]:
    """Copies of the course's solutions where a careless machine keeps them: another clone beside this one,
    a shared folder, a home folder.  The sandboxes must not see any of them.  (files, folders to remove)"""
    made, files = [], []
    for root in DECOY_ROOTS:
        if not os.access(root, os.W_OK):
            continue
        top = root / f"dlperf-decoy-{os.getpid()}"
        target = top / "course" / "solutions" / ASSIGNMENT
        target.mkdir(parents=True)
        (target / f"{ASSIGNMENT}.ipynb").write_bytes(course.source_notebook(ASSIGNMENT).read_bytes())
        for path in (top, top / "course", top / "course" / "solutions", target, target / f"{ASSIGNMENT}.ipynb"):
            path.chmod(0o755 if path.is_dir() else 0o644)   # readable by anyone: only the sandbox may stop it
        made.append(top)
        files.append(target / f"{ASSIGNMENT}.ipynb")
    return files, made


@early.early("graded_class", order=2)
def _grade_the_sample_class(session: pytest.Session) -> dict:
    """The sample class collected from an LMS export and graded by the command, with the decoys in place
    (an early job: it runs beside the other tests)."""
    _sandbox_or_skip()
    decoys, made = _make_decoys()
    try:
        root = early.tmp(session, "class") / "course"
        root.mkdir()
        samples = sample.sample_class(ASSIGNMENT, root)
        export = sample.write_export(samples, root.parent / "export.zip")
        collected = autograder(root, "collect", ASSIGNMENT, "--from", str(export))
        start = time.monotonic()
        graded = autograder(root, "grade", ASSIGNMENT, *LIMITS)
        seconds = time.monotonic() - start
    except BaseException:
        for top in made:
            shutil.rmtree(top, ignore_errors=True)
        raise
    with Writer(f"sqlite:///{root / 'gradebook.db'}", root) as writer:
        records = {r["student"]: r for r in writer.records(ASSIGNMENT)}
    return {"root": root, "samples": samples, "records": records, "collect": collected.stdout,
            "grade": graded.stdout, "seconds": seconds, "decoys": decoys, "made": made}


@pytest.fixture(scope="module")
def graded_class() -> dict:
    graded = early.result("graded_class")
    print(graded["grade"][-6000:])
    yield graded
    for top in graded["made"]:
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="module")
def decoys(graded_class: dict) -> list[Path]:
    """The decoys that were in place while the class was graded."""
    return graded_class["decoys"]


def test_every_record_is_what_its_submission_must_get(graded_class: dict) -> None:
    problems = sample.compare(graded_class["samples"], list(graded_class["records"].values()))
    assert not problems, "\n".join(problems)
    assert set(graded_class["records"]) == set(sample.expected(graded_class["samples"]))


def test_collection_reports_what_it_did_not_take(graded_class: dict) -> None:
    out = graded_class["collect"]
    assert "superseded" in out and "twice_11111_1_submission.ipynb" in out
    assert "corrupt" in out and "not valid JSON" in out


def test_records_say_where_and_how(graded_class: dict) -> None:
    for student, record in graded_class["records"].items():
        if record["outcome"] == "invalid":
            assert record["score"] is None and record["sandbox"] == ""
            continue
        assert record["sandbox"].startswith("bwrap, no network"), (student, record["sandbox"])
        assert record["device"] == "cpu" and record["cpu_only"], (student, record)
        assert record["host"] and record["worker"] in ("cpu0", "cpu1")
        assert record["seconds"]["total"] > 0 and record["seconds"]["checks"] > 0
    assert graded_class["records"]["loop"]["reason"] == "cell #" + str(
        len(course.reference_submission(ASSIGNMENT).cells) + 1) + " ran past the 20 s limit"
    assert "died" in graded_class["records"]["segfault"]["reason"]


def _graded_notebook(root: Path, student: str) -> nbformat.NotebookNode:
    return nbformat.read(root / "autograded" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)


def _outputs(nb: nbformat.NotebookNode) -> str:
    """Everything a graded notebook's cells output, as text: a cell's stream outputs joined (a kernel may
    split one print into several chunks), its other outputs as JSON."""
    parts = []
    for cell in nb.cells:
        outputs = cell.get("outputs", [])
        parts.append("".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream"))
        parts += [json.dumps(o) for o in outputs if o.get("output_type") != "stream"]
    return "\n".join(parts)


def test_sandbox_kept_student_code_in(graded_class: dict) -> None:
    root = graded_class["root"]
    snoop = _outputs(_graded_notebook(root, "snoop"))
    assert "READABLE: nothing" in snoop, snoop[-2000:]
    writer = _outputs(_graded_notebook(root, "writer"))
    assert "WROTE" not in writer and "could not write" in writer
    net = _outputs(_graded_notebook(root, "netcat"))
    assert "CONNECTED" not in net and net.count("no connection to") == 4
    big = root / "autograded" / "bigoutput" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    assert big.stat().st_size < 4 * 2**20 and "output truncated" in big.read_text()
    memhog = graded_class["records"]["memhog"]
    assert memhog["outcome"] == "graded" or "memory limit" in memhog["reason"], memhog
    # Nothing a submission started is still running (this checkout's processes: another checkout's
    # grader may be running on the same machine; and not this test process's own children: the zygote
    # that tests of the checks run in this process keep for reuse, and a check run kept warm in a sandbox by
    # tests that grade in this process: descendants of this process, which end with it).
    leftovers, parents, commands = [], {}, {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                parents[int(proc.name)] = next(int(line.split()[1]) for line in
                                               (proc / "status").read_text().splitlines() if line.startswith("PPid:"))
            except (OSError, StopIteration, ValueError):
                continue
            commands[int(proc.name)] = cmd
    for pid, cmd in commands.items():
        ancestor, hops = parents[pid], 0
        while ancestor > 1 and ancestor != os.getpid() and hops < 64:     # (a reused pid cannot loop)
            ancestor, hops = parents.get(ancestor, 0), hops + 1
        if ancestor == os.getpid():
            continue
        # (a path followed by '/' or a space: /check/work/main-ci is not /work/main's)
        ours = any(f"{path}{end}" in f"{cmd} " for path in (course.REPO, root) for end in ("/", " "))
        if ours and ("dlperf-sandbox" in cmd or "ipykernel_launcher" in cmd or "autograder.checks" in cmd
                     or "autograder.warm_kernel" in cmd or "autograder.trusted.zygote" in cmd):
            leftovers.append(cmd[:200])
    assert not leftovers, leftovers


def _reports(nb: nbformat.NotebookNode, tag: str) -> list[list[str]]:
    """What a red-team attack reported (``TAG[n]:zlib+base64``) in a graded notebook's outputs."""
    import zlib

    return [json.loads(zlib.decompress(base64.b64decode(blob)))
            for blob in re.findall(tag + r"\[\d+\]:([A-Za-z0-9+/=]+)", _outputs(nb))]


def test_red_team_finds_nothing_worth_taking(graded_class: dict, decoys: list[Path],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The attacks ran (each left its report) and found no hidden check, no expected value, no course file."""
    root = graded_class["root"]
    # The search, run from the checkout outside the sandbox, finds the decoys (the one beside the
    # checkout wherever the checkout is): the test below can fail.
    monkeypatch.chdir(course.REPO)
    scope: dict = {}
    exec(redteam._FIND, scope)  # noqa: S102 - our own attack code
    assert decoys and set(map(str, decoys)) <= set(scope["_course_files"]())
    exfil = _reports(_graded_notebook(root, "exfiltrate"), "EXFIL")
    assert exfil, "the exfiltrate attack left no report"
    secret = course.secret_lines(ASSIGNMENT)
    for found in exfil:
        text = "\n".join(map(str, found))
        assert not [line for line in secret if line in text], text[:2000]
        assert not [f for f in found if "solutions" in f or "gradebook" in f or "autograder-key" in f], found
    files = _reports(_graded_notebook(root, "read-files"), "FILES")
    assert files and all(found == [] for found in files), files     # the kernel's report: nothing
    assert graded_class["records"]["kill-all"]["outcome"] == "graded"  # the checker was out of its reach


def test_gradebook_is_nbgraders_and_consistent(graded_class: dict) -> None:
    from nbgrader.api import Gradebook, MissingEntry

    root = graded_class["root"]
    db = root / "gradebook.db"
    assert sqlite3.connect(db).execute("PRAGMA integrity_check").fetchone() == ("ok",)
    with Gradebook(f"sqlite:///{db}") as gb:
        for student, record in graded_class["records"].items():
            if record["score"] is None:
                with pytest.raises(MissingEntry):
                    gb.find_submission(ASSIGNMENT, student)
                continue
            submission = gb.find_submission(ASSIGNMENT, student)
            assert submission.score == record["score"], student
            cells = {g.name: g.auto_score for nb in submission.notebooks for g in nb.grades}
            assert cells == {k: v["score"] for k, v in record["cells"].items()}, student
    # The 'writer' submission tried UPDATE grade SET auto_score = 1000.
    assert not sqlite3.connect(db).execute("SELECT count(*) FROM grade WHERE auto_score > 10").fetchone()[0]


def test_feedback_export_status_report(graded_class: dict) -> None:
    root = graded_class["root"]
    autograder(root, "feedback", ASSIGNMENT)
    hidden = course.secret_lines(ASSIGNMENT, solutions=False)
    pages = sorted((root / "feedback").glob(f"*/{ASSIGNMENT}/*.html"))
    graded = [s for s, r in graded_class["records"].items() if r["score"] is not None]
    assert len(pages) == len(graded) and len(hidden) > 100
    for page in pages:
        text = page.read_text()
        leaked = [line for line in hidden if line in text]
        assert not leaked, (page, leaked[:3])
    never = (root / "feedback" / "never-skips" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    assert "CheckFailed" in never   # the failed check's message is there, its source is not

    autograder(root, "export", "--to", str(root / "grades.csv"))
    rows = {r["student_id"]: r for r in csv.DictReader((root / "grades.csv").open())}
    assert set(rows) == set(graded_class["records"])
    assert rows["reference"]["score"] == "10" and rows["reference"]["outcome"] == "graded"
    assert rows["corrupt"]["score"] == "" and rows["corrupt"]["outcome"] == "invalid"

    status = autograder(root, "status", ASSIGNMENT).stdout
    n = len(graded_class["records"])
    assert f"{ASSIGNMENT}: {n} collected, {n} recorded" in status and "0 left to grade" in status
    again = autograder(root, "grade", ASSIGNMENT, *LIMITS).stdout
    assert f"{n} submission(s) already graded, not graded again" in again and "nothing left to grade" in again
    report = root / "reports" / f"{ASSIGNMENT}.html"
    assert report.is_file() and "reference" in report.read_text()


OTHER_EXERCISES = ["allreduce", "compile_clean", "ddp_buckets", "flash_attention", "no_sync_loop", "pipeline_schedule",
                   "ring_allreduce", "ring_attention", "roofline_place", "ssp_server", "tensor_parallel", "triton_softmax",
                   "zero1"]


@early.early("fixtures_graded", order=0)
def _grade_every_fixture(session: pytest.Session) -> dict:
    """The fixtures of the exercises whose test below is selected, graded in ONE run (``autograder grade
    --all`` on a course holding only theirs): one start-up and one pool of warm sandboxes for all of them,
    as an instructor grades a term (``-k "... and zero1"`` grades zero1's alone).  An early job: it runs
    beside the other tests."""
    _sandbox_or_skip()
    wanted = [item.callspec.params["assignment"] for item in session.items
              if getattr(item, "module", None) is sys.modules[__name__] and hasattr(item, "callspec")
              and item.originalname == "test_every_fixture_of_the_other_exercises"]
    root = early.tmp(session, "fixtures") / "course"
    samples, broken = {}, {}
    for assignment in dict.fromkeys(wanted):
        try:
            samples[assignment] = sample.honest(assignment)
        except Exception as exc:  # noqa: BLE001 - that exercise's test fails with it, the others are graded
            broken[assignment] = exc
            continue
        sample.place(samples[assignment], root, assignment)
    root.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    run = autograder(root, "grade", "--all", "--cpu", "--workers=2", "--cell-timeout=120", "--timeout=300",
                     check=False, timeout=3600)
    seconds = time.monotonic() - start
    records = {}
    if (root / "gradebook.db").exists():
        with Writer(f"sqlite:///{root / 'gradebook.db'}", root) as writer:
            records = {assignment: writer.records(assignment) for assignment in samples}
    return {"samples": samples, "records": records, "run": run, "broken": broken, "seconds": seconds,
            "root": root}


@pytest.fixture(scope="module")
def fixtures_graded() -> dict:
    graded = early.result("fixtures_graded")
    print(f"{len(graded['samples'])} exercise(s), {sum(map(len, graded['samples'].values()))} submissions graded "
          f"in one run in {graded['seconds']:.0f} s\n" + graded["run"].stdout[-6000:])
    return graded


@pytest.mark.parametrize("assignment", OTHER_EXERCISES)
def test_every_fixture_of_the_other_exercises(assignment: str, fixtures_graded: dict) -> None:
    """The reference, the stub and every wrong-submission fixture get their stated per-cell scores.

    (gradscaler's are in the sample class above.)  These are the scores nbgrader's own autograde
    gives them too: the hidden checks give the same verdict in the check run as in the kernel.  Every
    selected exercise is graded in the same run (``fixtures_graded``).
    """
    if assignment in fixtures_graded["broken"]:
        raise fixtures_graded["broken"][assignment]
    run = fixtures_graded["run"]
    assert run.returncode == 0, f"autograder grade --all exited {run.returncode}:\n{run.stdout[-4000:]}\n" \
                                f"{run.stderr[-4000:]}"
    graded = fixtures_graded["samples"]
    if len(graded) > 1:   # one run for all of them, its progress counted over all
        total = sum(map(len, graded.values()))
        assert f"grading {total} submission(s) of {len(graded)} assignment(s)" in run.stdout, run.stdout[-3000:]
    samples = graded[assignment]
    assert len(samples) >= 7
    records = fixtures_graded["records"][assignment]
    problems = sample.compare(samples, records)
    assert not problems, "\n".join([*problems, *sample.explain(fixtures_graded["root"], assignment, problems, records)])


# ---------------------------------------------------------------------------------------------
# Small classes of their own
# ---------------------------------------------------------------------------------------------


def _small_class(root: Path, n: int) -> list[sample.Sample]:
    root.mkdir(parents=True)
    samples = sample.honest(ASSIGNMENT)[:n]
    export = sample.write_export(samples, root.parent / f"{root.name}.zip")
    autograder(root, "collect", ASSIGNMENT, "--from", str(export))
    return samples


def test_killed_grader_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    _sandbox_or_skip()
    root = tmp_path / "course"
    samples = _small_class(root, 8)
    db = root / "gradebook.db"
    process = subprocess.Popen([PY, "-m", "autograder", "--course", str(root), "grade", ASSIGNMENT, *LIMITS],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=course.REPO,
                               start_new_session=True)
    deadline = time.monotonic() + 600
    recorded = 0
    while time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.5)
        if db.exists():
            try:
                recorded = sqlite3.connect(db, timeout=1).execute("SELECT count(*) FROM autograder_runs").fetchone()[0]
            except sqlite3.OperationalError:
                continue
            if recorded >= 2:
                break
    assert process.poll() is None, "the grader finished before it could be killed"
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert 2 <= recorded < len(samples)
    assert sqlite3.connect(db).execute("PRAGMA integrity_check").fetchone() == ("ok",)

    out = autograder(root, "grade", ASSIGNMENT, *LIMITS).stdout
    with Writer(f"sqlite:///{db}", root) as writer:
        records = writer.records(ASSIGNMENT)
        histories = {s.student: writer.history(ASSIGNMENT, s.student) for s in samples}
    assert not sample.compare(samples, records), sample.compare(samples, records)
    assert all(len(h) == 1 for h in histories.values()), {k: len(v) for k, v in histories.items()}
    first = sqlite3.connect(db).execute("SELECT count(*) FROM autograder_runs").fetchone()[0]
    assert first == len(samples)
    already = int(out.split(" submission(s) already graded")[0].rsplit("\n", 1)[-1].split(": ")[-1])
    assert already >= 2 and f"grading {len(samples) - already} submission(s)" in out


def test_gpu_exercise_without_gpu_is_an_infrastructure_failure(tmp_path: Path) -> None:
    _sandbox_or_skip()
    root = tmp_path / "course"
    _small_class(root, 2)
    out = autograder(root, "grade", ASSIGNMENT, "--workers=1").stdout
    with Writer(f"sqlite:///{root / 'gradebook.db'}", root) as writer:
        records = writer.records(ASSIGNMENT)
    assert [r["outcome"] for r in records] == ["infrastructure failure"] * 2, out
    assert all("needs a GPU" in r["reason"] and r["score"] is None for r in records)
    status = autograder(root, "status", ASSIGNMENT).stdout
    assert "2 left to grade" in status
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        assert gb.assignments[0].submissions == []


def test_refuses_to_grade_without_the_sandbox(tmp_path: Path) -> None:
    root = tmp_path / "course"
    root.mkdir()
    env = {**os.environ, "PATH": str(Path(PY).parent)}
    result = subprocess.run([PY, "-m", "autograder", "--course", str(root), "grade", ASSIGNMENT, "--cpu"],
                            capture_output=True, text=True, env=env, cwd=course.REPO, timeout=120)
    assert result.returncode == 2
    assert "bubblewrap" in result.stderr and "--no-sandbox" in result.stderr


def test_redact_replaces_hidden_lines_raw_and_escaped() -> None:
    from autograder.feedback import REDACTED, redact

    secrets = {"assert scaler._scale == 8.0, 'backoff'", "for step in range(100):"}
    text = "x\nassert scaler._scale == 8.0, &#x27;backoff&#x27;\nfor step in range(100):\ny"
    out, n = redact(text, secrets)
    assert n == 2 and out == f"x\n{REDACTED}\n{REDACTED}\ny"
    assert redact("nothing here", secrets) == ("nothing here", 0)


def test_options_come_from_the_command_line_then_autograder_toml(tmp_path: Path) -> None:
    from autograder import cli

    (tmp_path / "autograder.toml").write_text(
        '[grading]\ncell_timeout = 30\ncpu = true\n[cluster]\nkind = "slurm"\npartition = "gpu"\nworkers = 8\n'
        'gres = ""\n[gradebook]\ndb_url = "postgresql+psycopg2://grader@db/course"\n')
    args = cli.resolve(cli.parser().parse_args(["--course", str(tmp_path), "grade", "allreduce", "--workers=3"]))
    assert (args.cell_timeout, args.cpu, args.slurm, args.partition, args.workers, args.gres) == \
        (30, True, True, "gpu", 3, "")
    assert args.db_url == "postgresql+psycopg2://grader@db/course" and args.timeout == 600.0
    assert cli._choice(args).slurm["queue"] == "gpu"   # dask-jobqueue calls the partition a queue
    (tmp_path / "autograder.toml").write_text('[cluster]\nkind = "address"\n')
    with pytest.raises(ValueError, match="needs scheduler"):
        cli.resolve(cli.parser().parse_args(["--course", str(tmp_path), "status"]))
    (tmp_path / "autograder.toml").write_text('[grading]\ncell_timout = 3\n')
    with pytest.raises(ValueError, match="unknown key"):
        cli.resolve(cli.parser().parse_args(["--course", str(tmp_path), "status"]))


PROBE_INPUTS = '''
import json
import torch


def allreduce(data):
    # Right for one replica (nothing to do); for more, report the hidden inputs through the failure
    # message the feedback shows.
    if len(data) > 1:
        raise ValueError("INPUTS" + json.dumps([t.tolist() for t in data]) + "END")
'''

REPLAY = '''
import json
import torch

SEEN = {seen!r}


def allreduce(data):
    # The answers for the inputs an earlier feedback showed; else report these inputs too.
    key = repr([t.tolist() for t in data])
    if key in SEEN:
        for t in data:
            t.copy_(torch.tensor(SEEN[key], dtype=t.dtype))
    elif len(data) > 1:
        raise ValueError("INPUTS" + json.dumps([t.tolist() for t in data]) + "END")
'''


def _revealed(root: Path, student: str) -> list:
    nb = nbformat.read(root / "autograded" / student / "allreduce" / "allreduce.ipynb", as_version=4)
    messages = [o.get("evalue", "") for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    return [json.loads(blob) for blob in re.findall(r"INPUTS(\[.*?\])END", "\n".join(messages))]


def test_inputs_read_out_of_one_feedback_do_not_help_the_next_submission(tmp_path: Path) -> None:
    """Resubmitting to probe hidden inputs: each submission's random inputs come from its own seed."""
    _sandbox_or_skip()
    root = tmp_path / "course"
    folder = root / "submitted" / "mallory" / "allreduce"
    folder.mkdir(parents=True)
    (folder / "allreduce.ipynb").write_text(nbformat.writes(
        course.build_submission("allreduce", {"allreduce-sum": PROBE_INPUTS})))
    autograder(root, "grade", "allreduce", "--cpu", "--workers=1")
    first = _revealed(root, "mallory")
    assert first, "the first submission read no input out of its feedback"
    autograder(root, "grade", "allreduce", "--cpu", "--workers=1", "--force")
    assert _revealed(root, "mallory") == first          # a regrade of the same file draws the same inputs
    seen = {repr(tensors): torch.tensor(tensors, dtype=torch.float64).sum(0).tolist() for tensors in first}
    (folder / "allreduce.ipynb").write_text(nbformat.writes(
        course.build_submission("allreduce", {"allreduce-sum": REPLAY.format(seen=seen)})))
    autograder(root, "grade", "allreduce", "--cpu", "--workers=1")
    second = _revealed(root, "mallory")
    # The new file drew new inputs: the replayed answers matched none of them (it reported them instead).
    assert second and not {repr(t) for t in second} & set(seen)
    with Writer(f"sqlite:///{root / 'gradebook.db'}", root) as writer:
        record = {r["student"]: r for r in writer.records("allreduce")}["mallory"]
    assert record["cells"]["allreduce-sum-test-values"]["score"] == 0
    assert record["cells"]["allreduce-sum-test-dtypes"]["score"] == 0


def test_kill_all_is_expected_to_crash_its_own_check_run_where_hosts_share_its_pid_namespace() -> None:
    """On a GPU worker the hosts share the check run's PID namespace (CUDA starts in no other there): kill-all
    kills its own check run (an H200, 2026-11-27: crashed, 0/10); elsewhere it reaches only itself."""
    alone = {s.student: s for s in sample.red_team(ASSIGNMENT)}
    shared = {s.student: s for s in sample.red_team(ASSIGNMENT, shared_pid_namespace=True)}
    assert alone["kill-all"].outcomes == ("graded",) and alone["kill-all"].score == 10
    assert shared["kill-all"].outcomes == ("crashed",) and shared["kill-all"].score == 0
    assert set(shared["kill-all"].cells.values()) == {0.0}
    assert {k: (v.outcomes, v.score) for k, v in alone.items() if k != "kill-all"} == \
           {k: (v.outcomes, v.score) for k, v in shared.items() if k != "kill-all"}
