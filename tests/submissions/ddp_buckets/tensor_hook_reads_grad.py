# why: registers the hooks with register_hook (a hook on the gradient, which runs before .grad is written) and reads p.grad there: .grad is still None (the loop sets the gradients to None), so every bucket sends zeros; posted in the right places
# expect: {"ddp_buckets-test-values": 0, "ddp_buckets-test-buckets": 3, "ddp_buckets-test-overlap": 3}
# %% ddp_buckets-assign: solution
# %% ddp_buckets-wrapper: solution, edited
<<<<<<< solution
            p.register_post_accumulate_grad_hook(lambda p, i=i: self.ready(i))
=======
            p.register_hook(lambda grad, i=i: self.ready(i))
>>>>>>> mistake
