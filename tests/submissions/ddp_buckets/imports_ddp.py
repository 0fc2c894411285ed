# why: a correct solution that imports torch's DistributedDataParallel without using it: the reading of the cells refuses it, so the overlap, reported by the probe in the student's process, is not graded
# expect: {"ddp_buckets-test-values": 4, "ddp_buckets-test-buckets": 3, "ddp_buckets-test-overlap": 0}
# %% ddp_buckets-assign: solution
# %% ddp_buckets-wrapper: solution, edited
<<<<<<< solution
import torch.distributed as dist
=======
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel  # noqa: F401 - not used
>>>>>>> mistake
