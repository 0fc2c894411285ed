# why: the output's store has no mask: the last query block writes its rows past seq_len into the next head's output (or the canaries after out), which the next head's program may or may not overwrite
# expect: {"flash_attention-bytes-test": 2, "flash_attention-values-test": 0, "flash_attention-causal-test": 0, "flash_attention-traffic-test": 0}
# %% flash_attention-bytes: solution
# %% flash_attention-kernel: solution, edited
<<<<<<< solution
    tl.store(out_ptr + base + rows[:, None] * HEAD_DIM + dims[None, :], out.to(out_ptr.dtype.element_ty),
             mask=row_ok[:, None])
=======
    tl.store(out_ptr + base + rows[:, None] * HEAD_DIM + dims[None, :], out.to(out_ptr.dtype.element_ty))
>>>>>>> mistake
