# why: operations written as strings ("F0", "B3") in GPipe, and 1F1B built with torch.arange, so its micro-batch indices are 0-dim tensors, not ints (the reading also refuses the torch import: a schedule is plain Python data)
# expect: {"pipeline_schedule-gpipe-test": 0, "pipeline_schedule-1f1b-test-valid": 0, "pipeline_schedule-1f1b-test-bubble": 0, "pipeline_schedule-1f1b-test-memory": 0}
# %% pipeline_schedule-gpipe
def gpipe(p, m):
    order = [f"F{i}" for i in range(m)] + [f"B{i}" for i in reversed(range(m))]
    return [list(order) for _ in range(p)]
# %% pipeline_schedule-1f1b
import torch


def one_f_one_b(p, m):
    stages = []
    for s in range(p):
        warmup = min(p - s - 1, m)
        batches = torch.arange(m)
        ops = [("F", i) for i in batches[:warmup]]
        for k in range(m - warmup):
            ops += [("F", batches[warmup + k]), ("B", batches[k])]
        ops += [("B", i) for i in batches[m - warmup:]]
        stages.append(ops)
    return stages
