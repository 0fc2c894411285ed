# why: takes f and g from the chapter's library (dlperf.parallel.tensor) instead of writing them: right values, gradients and traffic, but the reading's allow-list refuses dlperf in every hidden cell
# expect: {"tensor_parallel-test-values": 0, "tensor_parallel-test-gradients": 0, "tensor_parallel-test-traffic": 0}
# %% tensor_parallel-fg
from dlperf.parallel import tensor as TP


def copy_to_parallel(x):
    return TP.CopyToParallel.apply(x, None, None)


def reduce_from_parallel(x):
    return TP.ReduceFromParallel.apply(x, None, None)
# %% tensor_parallel-block: solution
