"""The course's own nbgrader configuration, as the class autograder applies it (or refuses it, by name).

An instructor's course root has its own ``nbgrader_config.py``; it is the course's
configuration for the autograder too, command-line options (and the autograder's own
``autograder.toml``) only overriding it.  This module reads it the way nbgrader reads
it -- through nbgrader's own configurable classes, so that a value set on a parent class
(``c.ExecutePreprocessor.timeout``, ``c.NotebookClient.timeout``) counts as nbgrader would
count it -- and says, before anything is graded:

* what it gives the autograder's options (:func:`grading_options`): ``c.Execute.timeout``
  is the per-cell limit (``None`` or ``<= 0``: no limit but the submission's),
  ``c.Execute.execute_retries`` the re-runs of a run that failed for the grader's own reasons;
* what the autograder cannot honour (:func:`refusals`): every other ``Execute`` setting
  that differs from nbgrader's default, ``Autograde`` settings but ``exclude_overwriting``,
  and course folders (``CourseDirectory.submitted_directory``, ...) that are not
  nbgrader's, each named with its value and why; ``autograder grade`` refuses such a course
  before grading, never grades it differently in silence.

The project's own course (``course/``, whose configuration is tuned for plain nbgrader on a
busy test machine) keeps the autograder's limits; its exercises are graded in trusted mode.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# Execute settings the autograder applies; the others must stay at nbgrader's default.
HONOURED_EXECUTE = {"timeout", "execute_retries", "interrupt_on_timeout", "startup_timeout"}
# Execute settings that are the grader's own business (they do not change a grade).
IGNORED_EXECUTE = {"record_timing", "store_widget_state", "log_level", "display_data_priority", "enabled",
                   "default_language", "kernel_manager_class"}
# Course folders the autograder reads and writes under nbgrader's default names only.
FOLDERS = {"submitted_directory": "submitted", "autograded_directory": "autograded"}
HONOURED_AUTOGRADE = {"exclude_overwriting", "create_student", "force", "log_level"}


def own_config(course_root: Path) -> Any | None:
    """The course's own configuration (nbgrader's, loaded as nbgrader loads it), or ``None`` for the
    project's course and a root without ``nbgrader_config.py``."""
    from . import course
    from .assignment import course_config

    root = Path(course_root).resolve()
    if not (root / "nbgrader_config.py").is_file() or root == course.COURSE.resolve():
        return None
    return course_config(root)


def _execute(config: Any) -> tuple[Any, Any]:
    from nbgrader.preprocessors import Execute

    return Execute(config=config), Execute()


def _changed(configured: Any, default: Any) -> dict[str, Any]:
    changed = {}
    for name in configured.trait_names(config=True):
        try:
            value, base = getattr(configured, name), getattr(default, name)
        except Exception:  # noqa: BLE001, S112 - a trait without a default cannot have been set either
            continue
        if value != base:
            changed[name] = value
    return changed


def grading_options(course_root: Path) -> dict[str, Any]:
    """Options of ``autograder grade`` that the course's configuration sets: ``cell_timeout``, ``retries``."""
    config = own_config(course_root)
    if config is None:
        return {}
    configured, default = _execute(config)
    options: dict[str, Any] = {}
    timeout = configured.timeout
    options["cell_timeout"] = float(timeout) if timeout is not None and timeout > 0 else None
    if configured.execute_retries != default.execute_retries:
        options["retries"] = int(configured.execute_retries)
    return options


def refusals(course_root: Path) -> list[str]:
    """What the course's configuration asks for that the autograder cannot do (empty: nothing)."""
    config = own_config(course_root)
    if config is None:
        return []
    out: list[str] = []
    configured, default = _execute(config)
    for name, value in sorted(_changed(configured, default).items()):
        if name in IGNORED_EXECUTE or (name in HONOURED_EXECUTE and name != "interrupt_on_timeout"):
            continue
        if name == "interrupt_on_timeout":
            out.append("c.Execute.interrupt_on_timeout = False: nbgrader then stops a notebook at its first cell "
                       "past the limit and leaves it ungraded; the autograder interrupts that cell and goes on")
        elif name == "kernel_name":
            out.append(f"c.Execute.kernel_name = {value!r}: the autograder runs each notebook in the kernel its "
                       "instructor's version names")
        else:
            out.append(f"c.Execute.{name} = {value!r}: not applied by the autograder's kernel runner")
    from nbgrader.apps.autogradeapp import AutogradeApp
    from nbgrader.converters import Autograde

    for cls in (Autograde, AutogradeApp):
        section = config.get(cls.__name__, {})
        for name in sorted(section):
            if name not in HONOURED_AUTOGRADE and not name.startswith("_"):
                out.append(f"c.{cls.__name__}.{name} = {section[name]!r}: the autograder grades with nbgrader's "
                           "own autograde steps only")
    from nbgrader.coursedir import CourseDirectory

    coursedir = CourseDirectory(config=config)
    for name, expected in FOLDERS.items():
        if getattr(coursedir, name) != expected:
            out.append(f"c.CourseDirectory.{name} = {getattr(coursedir, name)!r}: the autograder reads and writes "
                       f"'{expected}/' of the course root")
    if coursedir.directory_structure != CourseDirectory.directory_structure.default_value:
        out.append(f"c.CourseDirectory.directory_structure = {coursedir.directory_structure!r}: the autograder "
                   "uses nbgrader's default layout (<folder>/<student>/<assignment>)")
    return out


def refusal_text(course_root: Path, found: list[str]) -> str:
    return (f"{Path(course_root) / 'nbgrader_config.py'} asks for what the autograder cannot honour, so nothing "
            "was graded (remove these settings, or grade with plain nbgrader):\n  " + "\n  ".join(found))
