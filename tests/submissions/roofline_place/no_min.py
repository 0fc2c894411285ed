# why: the attainable rate is the slanted roof alone, intensity x bandwidth, without the min with the peak: compute-bound operations get a rate above the flat roof (the bound is right)
# expect: {"roofline_place-test-costs": 3, "roofline_place-test-place": 0, "roofline_place-test-kernels": 4}
# %% roofline_place-costs: solution
# %% roofline_place-place: solution, edited
<<<<<<< solution
        return {"intensity": intensity, "attainable": peak, "bound": "compute"}
=======
        return {"intensity": intensity, "attainable": roofs[lowest], "bound": "compute"}
>>>>>>> mistake
# %% roofline_place-kernels: solution
