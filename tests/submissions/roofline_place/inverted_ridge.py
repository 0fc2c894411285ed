# why: the ridge point written the wrong way up, bandwidth / peak (bytes per FLOP), so the bound is decided against a tiny ridge and memory-bound operations are called compute-bound; the attainable rate itself is right
# expect: {"roofline_place-test-costs": 3, "roofline_place-test-place": 0, "roofline_place-test-kernels": 4}
# %% roofline_place-costs: solution
# %% roofline_place-place
def roofline(flops, traffic, peak, bandwidth):
    intensity = {level: flops / traffic[level] for level in traffic}
    attainable = min([peak] + [intensity[level] * bandwidth[level] for level in traffic])
    bound, lowest = "compute", peak
    for level in traffic:
        ridge = bandwidth[level] / peak           # where the slanted roof meets the flat one
        if intensity[level] < ridge and intensity[level] * bandwidth[level] < lowest:
            bound, lowest = level, intensity[level] * bandwidth[level]
    return {"intensity": intensity, "attainable": attainable, "bound": bound}
# %% roofline_place-kernels: solution
