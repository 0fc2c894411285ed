# why: a hierarchical roofline read as a plain one: only the slowest level's roof is compared with the peak, so a tiled product whose cache traffic binds is given main memory's (higher) rate and bound
# expect: {"roofline_place-test-costs": 3, "roofline_place-test-place": 0, "roofline_place-test-kernels": 4}
# %% roofline_place-costs: solution
# %% roofline_place-place
def roofline(flops, traffic, peak, bandwidth):
    intensity = {level: flops / traffic[level] for level in traffic}
    slowest = min(bandwidth, key=bandwidth.get)   # main memory
    roof = intensity[slowest] * bandwidth[slowest]
    if roof < peak:
        return {"intensity": intensity, "attainable": roof, "bound": slowest}
    return {"intensity": intensity, "attainable": peak, "bound": "compute"}
# %% roofline_place-kernels: solution
