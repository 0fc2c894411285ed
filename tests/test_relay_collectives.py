"""The relay's collectives (``Ranks(..., collectives=True)``): results computed by the relay, counters, refusals.

Every expected value here is plain arithmetic on the inputs; the ranks are hosts
joined only by the relay (:mod:`autograder.trusted.relay`).
"""

from __future__ import annotations

import pytest
import torch

from autograder.trusted import CheckFailed, Ranks

RANKS = '''
import torch
import torch.distributed as dist


def run(x, root):
    """Every collective once, in a fixed order; returns what each produced on this rank."""
    rank, n = dist.get_rank(), dist.get_world_size()
    out = {}
    b = x.clone() if rank == root else torch.zeros_like(x)
    dist.broadcast(b, src=root)
    out["broadcast"] = b
    a = x.clone()
    dist.all_reduce(a)
    out["allreduce"] = a
    gathered = [torch.empty_like(x) for _ in range(n)]
    dist.all_gather(gathered, x)
    out["allgather"] = torch.stack(gathered)
    flat = torch.empty(n * x.numel(), dtype=x.dtype)
    dist.all_gather_into_tensor(flat, x)
    out["allgather_flat"] = flat
    parts = list((x.repeat(n) * (torch.arange(n * x.numel()) + 1).to(x.dtype)).split(x.numel()))
    mine = torch.empty_like(x)
    dist.reduce_scatter(mine, parts)
    out["reduce_scatter"] = mine
    mine2 = torch.empty_like(x)
    dist.reduce_scatter_tensor(mine2, torch.cat(parts))
    out["reduce_scatter_flat"] = mine2
    handle = dist.broadcast(x.clone() if rank == root else torch.zeros_like(x), src=root, async_op=True)
    handle.wait()
    w = x.clone()
    works = [dist.all_reduce(w, async_op=True), dist.barrier(async_op=True)]
    for work in works:
        work.wait()
    out["async_allreduce"] = w
    return out


def mismatch():
    t = torch.ones(3 + dist.get_rank())
    dist.all_reduce(t)


def wrong_root():
    t = torch.ones(2)
    dist.broadcast(t, src=dist.get_rank())


def absent():
    if dist.get_rank() == 0:
        dist.barrier()


def raises_on_rank_1():
    if dist.get_rank() == 1:
        raise ValueError("optimizer got an empty parameter list")
    dist.barrier()


def collective():
    dist.all_reduce(torch.ones(2))


def last_handle_only():
    """Waits only for the second of two all-reduces: the first result is never asked for, so never delivered."""
    a, b = torch.ones(2) * (dist.get_rank() + 1), torch.ones(3) * (dist.get_rank() + 1)
    first = dist.all_reduce(a, async_op=True)
    second = dist.all_reduce(b, async_op=True)
    second.wait()
    dist.barrier()
    return a.tolist(), b.tolist(), first.is_completed(), a.tolist()


def busy_poll():
    """A blocking launch written as a loop on is_completed(): the relay sees the rank ask (a poll)."""
    from dlperf.grading.relay import mark

    t = torch.ones(2)
    work = dist.all_reduce(t, async_op=True)
    polls = 0
    while not work.is_completed():
        polls += 1
    mark("after", flush=True)
    work.wait()
    return t.tolist(), polls


def keyed(key):
    from dlperf.grading.relay import mark

    mark("plain")
    mark("signed", key=key)
    dist.group.WORLD._mark("forged")
    mark("end", flush=True, key=key)


def handles_alive():
    import gc

    for _ in range(5):
        dist.all_reduce(torch.ones(2), async_op=True)       # dropped, never waited for
    dist.barrier()
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, dist.Work))


def timeline(blocking):
    from dlperf.grading.relay import mark

    a, b = torch.ones(2), torch.ones(3)
    first = dist.all_reduce(a, async_op=not blocking)
    mark("a")
    second = dist.all_reduce(b, async_op=not blocking)
    mark("b")
    if not blocking:
        first.wait()
        second.wait()
    mark("end", flush=True)
    return float(a.sum() + b.sum())
'''


def _inputs(n: int, dtype: torch.dtype) -> list[torch.Tensor]:
    return [(torch.arange(5) * (r + 1) - 3 * r).to(dtype) for r in range(n)]


@pytest.mark.parametrize("n, dtype", [(2, torch.float32), (3, torch.int64)])
def test_collectives_compute_and_count_like_plain_arithmetic(n, dtype):
    xs = _inputs(n, dtype)
    root = n - 1
    with Ranks(parts=[("<ranks>", RANKS)], n=n, collectives=True) as ranks:
        outs = ranks.call("run", [(x, root) for x in xs])
        log, traffic = ranks.collective_log, ranks.traffic
    weights = (torch.arange(n * 5) + 1).to(dtype)
    total = xs[0].clone()
    for x in xs[1:]:
        total = total + x
    for r, out in enumerate(outs):
        assert torch.equal(out["broadcast"], xs[root])
        assert torch.equal(out["allreduce"], total) and torch.equal(out["async_allreduce"], total)
        assert torch.equal(out["allgather"], torch.stack(xs))
        assert torch.equal(out["allgather_flat"], torch.cat(xs))
        expected = sum((x.repeat(n) * weights).split(5)[r] for x in xs)
        assert torch.equal(out["reduce_scatter"], expected) and torch.equal(out["reduce_scatter_flat"], expected)
    s = 5 * xs[0].element_size()
    assert [c["op"] for c in log] == ["broadcast", "allreduce", "allgather", "allgather", "reduce_scatter",
                                      "reduce_scatter", "broadcast", "allreduce", "barrier"]
    assert log[0]["root"] == root and log[0]["contributed"] == [s if r == root else 0 for r in range(n)]
    assert log[0]["delivered"] == [0 if r == root else s for r in range(n)]
    for r, t in enumerate(traffic):
        assert t["collective_calls"] == {"broadcast": 2, "allreduce": 2, "allgather": 2, "reduce_scatter": 2,
                                         "barrier": 1}
        root_bytes = 2 * s if r == root else 0
        assert t["bytes_contributed"] == root_bytes + 2 * s + 2 * s + 2 * n * s
        assert t["bytes_delivered"] == (0 if r == root else 2 * s) + 2 * s + 2 * n * s + 2 * s
        assert t["bytes_sent"] == t["messages_sent"] == 0


def test_mismatched_collectives_fail_every_rank_with_both_calls_named():
    with Ranks(parts=[("<ranks>", RANKS)], n=2, collectives=True, timeout=20) as ranks:
        with pytest.raises(CheckFailed, match=r"collective #1: rank \d called allreduce of \d float32 elements while "
                                              r"rank \d called allreduce of \d float32"):
            ranks.call("mismatch", [()] * 2)
    with Ranks(parts=[("<ranks>", RANKS)], n=2, collectives=True, timeout=20) as ranks:
        with pytest.raises(CheckFailed, match="from rank 0 while rank . called broadcast of 2 float32 elements from "
                                              "rank 1|from rank 1 while rank . called broadcast of 2 float32 "
                                              "elements from rank 0"):
            ranks.call("wrong_root", [()] * 2)


def test_a_rank_that_never_calls_the_collective_is_a_deadlock():
    with Ranks(parts=[("<ranks>", RANKS)], n=2, collectives=True, timeout=20) as ranks:
        with pytest.raises(CheckFailed, match=r"deadlock(.|\n)*collective #1 \(barrier\), which rank 1 never called"):
            ranks.call("absent", [()] * 2)


def test_a_rank_that_raises_is_reported_before_the_deadlock_it_causes():
    with Ranks(parts=[("<ranks>", RANKS)], n=3, collectives=True, timeout=20) as ranks:
        with pytest.raises(CheckFailed, match=r"rank 1: your code raised ValueError: optimizer got an empty parameter "
                                              r"list(.|\n)*the other ranks then waited for it: deadlock"):
            ranks.call("raises_on_rank_1", [()] * 3)


def test_the_relay_refuses_collectives_the_group_was_not_opened_with():
    with Ranks(parts=[("<ranks>", RANKS)], n=2) as ranks:
        with pytest.raises(CheckFailed, match="is a collective operation"):
            ranks.call("collective", [()] * 2)
    # the rank's own switch is not what decides: a rank that turns it on is refused by the relay
    with Ranks(parts=[("<ranks>", RANKS + '''

def forced():
    dist.distributed_c10d._get_default_group()._collectives = True
    dist.all_reduce(torch.ones(2))
''')], n=2) as ranks:
        with pytest.raises(CheckFailed, match="called the collective allreduce: this process group has "
                                              "point-to-point operations only"):
            ranks.call("forced", [()] * 2)


def test_the_timeline_orders_each_ranks_posts_waits_and_marks():
    with Ranks(parts=[("<ranks>", RANKS)], n=2, collectives=True, timeout=20) as ranks:
        assert ranks.call("timeline", [(False,), (False,)]) == [10.0, 10.0]
        overlapped = ranks.timeline
        assert ranks.call("timeline", [(True,), (True,)]) == [10.0, 10.0]
        blocking = ranks.timeline
    for events in overlapped:      # posted, marked, posted, marked, then waited: nothing waited for in between
        assert events[:4] == [("post", 0, "allreduce", 2), ("mark", "a"), ("post", 1, "allreduce", 3), ("mark", "b")]
        assert events[4] == ("wait", 0) and events[-1] == ("mark", "end")
        assert set(events[5:-1]) <= {("wait", 1)}
    for events in blocking:        # each blocking all_reduce is waited for before the next mark
        assert events == [("post", 0, "allreduce", 2), ("wait", 0), ("mark", "a"), ("post", 1, "allreduce", 3),
                          ("wait", 1), ("mark", "b"), ("mark", "end")]


def test_a_result_reaches_a_rank_only_when_it_waits_for_that_handle():
    """Waiting for the last handle only does not deliver the first result (as on a real backend, a result is
    there only once its own handle was waited for): the tensor keeps what the rank put in, until it asks."""
    with Ranks(parts=[("<ranks>", RANKS)], n=2, collectives=True, timeout=20) as ranks:
        out = ranks.call("last_handle_only", [()] * 2)
        log, events = ranks.collective_log, ranks.timeline
    for r, (a, b, done, later) in enumerate(out):
        assert a == [r + 1.0] * 2 and b == [3.0] * 3      # the first all-reduce's sum never arrived
        assert done is True and later == [3.0] * 2        # polling asked for it: then it came
    assert [c["op"] for c in log] == ["allreduce", "allreduce", "barrier"]
    for timeline in events:
        assert timeline == [("post", 0, "allreduce", 2), ("post", 1, "allreduce", 3), ("wait", 1),
                            ("post", 2, "barrier", 0), ("wait", 2), ("poll", 0)]


def test_polling_is_seen_once_and_completes_when_every_rank_has_posted():
    with Ranks(parts=[("<ranks>", RANKS)], n=2, collectives=True, timeout=20) as ranks:
        out = ranks.call("busy_poll", [()] * 2)
        events = ranks.timeline
    assert all(t == [2.0, 2.0] for t, _ in out)
    for timeline in events:
        assert timeline[0] == ("post", 0, "allreduce", 2) and timeline[1] == ("poll", 0)
        assert timeline[2:] == [("mark", "after")]         # one poll recorded, however many were made


def test_marks_keep_the_key_they_were_sent_with():
    with Ranks(parts=[("<ranks>", RANKS)], n=2, collectives=True, timeout=20) as ranks:
        ranks.call("keyed", [("a1",), ("b2",)])
        events = ranks.timeline
    assert events[0] == [("mark", "plain"), ("mark", "signed", "a1"), ("mark", "forged"), ("mark", "end", "a1")]
    assert events[1] == [("mark", "plain"), ("mark", "signed", "b2"), ("mark", "forged"), ("mark", "end", "b2")]


def test_a_dropped_handle_is_not_kept_alive_by_the_group():
    with Ranks(parts=[("<ranks>", RANKS)], n=2, collectives=True, timeout=20) as ranks:
        assert ranks.call("handles_alive", [()] * 2) == [0, 0]
