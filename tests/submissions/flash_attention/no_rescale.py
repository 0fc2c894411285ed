# why: the accumulator is not rescaled when the running maximum grows (acc + p v, only l rescaled): right while the first key block holds every query's maximum, wrong once a later block raises it: every values cell fails, and traffic is graded on right values
# expect: {"flash_attention-bytes-test": 2, "flash_attention-values-test": 0, "flash_attention-causal-test": 0, "flash_attention-traffic-test": 0}
# %% flash_attention-bytes: solution
# %% flash_attention-kernel: solution, edited
<<<<<<< solution
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
=======
        acc = acc + tl.dot(p.to(v.dtype), v)
>>>>>>> mistake
