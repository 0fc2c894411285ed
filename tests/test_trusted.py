"""The trusted side of a hidden check: student code in hosts of their own, driven with plain data.

Everything here runs for real: the zygote, hosts in their own namespaces (where the kernel allows
them), the wire, shared memory, the relay between ranks.  The red-team suite
(``tests/test_redteam.py``) attacks the same machinery through the class autograder.
"""

from __future__ import annotations

import ast
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from autograder.trusted import (
    CheckFailed,
    Remote,
    Student,
    StudentRaised,
    difference,
    seed,
    set_secret,
)
from autograder.trusted import zygote
from dlperf import cluster as C

pytestmark = pytest.mark.timeout(300)

SOURCE = '''
import os, sys, time
import torch

def double(x):
    return 2 * x

def add_one(t):
    t.add_(1)

def add_one_each(ts):
    for t in ts:
        t.add_(1)

def rebind(t):
    t = t + 1
    return t

def replace_storage(t):
    t.data = t.data + 1

def call_twice(f, x):
    return f(f(x))

def use_cluster(c, x):
    with c.step() as same:
        same.send(0, 1, x)
    return c.recv(0, 1), same is c

def peek(c):
    return c.topology

class Counter:
    def __init__(self, k):
        self.k = k
    def inc(self):
        self.k += 1
        return self.k

def accumulate(params):
    (params[0] * 2).sum().backward()
    return params[0].grad.clone()

def boom():
    return helper()

def helper():
    raise ValueError("nope")

def leave(code):
    os._exit(code)

def segfault():
    import ctypes
    ctypes.string_at(0)

def spin():
    while True:
        pass

def chatty():
    print("hello from the student")
    print("and from stderr", file=sys.stderr)
    return 1

def look(pid, path):
    found = {"tmp": sorted(os.listdir("/tmp")), "pid": os.getpid(), "uid": os.getuid()}
    try:
        os.kill(pid, 0)
        found["signal"] = "reached"
    except OSError as exc:
        found["signal"] = type(exc).__name__
    for what in ("environ", "mem"):
        try:
            with open(f"/proc/{pid}/{what}", "rb") as f:
                f.read(1)
            found[what] = "read"
        except OSError as exc:
            found[what] = type(exc).__name__
    try:
        os.close(os.open(f"/proc/{pid}/fd/0", os.O_RDONLY))   # the checker's stdin: the job, in the check run
        found["fd"] = "opened"
    except OSError as exc:
        found["fd"] = type(exc).__name__
    found["path"] = os.path.exists(path)
    found["proc"] = sorted(n for n in os.listdir("/proc") if n.isdigit()) if os.path.isdir("/proc") else []
    import socket
    try:
        socket.create_connection(("127.0.0.1", 22), timeout=1).close()
        found["network"] = "connected"
    except OSError as exc:
        found["network"] = type(exc).__name__
    return found
'''


@pytest.fixture(scope="module")
def student():
    with Student(parts=[("<solution>", SOURCE)], timeout=20, capture=True) as s:
        yield s


def test_calls_return_plain_values_with_their_types(student):
    assert student.call("double", 21) == 42 and type(student.call("double", 2.5)) is float
    got = student.call("double", torch.arange(3))
    assert type(got) is torch.Tensor and got.tolist() == [0, 2, 4]


def test_shared_memory_shows_what_was_written_into_it_and_nothing_else(student):
    written = student.share(torch.zeros(4))
    student.call("add_one", written)
    assert written.read().tolist() == [1.0] * 4
    rebound = student.share(torch.zeros(4))
    assert student.call("rebind", rebound).tolist() == [1.0] * 4   # the returned tensor has it...
    assert rebound.read().tolist() == [0.0] * 4                     # ...the caller's memory does not
    replaced = student.share(torch.zeros(4))
    _, report = student.call("replace_storage", replaced, _report=True)
    assert replaced.read().tolist() == [0.0] * 4                    # t.data = ... writes nothing into it
    assert report.contents[0][0].tolist() == [1.0] * 4              # though the object reads as changed


def test_a_tensor_sent_as_a_value_is_reported_even_where_a_freed_shared_one_had_its_id(student):
    # The host knew shared tensors by id() alone, and ids are reused once a tensor is freed: after some calls
    # with shared tensors, a tensor sent as a value (a CUDA replica; here a CPU one, sent the same way)
    # could be reported as None ("lives in the grader's memory"), and the allreduce and gradscaler checks
    # of CUDA cases failed for the reference solutions on an H200.
    for step in range(60):
        shared = student.share(torch.zeros(2))
        value = torch.full((3,), float(step))
        _, report = student.call("add_one_each", [shared, value], _report=True)
        assert report.objects[0] is None and shared.read().tolist() == [1.0, 1.0]
        assert type(report.objects[1]) is torch.Tensor, f"call {step}: the value tensor was reported as shared"
        assert report.objects[1].tolist() == [step + 1.0] * 3


def test_a_view_of_shared_memory_writes_through_to_its_base(student):
    base = student.share(torch.zeros(3, 4))
    column = base.view((3,), (4,), offset=1)
    student.call("add_one", column)
    assert base.read()[:, 1].tolist() == [1.0, 1.0, 1.0] and base.read().sum().item() == 3.0


def test_a_function_of_the_checker_runs_here_and_in_place_changes_travel_back(student):
    calls = []

    def here(x):
        calls.append(os.getpid())
        if isinstance(x, torch.Tensor):
            x.mul_(10)
            return x
        return x + 1

    assert student.call("call_twice", here, 1) == 3 and calls == [os.getpid()] * 2
    assert student.call("call_twice", here, torch.ones(2)).tolist() == [100.0, 100.0]


def test_an_object_of_the_checker_offers_only_what_it_was_given(student):
    cluster = C.Cluster(C.ring(2))
    got, same = student.call("use_cluster", Remote(cluster, ["step", "send", "recv"], ["n"]), torch.ones(3))
    assert got.tolist() == [1.0, 1.0, 1.0] and same is True
    assert cluster.steps == 1 and cluster.bytes_sent == (12, 0)     # counted here, by the real cluster
    with pytest.raises(StudentRaised, match="has no attribute 'topology' here"):
        student.call("peek", Remote(cluster, ["step"], ["n"]))


def test_objects_kept_in_the_students_process(student):
    counter = student.keep("Counter", 5)
    assert counter.call("inc") == 6 and counter.call("inc") == 7 and counter.get("k") == 7
    params = student.hold([torch.ones(2, requires_grad=True)])
    first = student.call("accumulate", params)
    second = student.call("accumulate", params)
    assert first.tolist() == [2.0, 2.0] and second.tolist() == [4.0, 4.0]   # the same tensor, its grad kept


def test_the_students_exception_comes_back_with_the_students_frames_only(student):
    with pytest.raises(StudentRaised) as info:
        student.call("boom")
    exc = info.value
    assert exc.type_name == "ValueError" and exc.is_a("Exception") and not exc.is_a("KeyError")
    assert 'File "<solution>"' in exc.student_traceback and "raise ValueError" in exc.student_traceback
    assert "host.py" not in exc.student_traceback and "wire.py" not in exc.student_traceback


def test_what_the_student_prints_is_captured_apart_from_the_checker(student, capfd):
    assert student.call("chatty") == 1
    captured = capfd.readouterr()
    assert "hello from the student" not in captured.out + captured.err
    assert "hello from the student" in student.output() and "and from stderr" in student.output()


def test_a_solution_cell_that_fails_on_its_own_is_reported_as_such():
    with pytest.raises(CheckFailed, match="failed when run on their own(.|\n)*NameError"):
        with Student(parts=[("<cell>", "x = helper_from_another_cell()\n")]):
            pass


@pytest.mark.parametrize("call, args, message", [
    ("leave", (3,), "died \\(exit code 3\\)"),
    ("segfault", (), "died \\(killed by SIGSEGV\\)"),
])
def test_a_process_that_dies_is_reported_and_the_checker_carries_on(call, args, message):
    with Student(parts=[("<solution>", SOURCE)]) as s:
        with pytest.raises(CheckFailed, match=message):
            s.call(call, *args)
        with pytest.raises(CheckFailed, match=message):   # and it stays dead, with the same reason
            s.call("double", 1)


RESIZE = """
import gc, mmap

def resize_every_map(t):
    tried = refused = 0
    for obj in gc.get_objects():
        if isinstance(obj, mmap.mmap):
            tried += 1
            try:
                obj.resize(1)          # ftruncate of the shared file: SIGBUS in the checker without the seals
            except (OSError, ValueError, SystemError, TypeError):
                refused += 1
    return tried, refused
"""


CAPABILITY = """
import torch

def capability():
    return torch.backends.cpu.get_cpu_capability()

def reduce(x):
    return (x * 1.0001).sum()
"""


def test_a_host_computes_bit_for_bit_as_the_checker_does():
    """The host sees an empty /proc, where the CPU's vector extensions are read from: detected before the fork,
    the host runs the same kernels as the checker, so results equal to the last bit can be required."""
    with Student(parts=[("<solution>", CAPABILITY)]) as s:
        assert s.call("capability") == torch.backends.cpu.get_cpu_capability()
        x = torch.randn(100_003, generator=torch.Generator().manual_seed(0))
        assert torch.equal(s.call("reduce", x), (x * 1.0001).sum())


def test_shared_memory_cannot_be_resized_by_the_host():
    """The memory handed to a host is sealed: a truncation is refused there, and this process reads on."""
    with Student(parts=[("<solution>", RESIZE)]) as s:
        shared = s.share(torch.arange(4096, dtype=torch.float32))
        tried, refused = s.call("resize_every_map", shared)
        assert tried >= 1 and refused == tried
        assert torch.equal(shared.read(), torch.arange(4096, dtype=torch.float32))   # no SIGBUS here


def test_a_call_that_runs_too_long_is_killed():
    with Student(parts=[("<solution>", SOURCE)]) as s:
        pid = s.process.pid
        started = time.monotonic()
        with pytest.raises(CheckFailed, match="timed out"):
            s.call("spin", _timeout=2)
        assert time.monotonic() - started < 10
        time.sleep(0.5)
        assert not os.path.exists(f"/proc/{pid}")  # killed and reaped


def test_forbidden_library_objects_are_switched_off_and_their_source_hidden():
    source = '''
import importlib, inspect, torch
def make():
    return torch.amp.GradScaler("cpu")
def source_length():
    import torch.amp.grad_scaler as m
    return len(open(m.__file__).read())
def reloaded():
    import torch.amp.grad_scaler as m
    try:
        return hasattr(importlib.reload(m), "GradScaler")
    except ImportError:
        return False
def subclass():
    return torch.cpu.amp.GradScaler()
'''
    with Student(parts=[("<solution>", source)], forbid=["torch.amp.GradScaler"]) as s:
        with pytest.raises(StudentRaised, match="switched off"):
            s.call("make")
        with pytest.raises(StudentRaised, match="switched off"):
            s.call("subclass")
        if s.process.isolation == "namespaces":
            assert s.call("source_length") == 0
            assert s.call("reloaded") is False
    assert torch.amp.GradScaler("cpu").get_scale() == 65536.0   # untouched here


def test_forbid_finds_every_alias_through_the_index_as_a_full_walk_would():
    """The hosts' forbid looks up the forbidden object's places in an index made in the zygote (a full
    walk of every module in every host copied ~25 ms of pages); modules imported after the index and
    namespaces that grew since are walked, so every alias goes, old or new."""
    script = textwrap.dedent('''
        import sys, types, torch
        from dlperf.grading import host
        grown = types.ModuleType("grown_after_index"); sys.modules["grown_after_index"] = grown
        host.index_globals()
        grown.alias = torch.amp.GradScaler                     # a namespace that grew since the index
        late = types.ModuleType("imported_after_index"); late.scaler = torch.amp.GradScaler
        sys.modules["imported_after_index"] = late             # a module new since the index
        full = sorted((n, k) for n, m in list(sys.modules.items()) if hasattr(m, "__dict__")
                      for k, v in list(vars(m).items()) if v is torch.amp.GradScaler)
        found = sorted((n, k) for n, m in list(sys.modules.items()) if hasattr(m, "__dict__")
                       for ns, k in host._aliases(torch.amp.GradScaler) if ns is vars(m))
        host.forbid("torch.amp.GradScaler")
        left = [(n, k) for n, m in list(sys.modules.items()) if hasattr(m, "__dict__")
                for k, v in list(vars(m).items()) if isinstance(v, type) and v.__name__ == "GradScaler"
                and v.__module__ == "torch.amp.grad_scaler"]
        print(repr((full, found, left)))
    ''')
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         cwd=str(Path(__file__).resolve().parents[1])).stdout
    full, found, left = ast.literal_eval(out.strip().splitlines()[-1])
    assert ("grown_after_index", "alias") in full and ("imported_after_index", "scaler") in full
    assert ("torch.amp", "GradScaler") in full
    assert found == full
    assert left == []


def test_the_host_cannot_reach_the_checker():
    with Student(parts=[("<solution>", SOURCE)]) as s:
        if s.process.isolation != "namespaces":
            pytest.skip(f"no namespaces on this machine: {s.process.why}")
        secret = os.path.abspath(__file__)
        zygote.make_non_dumpable()
        try:
            found = s.call("look", os.getpid(), secret)
        finally:
            zygote._libc.prctl(zygote.PR_SET_DUMPABLE, 1, 0, 0, 0)
    # its own PID namespace, its own /tmp: empty, but for the way down to what the interpreter needs
    # where the checkout or the virtual environment lies under /tmp (a CI clone)
    needed = {p.split(os.sep)[2] for p in zygote._needed() if p.startswith("/tmp/")}
    assert set(found["tmp"]) == needed
    if s.process.pid_namespace:     # none where a GPU is visible (the test below)
        assert found["pid"] == 1
        assert found["signal"] in ("ProcessLookupError", "PermissionError")
        assert found["proc"] == []  # no process of anyone else's (another rank's name, the checker's arguments)
    assert {found["environ"], found["mem"], found["fd"]} <= {"PermissionError", "FileNotFoundError"}
    assert found["network"] in ("ConnectionRefusedError", "OSError", "TimeoutError")
    assert found["path"] is False or os.path.dirname(secret) not in (os.getcwd(), os.path.expanduser("~"))


# -- seeds and comparisons ----------------------------------------------------------------------

def test_seeds_are_fixed_without_a_secret_and_change_with_it():
    set_secret(None)
    fixed = seed("case", 1)
    assert fixed == seed("case", 1) != seed("case", 2)
    set_secret("submission a")
    a = seed("case", 1)
    set_secret("submission b")
    assert a != seed("case", 1) and a != fixed
    set_secret(None)


def test_differences_name_the_place_and_compare_types_exactly():
    assert difference({"a": [1.0, torch.ones(2)]}, {"a": [1.0, torch.ones(2)]}) is None
    assert difference(float("nan"), float("nan")) is None
    assert "a > [1]" in difference({"a": [1.0, torch.zeros(2)]}, {"a": [1.0, torch.ones(2)]})
    assert "(int), expected 1.0 (float)" in difference(1, 1.0)
    assert "got a list" in difference([1], (1,)) or "expected a tuple" in difference([1], (1,))
    assert "dtype" not in (difference(torch.ones(2), torch.ones(2)) or "")
    assert "float64 tensor, expected float32" in difference(torch.ones(2, dtype=torch.float64), torch.ones(2))
    assert difference(torch.tensor([math.inf]), torch.tensor([math.inf])) is None
    assert difference(torch.tensor([1.0]), torch.tensor([1.0 + 1e-7]), rtol=1e-6) is None


def test_the_zygote_reports_how_its_hosts_are_isolated():
    with Student(parts=[("<solution>", SOURCE)]) as s:
        assert s.process.isolation in ("namespaces", "process")
        if s.process.isolation == "process":
            assert s.process.why
        os.kill(s.process.pid, signal.SIGKILL)
        with pytest.raises(CheckFailed, match="died"):
            s.call("double", 1)


def test_a_checkout_under_tmp_still_runs_in_the_host(tmp_path):
    """The host's private /tmp must not cover the library it runs: a copy of the checkout under /tmp
    (a CI clone, a doctor run) still imports dlperf's modules lazily in the host; the rest of /tmp stays
    covered."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    if not str(tmp_path.resolve()).startswith("/tmp/"):
        pytest.skip("the temporary folder is not under /tmp here")
    copy = tmp_path / "checkout"
    for package in ("dlperf", "autograder"):
        shutil.copytree(repo / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "secret.txt").write_text("the solutions of a course")
    (copy / "solution.py").write_text(
        "def lazy():\n"
        "    import os\n"
        "    import dlperf.grading.probes.ring_allreduce as m\n"
        "    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(m.__file__))))\n"
        "    return [m.__name__, sorted(os.listdir(here))]\n")
    script = ("import sys\nfrom solution import lazy\nfrom autograder.trusted import Student\n"
              "with Student(lazy) as s:\n    print(s.isolation)\n    print(s.call('lazy'))\n")
    # Run from a working folder of its own under /tmp (as nbgrader's autograde runs a kernel in the
    # submission's folder), which the private /tmp covers too.
    work = tmp_path / "work"
    work.mkdir()
    run = subprocess.run([sys.executable, "-c", script], cwd=work, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(copy)})
    assert run.returncode == 0, run.stderr[-3000:]
    isolation, result = run.stdout.splitlines()[-2:]
    assert "dlperf.grading.probes.ring_allreduce" in result
    with Student(parts=[("<solution>", "x = 1")]) as elsewhere:     # from the checkout, here
        if elsewhere.process.isolation == "namespaces":
            assert isolation == "namespaces"     # not a silent fallback to a bare process
    if isolation == "namespaces":
        assert "secret.txt" not in result and "solution.py" not in result, result   # only dlperf is bound back


SPAWNS = '''
import os, subprocess

def spawn():
    child = subprocess.Popen(["sleep", "60"])
    return {"pid": os.getpid(), "child": child.pid}
'''


def test_where_a_gpu_is_visible_a_host_shares_the_pid_namespace_and_its_children_die_with_it(monkeypatch):
    # CUDA cannot start in a new PID namespace (error 304, seen on an H200): a host that may use a GPU gets
    # none, keeps every other namespace, cannot read the non-dumpable checker, and kill() takes its
    # descendants with it (nothing else would).
    monkeypatch.setattr(zygote, "gpu_visible", lambda: True)
    made = zygote.Zygote.fork()
    try:
        with Student(parts=[("<solution>", SOURCE + SPAWNS)], zygote=made) as s:
            if s.process.isolation != "namespaces":
                pytest.skip(f"no namespaces on this machine: {s.process.why}")
            assert s.process.pid_namespace is False
            got = s.call("spawn")
            assert got["pid"] == s.process.pid          # the checker's PID namespace
            zygote.make_non_dumpable()
            try:
                found = s.call("look", os.getpid(), os.path.abspath(__file__))
            finally:
                zygote._libc.prctl(zygote.PR_SET_DUMPABLE, 1, 0, 0, 0)
            assert {found["environ"], found["mem"], found["fd"]} <= {"PermissionError", "FileNotFoundError"}
            assert found["network"] in ("ConnectionRefusedError", "OSError", "TimeoutError")
            needed = {p.split(os.sep)[2] for p in zygote._needed() if p.startswith("/tmp/")}
            assert set(found["tmp"]) == needed          # its own /tmp all the same
            child = got["child"]
            assert os.path.exists(f"/proc/{child}")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(child):
            time.sleep(0.05)
        assert not _alive(child), "the host's child outlived it"
    finally:
        made.close()
    monkeypatch.undo()
    with Student(parts=[("<solution>", SOURCE)]) as s:           # without a GPU: a PID namespace
        if s.process.isolation == "namespaces":
            assert s.process.pid_namespace is not zygote.gpu_visible()


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_every_name_an_exercise_switches_off_exists_in_the_courses_torch():
    """A name a library version lacks is skipped where the check runs (``present``): torch 2.11 lacks some of
    2.13's private pipelining helpers, and resolving them kept every host of pipeline_schedule from starting
    on a GPU machine.  Here, with the course's own torch, every name must exist: a misspelt one fails this
    test instead of being skipped."""
    import importlib
    import json
    import re
    from pathlib import Path

    from autograder.trusted.student import present

    names = set()
    for module in ("pipeline_schedule", "ring_allreduce"):
        names |= set(importlib.import_module(f"autograder.exercises.{module}").FORBID)
    for path in (Path(__file__).resolve().parents[1] / "solutions").glob("*/*.ipynb"):
        for cell in json.loads(path.read_text())["cells"]:
            for listed in re.findall(r"forbid=\[([^\]]*)\]", "".join(cell["source"])):
                names |= set(re.findall(r"[\"']([\w.]+)[\"']", listed))
    assert len(names) > 10 and "torch.amp.GradScaler" in names
    assert sorted(present(sorted(names))) == sorted(names)
    assert present(["torch.amp.GradScaler", "torch.no_such_thing", "no_such_module.f"]) == ["torch.amp.GradScaler"]
