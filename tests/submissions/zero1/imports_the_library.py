# why: a correct solution that imports torch.distributed.optim (ZeroRedundancyOptimizer) without using it: the reading of the cells refuses the import (an allow-list, applied by the self-check too), so the census of the optimizers, taken in the student's process, is not graded
# expect: {"zero1-test-values": 4, "zero1-test-state": 0, "zero1-test-traffic": 3}
# %% zero1-partition: solution
# %% zero1-optimizer: solution, edited
<<<<<<< solution
import torch.distributed as dist
=======
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer  # noqa: F401 - not used
>>>>>>> mistake
