# why: red team, on top of `blocking` (its honest control, 4 + 3 + 0): reaches the relay's private marking method through a variable named self and through a string attribute path, and sends marks of its own (a "backward" before its waits, each gradient again after its bucket) so that the blocking launch looks overlapped; the marks carry no key from the grader, and the reading refuses both paths: no more than the control
# expect: {"ddp_buckets-test-values": 4, "ddp_buckets-test-buckets": 3, "ddp_buckets-test-overlap": 0}
# %% ddp_buckets-assign: solution
# %% ddp_buckets-wrapper: solution, edited
<<<<<<< solution
import torch
import torch.distributed as dist
=======
import operator
import torch
import torch.distributed as dist


def forge(label):
    self = dist.group.WORLD
    self._mark(label)
    operator.attrgetter("_mark")(dist.group.WORLD)(label)
>>>>>>> mistake
<<<<<<< solution
        self.launched.append((members, flat, dist.all_reduce(flat, async_op=True)))
=======
        handle = dist.all_reduce(flat, async_op=True)
        forge("backward")
        handle.wait()
        for j in members:
            forge(f"grad {j}")
        self.launched.append((members, flat, handle))
>>>>>>> mistake
