"""The worker's check run, kept from one submission to the next (``autograder.slots.CheckServer``).

Real bubblewrap sandboxes and real check runs: the second job must run in a fresh process of the same
warm check run, find nothing of the first (its variables, the processes it left behind), and a check
run whose job did not come back complete must not be used again.
"""

from __future__ import annotations

import json

import pytest

from autograder import slots
from autograder.runner import Settings

pytestmark = pytest.mark.usefixtures("bubblewrap")

SETTINGS = Settings(memory_bytes=2 * 2**30, processes=256)

LEAVE_BEHIND = """
import os, subprocess
secret_of_the_first_submission = 42
# a process left running, in a session of its own, as a careless or hostile job could leave one
subprocess.Popen(["sleep", "300"], start_new_session=True)
print(os.getppid())
"""

LOOK = """
import json, os
others = []
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) not in (1, os.getpid(), os.getppid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                others.append(f.read().replace(b"\\0", b" ").decode().strip())
        except OSError:
            pass
print(json.dumps({"server": os.getppid(), "me": os.getpid(), "others": others,
                  "leaked": "secret_of_the_first_submission" in globals()}))
"""


def _job(source: str, budget: float = 60.0) -> dict:
    return {"notebooks": [{"name": "", "setup": [], "solutions": [], "tests": [{"grade_id": "t", "source": source}]}],
            "budget": budget, "secret": "s", "files": {}}


def _stdout(reply: dict) -> str:
    outputs = reply["tests"][""]["t"]["outputs"]
    return "".join(o.get("text", "") for o in outputs if o.get("name") == "stdout")


def test_a_second_submission_meets_a_clean_check_run() -> None:
    server = slots.CheckServer(SETTINGS, None, ("math",), 1)
    try:
        first_ready = server.run.ready(120)
        first = server.run.run(_job(LEAVE_BEHIND), timeout=60)
        assert first["done"], first
        parent_of_first = int(_stdout(first).strip())
        assert server.reusable()
        second_ready = server.run.ready(60)
        assert second_ready["ready"] and second_ready["warm_up_seconds"] == first_ready["warm_up_seconds"]
        second = server.run.run(_job(LOOK), timeout=60)
        assert second["done"], second
        seen = json.loads(_stdout(second))
        assert seen["server"] == parent_of_first          # the same warm check run, not a new one
        assert not seen["leaked"]                          # a fresh fork: nothing of the first job's namespace
        assert not [c for c in seen["others"] if "sleep" in c], seen["others"]   # its leftovers were killed
        assert server.run.jobs == 2 and server.stats()["jobs"] == 2
    finally:
        server.close()


def test_a_check_run_whose_job_did_not_finish_is_not_used_again() -> None:
    server = slots.CheckServer(SETTINGS, None, (), 1)
    try:
        server.run.ready(120)
        reply = server.run.run(_job("import time\ntime.sleep(30)"), timeout=2)
        assert not reply["done"] and reply["timed_out"]
        assert not server.reusable()
    finally:
        server.close()


def test_a_job_whose_process_dies_is_reported_at_once_and_its_finished_cells_kept() -> None:
    """A check run killed in the middle of a job (SIGBUS from memory a host shrank, the memory limit) used to
    leave the worker waiting for the whole submission's limit: the warm process now says at once that the
    job's process died, and how; the cells that finished keep their outputs."""
    import time

    server = slots.CheckServer(SETTINGS, None, (), 1)
    job = {"notebooks": [{"name": "", "setup": [], "solutions": [],
                          "tests": [{"grade_id": "first", "source": "print('finished')"},
                                    {"grade_id": "second", "source": "import os, signal\nos.kill(os.getpid(), "
                                                                      "signal.SIGBUS)"},
                                    {"grade_id": "third", "source": "print('never')"}]}],
           "budget": 120, "secret": "s", "files": {}}
    try:
        server.run.ready(120)
        started = time.monotonic()
        reply = server.run.run(job, timeout=120)
        assert time.monotonic() - started < 30, "the worker waited for the time limit"
        assert not reply["done"] and not reply["timed_out"] and reply["died"] == "killed by SIGBUS"
        assert reply["running"] == "second" and list(reply["tests"][""]) == ["first"]
        assert not server.reusable()
    finally:
        server.close()


def test_the_pool_gives_the_same_check_run_to_the_next_submission_only_when_it_ended_well() -> None:
    key = (SETTINGS, None, ("math",), 1)
    try:
        slot = slots.take_slot(SETTINGS, None, prewarm=False, checks=True, preload=("math",), threads=1)
        server = slot.server
        assert server is not None and slot.checks is server.run
        slot.checks.ready(120)
        assert slot.checks.run(_job("x = 1"), timeout=60)["done"]
        slot.close()
        assert slots._servers.get(key) is server          # kept for the next submission
        slot = slots.take_slot(SETTINGS, None, prewarm=False, checks=True, preload=("math",), threads=1)
        assert slot.server is server
        slot.checks.ready(60)
        assert not slot.checks.run(_job("import time\ntime.sleep(30)"), timeout=2)["done"]
        slot.check_box.kill()                              # what the runner does with a check run that did not finish
        slot.close()
        assert slots._servers.get(key) is not server
    finally:
        slots.release_spares()
    assert not slots._servers and not slots._spare
