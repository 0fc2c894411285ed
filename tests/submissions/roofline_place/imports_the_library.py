# why: places the operation with the chapter's dlperf.probe.attainable_flops and the kernels by launching and counting them with the course library: the reading refuses dlperf in every cell, so every hidden cell scores 0
# expect: {"roofline_place-test-costs": 0, "roofline_place-test-place": 0, "roofline_place-test-kernels": 0}
# %% roofline_place-costs: solution
# %% roofline_place-place
from dlperf.probe import attainable_flops


def roofline(flops, traffic, peak, bandwidth):
    intensity = {level: flops / traffic[level] for level in traffic}
    roofs = {level: attainable_flops(intensity[level], peak, bandwidth[level]) for level in traffic}
    lowest = min(roofs, key=roofs.get)
    bound = "compute" if roofs[lowest] >= peak else lowest
    return {"intensity": intensity, "attainable": roofs[lowest], "bound": bound}
# %% roofline_place-kernels: solution
