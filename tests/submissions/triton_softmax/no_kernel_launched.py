# why: the launcher returns torch.softmax(x, dim=1) and never launches the kernel: right numbers, but no Triton kernel ran (the probe saw no launch) and the reading of the source finds torch.softmax and no launch
# expect: {"triton_softmax-values-test": 0, "triton_softmax-half-test": 0, "triton_softmax-traffic-test": 0, "triton_softmax-kernel-test": 0}
# %% triton_softmax-kernel: solution
# %% triton_softmax-launcher
import torch


def softmax(x):
    return torch.softmax(x, dim=1)
