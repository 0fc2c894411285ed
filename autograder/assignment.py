"""An assignment as the class autograder grades it: notebooks, files and grading mode, read from an nbgrader course.

The class autograder grades any nbgrader assignment, not only the project's own
exercises.  What it needs of one is read here, once per class, by the
coordinator (workers need no database and no shared file system: all of this
travels with each job):

* the **course root's configuration**: its own ``nbgrader_config.py`` when it has
  one (an instructor's course: ``source/<assignment>/``, ``release/...``), else
  the project's ``course/nbgrader_config.py`` re-rooted there (the project's
  exercises, from ``solutions/`` and ``exercises/``);
* every **notebook** of the assignment's source folder, in nbgrader's order, with
  its student version and the cells nbgrader stored for it in the gradebook by
  ``generate_assignment`` (:attr:`NotebookSpec.cells`): their sources are what
  grading restores, ``### AUTOTEST`` lines already expanded, hidden tests in;
* the assignment's **other files** (data, helper modules), which nbgrader copies
  beside the notebooks before it runs them (``Autograde.exclude_overwriting``
  names those a student's own version may replace);
* the **grading mode** (:data:`MODES`), chosen explicitly and recorded with every
  grade: ``trusted`` -- the project's trusted checks (hidden test cells run in a
  process no student code runs in, see :mod:`autograder.trusted`), for
  assignments written for them; ``nbgrader`` -- nbgrader's semantics (test cells
  run after the student's cells, in the student's kernel), for everything else.
  The mode comes from ``course/autograder.toml`` (``[assignments.<id>] mode``),
  else from the notebooks' metadata (``"dlperf": {"mode": "trusted"}``), else it
  is ``nbgrader``; :attr:`Assignment.mode_origin` says which.
"""

from __future__ import annotations

import ast
import contextlib
import fnmatch
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

MODES = ("trusted", "nbgrader")


class AssignmentError(ValueError):
    """The assignment cannot be graded as asked (missing, or its tests cannot run in the mode chosen)."""


@dataclass(frozen=True)
class NotebookSpec:
    """One notebook of an assignment."""

    name: str                                   # "p1" for p1.ipynb
    source: str                                 # the instructor's notebook (JSON): solutions, hidden tests
    release: str                                # the student version (JSON)
    cells: dict[str, dict[str, Any]]            # grade id -> what nbgrader stored: source, cell_type, locked, checksum
    points: dict[str, float]                    # grade id -> points of each graded cell


@dataclass(frozen=True)
class Assignment:
    """An assignment and everything grading needs of it (see the module's docstring)."""

    id: str
    mode: str
    mode_origin: str
    notebooks: tuple[NotebookSpec, ...]
    files: dict[str, bytes] = field(default_factory=dict)
    exclude_overwriting: tuple[str, ...] = ()
    requires_gpu: bool = False
    others: dict[str, list[str]] = field(default_factory=dict)   # other assignments' grade ids

    def notebook(self, name: str) -> NotebookSpec:
        for spec in self.notebooks:
            if spec.name == name:
                return spec
        raise KeyError(name)

    @property
    def names(self) -> list[str]:
        return [spec.name for spec in self.notebooks]

    @property
    def points(self) -> dict[str, float]:
        """Points per graded cell: keyed by grade id for one notebook, ``"<notebook>/<grade id>"`` for several."""
        if len(self.notebooks) == 1:
            return dict(self.notebooks[0].points)
        return {f"{spec.name}/{gid}": p for spec in self.notebooks for gid, p in spec.points.items()}


# ---------------------------------------------------------------------------------------------
# The course's configuration
# ---------------------------------------------------------------------------------------------


def course_config(course_root: Path, db_url: str | None = None) -> Any:
    """nbgrader's configuration for ``course_root``: its own ``nbgrader_config.py``, else the project's, re-rooted."""
    from traitlets.config.loader import PyFileConfigLoader

    from . import course

    root = Path(course_root).resolve()
    own = root / "nbgrader_config.py"
    if own.is_file() and root != course.COURSE.resolve():
        config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
        config.CourseDirectory.root = str(root)
        if db_url:
            config.CourseDirectory.db_url = db_url
        elif "db_url" not in config.CourseDirectory:
            config.CourseDirectory.db_url = f"sqlite:///{root / 'gradebook.db'}"
        config.Application.log_level = "WARNING"
        return config
    return course._config(root, db_url=db_url)


def _coursedir(config: Any) -> Any:
    from nbgrader.coursedir import CourseDirectory

    return CourseDirectory(config=config)


def source_folder(course_root: Path, assignment: str, config: Any | None = None) -> Path:
    coursedir = _coursedir(config or course_config(course_root))
    return Path(coursedir.format_path(coursedir.source_directory, ".", assignment))


def notebook_names(course_root: Path, assignment: str) -> list[str]:
    """The names (stems) of the assignment's notebooks, from its source folder, in nbgrader's order;
    ``[assignment]`` when the course has no source for it on this machine."""
    folder = source_folder(course_root, assignment)
    names = sorted(p.stem for p in folder.glob("*.ipynb")) if folder.is_dir() else []
    return names or [assignment]


def assignment_ids(course_root: Path) -> list[str]:
    """The assignments of the course: the folders of its source directory that hold a notebook."""
    config = course_config(course_root)
    coursedir = _coursedir(config)
    parent = Path(coursedir.format_path(coursedir.source_directory, ".", "x")).parent
    return sorted(p.name for p in parent.iterdir() if p.is_dir() and any(p.glob("*.ipynb"))) if parent.is_dir() else []


def _ignored(relative: str, patterns: list[str]) -> bool:
    parts = Path(relative).parts
    return any(fnmatch.fnmatch(part, pattern) for part in parts for pattern in patterns)


def _other_files(folder: Path, ignore: list[str]) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder).as_posix()
        if path.is_file() and not path.is_symlink() and not relative.endswith(".ipynb") and not _ignored(relative, ignore):
            files[relative] = path.read_bytes()
    return files


def _toml_mode(course_root: Path, assignment: str) -> str | None:
    path = Path(course_root) / "autograder.toml"
    if not path.is_file():
        return None
    import tomllib

    section = tomllib.loads(path.read_text()).get("assignments", {}).get(assignment, {})
    return section.get("mode")


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def _stored_cells(db_url: str, assignment: str, notebook: str) -> dict[str, dict[str, Any]]:
    """What ``generate_assignment`` stored in the gradebook for each cell of ``notebook``."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url) as gb:
        try:
            nb = gb.find_notebook(notebook, assignment)
        except MissingEntry:
            return {}
        return {c.name: {"source": c.source, "cell_type": c.cell_type, "locked": bool(c.locked),
                         "checksum": c.checksum} for c in nb.source_cells}


@contextlib.contextmanager
def _in(folder: Path) -> Iterator[None]:
    """nbgrader reads some files relative to the working folder (``autotests.yml`` of the course root)."""
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def _generate(course_root: Path, assignment: str, config: Any, db_url: str) -> dict[str, str]:
    """nbgrader's ``generate_assignment`` into a scratch release folder, recording the assignment in the
    gradebook at ``db_url``: the student versions it made, by notebook name."""
    from nbgrader.apps import NbGraderAPI

    scratch = Path(tempfile.mkdtemp(prefix="dlperf-release-"))
    try:
        config = config.copy()
        config.CourseDirectory.release_directory = str(scratch)
        config.CourseDirectory.db_url = db_url
        coursedir = _coursedir(config)
        api = NbGraderAPI(coursedir=coursedir, config=config)
        with _in(Path(course_root)):
            result = api.generate_assignment(assignment, force=True, create=True)
        if not result.get("success"):
            raise AssignmentError(f"nbgrader generate_assignment {assignment} failed:\n{result.get('error') or ''}"
                                  f"\n{result.get('log') or ''}")
        out = Path(coursedir.format_path(str(scratch), ".", assignment))
        return {p.stem: p.read_text() for p in sorted(out.glob("*.ipynb"))}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _generated(course_root: Path, assignment: str, db_url: str, config: Any) -> dict[str, str]:
    """Make sure nbgrader's gradebook knows the assignment (:func:`_generate` where it does not); the
    student versions generated then (none where the gradebook knew it already)."""
    from nbgrader.api import Gradebook, MissingEntry

    from . import course

    course.alembic_on_path()
    with Gradebook(db_url) as gb:
        try:
            gb.find_assignment(assignment)
            return {}
        except MissingEntry:
            pass
    return _generate(course_root, assignment, config, db_url)


def _release_notebooks(course_root: Path, assignment: str, config: Any, names: list[str],
                       generated: dict[str, str]) -> dict[str, str]:
    """The student versions: the course's release folder when it has them, else ``generated`` (what
    :func:`_generated` just made), else generated now (with a scratch gradebook)."""
    coursedir = _coursedir(config)
    folder = Path(coursedir.format_path(coursedir.release_directory, ".", assignment))
    if all((folder / f"{n}.ipynb").is_file() for n in names):
        return {n: (folder / f"{n}.ipynb").read_text() for n in names}
    if not all(n in generated for n in names):
        with tempfile.TemporaryDirectory(prefix="dlperf-scratch-db-") as scratch:
            generated = _generate(course_root, assignment, config, f"sqlite:///{Path(scratch) / 'scratch.db'}")
    return {n: generated[n] for n in names}


def load(assignment: str, course_root: Path, db_url: str, mode: str | None = None) -> Assignment:
    """Everything grading needs of ``assignment`` (makes nbgrader's gradebook entry if it is missing)."""
    config = course_config(course_root, db_url)
    folder = source_folder(course_root, assignment, config)
    paths = sorted(folder.glob("*.ipynb"))
    if not paths:
        raise AssignmentError(f"no assignment {assignment!r}: {folder} holds no notebook")
    generated = _generated(course_root, assignment, db_url, config)
    names = [p.stem for p in paths]
    releases = _release_notebooks(course_root, assignment, config, names, generated)
    specs, declared, gpu = [], set(), False
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        meta = nb.metadata.get("dlperf", {}) or {}
        if meta.get("mode"):
            declared.add(meta["mode"])
        gpu = gpu or bool(meta.get("requires_gpu"))
        points = {c.metadata.nbgrader.grade_id: float(c.metadata.nbgrader.get("points", 0))
                  for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade")}
        stored = _stored_cells(db_url, assignment, path.stem)
        for cell in nb.cells:
            # What grading restores is what nbgrader stored: test cells with their ### AUTOTEST lines
            # expanded (solution cells keep the instructor's code here; nbgrader stored their stub).
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if meta.get("grade_id") in stored and not meta.get("solution"):
                cell.source = stored[meta["grade_id"]]["source"]
        specs.append(NotebookSpec(path.stem, nbformat.writes(nb), releases[path.stem], stored, points))
    if mode is not None:
        origin = "asked"
    elif (toml := _toml_mode(course_root, assignment)) is not None:
        mode, origin = toml, "course/autograder.toml"
    elif declared:
        if len(declared) > 1:
            raise AssignmentError(f"{assignment}: its notebooks ask for different grading modes {sorted(declared)}")
        mode, origin = declared.pop(), "the notebooks' metadata"
    else:
        mode, origin = "nbgrader", "default (nothing asks for trusted checks)"
    if mode not in MODES:
        raise AssignmentError(f"{assignment}: unknown grading mode {mode!r} (one of {', '.join(MODES)})")
    ignore = list(getattr(_coursedir(config), "ignore", []) or [])
    exclude = tuple(config.get("Autograde", {}).get("exclude_overwriting", {}).get(assignment, []))
    spec = Assignment(assignment, mode, origin, tuple(specs), _other_files(folder, ignore), exclude, gpu,
                      _other_ids(course_root, assignment, config))
    if mode == "trusted":
        problems = trusted_problems(spec)
        if problems:
            raise AssignmentError(f"{assignment} cannot be graded with trusted checks ({origin} asks for them):\n  "
                                  + "\n  ".join(problems) + "\nWrite these test cells for the trusted checks "
                                  "(autograder.trusted.Student: CONTRIBUTING.md), or grade the assignment in "
                                  "nbgrader mode ([assignments." + assignment + "] mode = \"nbgrader\" in "
                                  "course/autograder.toml).")
    return spec


def _other_ids(course_root: Path, assignment: str, config: Any) -> dict[str, list[str]]:
    others: dict[str, list[str]] = {}
    try:
        ids = assignment_ids(course_root)
    except OSError:
        return others
    for other in ids:
        if other == assignment:
            continue
        for path in sorted(source_folder(course_root, other, config).glob("*.ipynb")):
            nb = nbformat.read(path, as_version=4)
            others.setdefault(other, []).extend(sorted({c.metadata.nbgrader.grade_id for c in nb.cells
                                                        if c.get("metadata", {}).get("nbgrader", {}).get("grade_id")}))
    return others


# ---------------------------------------------------------------------------------------------
# Can the test cells run in trusted mode?
# ---------------------------------------------------------------------------------------------


def trusted_problems(spec: Assignment) -> list[str]:
    """Why the test cells of ``spec`` cannot run as trusted checks (empty: they can).

    In trusted mode a test cell runs where no student code runs: it sees the names the setup
    cells (the code cells before the first solution cell) define, the names it defines itself,
    and each name a solution cell defines only as a pointer at that cell, which
    :class:`autograder.trusted.Student` (or ``Ranks``) loads in a process of its own.  A test
    cell that *uses* such a name itself (``assert squares(1) == [1]``), or a name only the
    student's code would define, would fail for every student: it is refused here, before a
    class is graded, never scored 0.
    """
    import builtins

    from .notebook import defined_names, is_solution, is_test

    problems = []
    for nb_spec in spec.notebooks:
        nb = nbformat.reads(nb_spec.source, as_version=4)
        names: set[str] = set()
        setup: set[str] = set(dir(builtins)) | {"get_ipython", "display", "In", "Out", "__name__"}
        seen_solution = False
        for cell in nb.cells:
            if is_solution(cell) and cell.cell_type == "code":
                seen_solution = True
                names |= defined_names(cell.source, imports=False)
            elif cell.cell_type == "code" and not seen_solution and not is_test(cell):
                setup |= defined_names(cell.source)
        for cell in nb.cells:
            if not is_test(cell):
                continue
            gid = cell.metadata.nbgrader.grade_id
            stored = nb_spec.cells.get(gid, {}).get("source", cell.source)
            for name, how in _direct_uses(stored, names, setup):
                problems.append(f"{nb_spec.name}.ipynb, test cell {gid}: {how} {name!r}")
    return problems


def _direct_uses(source: str, names: set[str], known: set[str]) -> list[tuple[str, str]]:
    """Solution ``names`` used other than as a call's argument (``Student(f)``), and names that neither
    the cell, the setup (``known``) nor a solution defines."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    as_argument: set[int] = set()
    local: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                if isinstance(arg, ast.Name):
                    as_argument.add(id(arg))
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            local.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            local.add(node.name)
        elif isinstance(node, ast.arg):
            local.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            local.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            local.add(node.name)
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names \
                and node.func.id not in local:
            found[node.func.id] = "calls the solution's"
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)) or node.id in local:
            continue
        if node.id in names and id(node) not in as_argument:
            found.setdefault(node.id, "uses the solution's")
        elif node.id not in names and node.id not in known:
            found.setdefault(node.id, "uses a name that only the student's code defines:")
    return sorted(found.items())


def submission_files(folder: Path, ignore: Mapping[str, Any] | None = None) -> dict[str, bytes]:
    """Every regular file of a submission folder (relative POSIX path -> bytes), links and ignored names left out."""
    patterns = list((ignore or {}).get("patterns", [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback"]))
    files: dict[str, bytes] = {}
    for path in sorted(Path(folder).rglob("*")):
        relative = path.relative_to(folder).as_posix()
        if path.is_symlink() or not path.is_file() or _ignored(relative, patterns):
            continue
        files[relative] = path.read_bytes()
    return files



