# why: the launcher returns torch.softmax(x, dim=1) and never launches the kernel: right numbers, but the stand-in saw no launch and the reading refuses torch.softmax outside the kernel; the kernel itself is the reference's and is graded on its own launch
# expect: {"triton_softmax-values-test": 4, "triton_softmax-half-test": 2, "triton_softmax-traffic-test": 2, "triton_softmax-launcher-test": 0}
# %% triton_softmax-kernel: solution
# %% triton_softmax-launcher
import torch


def softmax(x):
    return torch.softmax(x, dim=1)
