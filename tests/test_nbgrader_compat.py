"""The class autograder on nbgrader's own test fixtures, beside plain ``nbgrader autograde``.

Each case is one of the tests of nbgrader's suite that grades fixture notebooks
(``nbgrader/tests/apps/test_nbgrader_autograde.py``), with the fixtures read
from the **installed** nbgrader package (never copied into this repository) and
the outcome that test expects.  Both graders grade the same course: plain
``nbgrader autograde`` (which must give what nbgrader's own test expects, or
this test is wrong) and ``autograder grade`` (nbgrader-compatible mode: these
assignments ask for nothing else), which must give the same scores, or a better
outcome stated here (``better``).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import early
import nbformat
import pytest

from autograder import course
from autograder.gradebook import Writer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

try:
    import nbgrader

    FILES = Path(nbgrader.__file__).parent / "tests" / "apps" / "files"
except ImportError:  # pragma: no cover - nbgrader is a dependency of the course extra
    FILES = Path("/nonexistent")

EMPTY = "<empty notebook>"
DUE = "2015-02-02 14:58:23.948203 America/Los_Angeles"
LATE_1H = "2015-02-02 15:58:23.948203 America/Los_Angeles"


@dataclass
class Case:
    """One test of nbgrader's suite: the assignment ``ps1`` and what each student must get."""

    name: str
    source: dict[str, str]                               # file of source/ps1 -> fixture name, EMPTY, or "text:..."
    submissions: dict[str, dict[str, str]]               # student -> file -> fixture name, EMPTY, or "text:..."
    scores: dict[str, dict[str, float]] = field(default_factory=dict)   # student -> notebook -> score
    not_graded: tuple[str, ...] = ()                     # students nbgrader does not grade
    files: dict[str, dict[str, str | None]] = field(default_factory=dict)   # student -> autograded file -> text
    config: str = ""                                     # more nbgrader_config.py
    autotests: bool = False                              # autotests.yml in the course root
    cell_timeout: float = 30.0                           # nbgrader's Execute.timeout in this case
    better: dict[str, str] = field(default_factory=dict)  # student -> the autograder's outcome where nbgrader fails
    duedate: str = ""                                    # the assignment's due date
    penalties: dict[str, float | None] = field(default_factory=dict)   # student -> late penalty of p1
    plugin: str = ""                                     # late_plugin.py of the course


CASES = [
    Case("test_grade", {"p1.ipynb": "submitted-unchanged.ipynb"},
         {"foo": {"p1.ipynb": "submitted-unchanged.ipynb"}, "bar": {"p1.ipynb": "submitted-changed.ipynb"}},
         {"foo": {"p1": 1}, "bar": {"p1": 2}}),
    Case("test_grade_autotest", {"p1.ipynb": "autotest-simple.ipynb"},
         {"foo": {"p1.ipynb": "autotest-simple-unchanged.ipynb"}, "bar": {"p1.ipynb": "autotest-simple-changed.ipynb"}},
         {"foo": {"p1": 0}, "bar": {"p1": 1}}, autotests=True),
    Case("test_grade_hashed_autotest", {"p1.ipynb": "autotest-hashed.ipynb"},
         {"foo": {"p1.ipynb": "autotest-hashed-unchanged.ipynb"}, "bar": {"p1.ipynb": "autotest-hashed-changed.ipynb"}},
         {"foo": {"p1": 0}, "bar": {"p1": 1}}, autotests=True),
    Case("test_grade_complex_autotest", {"p1.ipynb": "autotest-multi.ipynb"},
         {"foo": {"p1.ipynb": "autotest-multi-unchanged.ipynb"}, "bar": {"p1.ipynb": "autotest-multi-changed.ipynb"}},
         {"foo": {"p1": 0}, "bar": {"p1": 3}}, autotests=True),
    Case("test_showtraceback_exploit", {"p1.ipynb": "submitted-unchanged.ipynb"},
         {"foo": {"p1.ipynb": "submitted-unchanged.ipynb"}, "bar": {"p1.ipynb": "submitted-changed.ipynb"},
          "spam": {"p1.ipynb": "submitted-cheat-attempt.ipynb"},
          "eggs": {"p1.ipynb": "submitted-cheat-attempt-alternative.ipynb"}},
         {"foo": {"p1": 1}, "bar": {"p1": 2}, "spam": {"p1": 1}, "eggs": {"p1": 1}}),
    Case("test_side_effects", {"p1.ipynb": "side-effects.ipynb"}, {"foo": {"p1.ipynb": "side-effects.ipynb"}},
         files={"foo": {"side-effect.txt": ""}}),
    Case("test_skip_extra_notebooks", {"p1.ipynb": "submitted-unchanged.ipynb"},
         {"foo": {"p1 copy.ipynb": "submitted-unchanged.ipynb", "p1.ipynb": "submitted-changed.ipynb"}},
         {"foo": {"p1": 2}}, files={"foo": {"p1 copy.ipynb": None}}),
    Case("test_hidden_tests_single_notebook", {"p1.ipynb": "test-hidden-tests.ipynb"},
         {"foo": {"p1.ipynb": "release"}}, {"foo": {"p1": 1.5}},
         config='c.ClearSolutions.code_stub = dict(python="# YOUR CODE HERE")\n'),
    Case("test_hidden_tests_autotest", {"p1.ipynb": "autotest-hidden.ipynb"},
         {"foo": {"p1.ipynb": "autotest-hidden-unchanged.ipynb"},
          "bar": {"p1.ipynb": "autotest-hidden-changed-wrong.ipynb"},
          "baz": {"p1.ipynb": "autotest-hidden-changed-right.ipynb"}},
         {"foo": {"p1": 0}, "bar": {"p1": 0}, "baz": {"p1": 1}}, autotests=True,
         config='c.ClearSolutions.code_stub = dict(python="# YOUR CODE HERE")\n'),
    Case("test_infinite_loop", {"p1.ipynb": "infinite-loop.ipynb"}, {"foo": {"p1.ipynb": "infinite-loop.ipynb"}},
         files={"foo": {"p1.ipynb": ""}}, cell_timeout=1, config="c.Execute.timeout = 1\n"),
    Case("test_missing_files", {"p1.ipynb": EMPTY}, {"foo": {"p1.ipynb": EMPTY}, "bar": {}},
         {"foo": {"p1": 0}}, not_graded=("bar",)),
    Case("test_grade_missing_notebook", {"p1.ipynb": "submitted-unchanged.ipynb", "p2.ipynb": "submitted-unchanged.ipynb"},
         {"foo": {"p1.ipynb": "submitted-changed.ipynb"}}, {"foo": {"p1": 2, "p2": 0}}),
    Case("test_grade_with_validating_envvar", {"p1.ipynb": "validating-environment-variable.ipynb"},
         {"foo": {"p1.ipynb": "validating-environment-variable.ipynb"}}, {"foo": {"p1": 0}}),
    Case("test_autograde_timeout", {"p1.ipynb": "timeout.ipynb"}, {"foo": {"p1.ipynb": "timeout.ipynb"}},
         {"foo": {"p1": 1}}),
    Case("test_autograde_timeout (2 s)", {"p1.ipynb": "timeout.ipynb"}, {"bar": {"p1.ipynb": "timeout.ipynb"}},
         {"bar": {"p1": 0}}, cell_timeout=2, config="c.Execute.timeout = 2\n"),
    Case("test_grade_overwrite_files",
         {"p1.ipynb": "submitted-unchanged.ipynb", "data.csv": "text:some,data\n", "helper.py": "text:print('hello!')\n"},
         {"foo": {"p1.ipynb": "submitted-unchanged.ipynb", "data.csv": "text:some,other,data\n",
                  "helper.py": "text:print('this is different!')\n"}},
         {"foo": {"p1": 1}}, files={"foo": {"data.csv": "some,data\n", "helper.py": "print('this is different!')\n"}},
         config='c.Autograde.exclude_overwriting = {"ps1": ["helper.py"]}\n'),
    Case("test_filter_notebook", {"p1.ipynb": "submitted-unchanged.ipynb", "foo.txt": "text:foo",
                                  "data/bar.txt": "text:bar"},
         {"foo": {"p1.ipynb": "submitted-unchanged.ipynb", "foo.txt": "text:foo", "data/bar.txt": "text:bar",
                  "blah.pyc": "text:asdf"}},
         {"foo": {"p1": 1}}, files={"foo": {"foo.txt": "foo", "data/bar.txt": "bar", "blah.pyc": None}}),
    Case("test_incorrect_submitted_kernelspec", {"p1.ipynb": EMPTY}, {"foo": {"p1.ipynb": EMPTY + ":blah"}},
         {"foo": {"p1": 0}}),
    Case("test_missing_source_kernelspec", {"p1.ipynb": EMPTY}, {"bar": {"p1.ipynb": EMPTY + ":blarg"}},
         not_graded=("bar",), better={"bar": "graded"},
         config="c.ClearSolutions.code_stub = {'python': '## Answer', 'blah': '## Answer'}\n"),
    Case("test_grade_timestamp", {"p1.ipynb": "submitted-unchanged.ipynb"},
         {"foo": {"p1.ipynb": "submitted-unchanged.ipynb", "timestamp.txt": "text:" + LATE_1H},
          "bar": {"p1.ipynb": "submitted-changed.ipynb", "timestamp.txt": "text:2015-02-01 14:58:23.948203 "
                  "America/Los_Angeles"}},
         {"foo": {"p1": 1}, "bar": {"p1": 2}}, files={"foo": {"timestamp.txt": ""}}, duedate=DUE,
         penalties={"foo": None, "bar": None}),
    Case("test_late_submission_penalty_zero", {"p1.ipynb": "submitted-unchanged.ipynb"},
         {"foo": {"p1.ipynb": "submitted-unchanged.ipynb", "timestamp.txt": "text:" + DUE},
          "bar": {"p1.ipynb": "submitted-changed.ipynb", "timestamp.txt": "text:" + LATE_1H}},
         {"foo": {"p1": 1}, "bar": {"p1": 2}}, duedate=DUE, penalties={"foo": None, "bar": 2.0},
         config="c.LateSubmissionPlugin.penalty_method = 'zero'\n"),
    Case("test_late_submission_penalty_plugin", {"p1.ipynb": "submitted-unchanged.ipynb"},
         {"foo": {"p1.ipynb": "submitted-unchanged.ipynb", "timestamp.txt": "text:2015-02-02 18:58:23.948203 "
                  "America/Los_Angeles"},
          "bar": {"p1.ipynb": "submitted-changed.ipynb", "timestamp.txt": "text:" + LATE_1H}},
         {"foo": {"p1": 1}, "bar": {"p1": 2}}, duedate=DUE, penalties={"foo": 1.0, "bar": 1.0},
         config="c.AssignLatePenalties.plugin_class = 'late_plugin.Blarg'\n",
         plugin="from nbgrader.plugins import BasePlugin\n\n\nclass Blarg(BasePlugin):\n"
                "    def late_submission_penalty(self, student_id, score, total_seconds_late):\n"
                "        return int(total_seconds_late / 3600)\n"),
    Case("test_handle_failure", {"p1.ipynb": EMPTY, "p2.ipynb": EMPTY},
         {"bar": {"p1.ipynb": EMPTY, "p2.ipynb": "test.ipynb"}, "foo": {"p1.ipynb": EMPTY, "p2.ipynb": EMPTY}},
         {"foo": {"p1": 0, "p2": 0}}, not_graded=("bar",), better={"bar": "tampered"}),
]


def _put(path: Path, what: str, release: Path | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if what.startswith("text:"):
        path.write_text(what[5:])
    elif what.startswith(EMPTY):
        nb = nbformat.v4.new_notebook()
        kernel = what[len(EMPTY) + 1:] if what != EMPTY else None
        if kernel:
            nb.metadata.kernelspec = {"display_name": "kernel", "language": kernel, "name": kernel}
        nbformat.write(nb, path)
    elif what == "release":
        assert release is not None
        shutil.copy(release, path)
    else:
        shutil.copy(FILES / what, path)


def _config(case: Case, root: Path) -> None:
    (root / "nbgrader_config.py").write_text(
        f"c = get_config()\nc.CourseDirectory.root = {str(root)!r}\nc.CourseDirectory.db_url = "
        f"{'sqlite:///' + str(root / 'gradebook.db')!r}\n{case.config}")


def _copy(case: Case, root: Path, to: Path) -> Path:
    """A copy of the course at ``root`` (made by :func:`_course`, not graded yet), rooted at ``to``."""
    shutil.copytree(root, to, symlinks=True)
    _config(case, to)
    return to


def _course(case: Case, root: Path) -> Path:
    """The course of ``case`` at ``root``: config, sources, the release, the submissions."""
    root.mkdir(parents=True)
    _config(case, root)
    if case.autotests:
        shutil.copy(FILES / "autotests.yml", root / "autotests.yml")
    if case.plugin:
        (root / "late_plugin.py").write_text(case.plugin)
    if case.duedate:
        _nbgrader(root, "db", "assignment", "add", "ps1", "--duedate", case.duedate)
    for name, what in case.source.items():
        _put(root / "source" / "ps1" / name, what)
    _nbgrader(root, "generate_assignment", "ps1")
    for student, files in case.submissions.items():
        folder = root / "submitted" / student / "ps1"
        folder.mkdir(parents=True)
        for name, what in files.items():
            _put(folder / name, what, release=root / "release" / "ps1" / name)
    return root


def _nbgrader(root: Path, *args: str) -> subprocess.CompletedProcess:
    course.alembic_on_path()
    return subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=root, capture_output=True, text=True,
                          timeout=600)


def _scores(root: Path, students: list[str], what: str = "score") -> dict[str, dict[str, float]]:
    from nbgrader.api import Gradebook, MissingEntry

    out: dict[str, dict[str, float]] = {}
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        for student in students:
            try:
                submission = gb.find_submission("ps1", student)
            except MissingEntry:
                continue
            out[student] = {nb.notebook.name: getattr(nb, what) for nb in submission.notebooks}
    return out


def _autograded(root: Path, student: str, name: str) -> str | None:
    path = root / "autograded" / student / "ps1" / name
    return path.read_text() if path.is_file() else None


@dataclass
class Graded:
    """One case graded both ways: the two course roots and the class autograder's exit status and output."""

    plain: Path
    ours: Path
    returncode: int
    stdout: str
    stderr: str


def _grade_both(case: Case, base: Path) -> Graded:
    plain = _course(case, base / "plain")
    ours = _copy(case, plain, base / "ours")
    # Both graders at once, each on its own copy of the same course: plain nbgrader, and the class
    # autograder in nbgrader-compatible mode (nothing in these notebooks asks for trusted checks).
    ours_run = subprocess.Popen([sys.executable, "-m", "autograder", "--course", str(ours), "grade", "ps1",
                                 "--workers=1", f"--cell-timeout={case.cell_timeout:g}", "--timeout=300"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=course.REPO)
    try:
        _nbgrader(plain, "autograde", "ps1", f"--Execute.timeout={case.cell_timeout:g}")
        stdout, stderr = ours_run.communicate(timeout=600)
    finally:
        ours_run.kill()
    return Graded(plain, ours, ours_run.returncode, stdout, stderr)


# Each case is graded both ways by an early job (tests/early.py), beside the other tests: a case is a few
# single-threaded process starts and short kernels; nothing here is timed closer than a 5 s sleep against
# a 30 s limit.
def _case_job(case: Case) -> Callable[[pytest.Session], Graded]:
    def grade(session: pytest.Session) -> Graded:
        course.alembic_on_path()
        return _grade_both(case, early.tmp(session, re.sub(r"\W+", "_", case.name)))
    return grade


def _job_name(case: Case) -> str:
    return f"nbgrader-case[{case.name}]"


if FILES.is_dir():
    for _case in CASES:
        early.early(_job_name(_case), order=2.5, light=True,
                    needed=lambda item, case=_case: (early.param(item, "case") is case
                                                     and getattr(item, "module", None) is sys.modules[__name__])
                    )(_case_job(_case))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_autograder_grades_nbgraders_fixtures_as_nbgrader_does(case: Case, bubblewrap: None) -> None:
    if not FILES.is_dir():
        pytest.skip("nbgrader's test files are not installed")
    students = sorted(case.submissions)
    run = early.result(_job_name(case), timeout=900)
    plain, ours, stdout, stderr = run.plain, run.ours, run.stdout, run.stderr

    # Plain nbgrader: what its own test expects (else this case is wrong, not the autograder).
    expected = {s: {nb: float(v) for nb, v in notebooks.items()} for s, notebooks in case.scores.items()}
    got_plain = _scores(plain, students)
    for student, notebooks in expected.items():
        assert got_plain.get(student) == notebooks, (case.name, "plain nbgrader", student, got_plain.get(student))
    for student in case.not_graded:
        assert not (plain / "autograded" / student / "ps1" / "p1.ipynb").exists(), (case.name, student)
    for student, penalty in case.penalties.items():
        assert _scores(plain, [student], "late_submission_penalty")[student]["p1"] == penalty, (case.name, student)

    # The class autograder: the same scores.
    assert run.returncode == 0, stdout[-3000:] + stderr[-3000:]
    assert "graded in nbgrader mode" in stdout
    with Writer(f"sqlite:///{ours / 'gradebook.db'}", ours) as writer:
        records = {r["student"]: r for r in writer.records("ps1")}
    got = _scores(ours, students)
    for student, notebooks in expected.items():
        assert got.get(student) == notebooks, (case.name, student, got.get(student), records.get(student))
        assert records[student]["mode"] == "nbgrader"
    for student in case.not_graded:
        record = records.get(student)
        if student in case.better:
            assert record is not None and record["outcome"] == case.better[student], (case.name, student, record)
        else:
            assert record is None or record["outcome"] == "invalid", (case.name, student, record)
            assert not (ours / "autograded" / student / "ps1" / "p1.ipynb").exists()
    for student, penalty in case.penalties.items():
        assert _scores(ours, [student], "late_submission_penalty")[student]["p1"] == penalty, (case.name, student)
    for student, files in case.files.items():
        for name, text in files.items():
            content = _autograded(ours, student, name)
            if text is None:
                assert content is None, (case.name, student, name)
            elif text == "":
                assert content is not None, (case.name, student, name)
            else:
                assert content == text, (case.name, student, name, content)


def test_a_trusted_mode_assignment_whose_tests_use_solution_names_is_refused(tmp_path: Path, bubblewrap: None) -> None:
    """Asking for trusted checks on an ordinary nbgrader assignment: refused before grading, never scored 0."""
    case = CASES[0]
    root = _course(case, tmp_path / "course")
    (root / "autograder.toml").write_text('[assignments.ps1]\nmode = "trusted"\n')
    run = subprocess.run([sys.executable, "-m", "autograder", "--course", str(root), "grade", "ps1", "--workers=1"],
                         capture_output=True, text=True, timeout=600, cwd=course.REPO)
    assert run.returncode != 0
    text = run.stdout + run.stderr
    assert "cannot be graded with trusted checks" in text and "test cell bar: uses a name that only the student's " \
        "code defines: 'a'" in text, text[-2000:]
    assert not (root / "autograded").exists()
    with Writer(f"sqlite:///{root / 'gradebook.db'}", root) as writer:
        assert writer.records("ps1") == []


def test_nbgraders_expectations_are_read_from_its_own_test_file() -> None:
    """The cases above are nbgrader's: each name is a test of its installed suite."""
    source = (FILES.parent / "test_nbgrader_autograde.py").read_text()
    for case in CASES:
        assert f"def {case.name.split(' ')[0]}(" in source, case.name
    assert json.dumps([c.name for c in CASES])
