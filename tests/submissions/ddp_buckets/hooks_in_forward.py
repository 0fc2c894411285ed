# why: registers the gradient hooks in forward(), so every step adds one more hook per parameter: the first step is right, then each gradient counts twice, buckets go out before they are complete, and the hooks pile up
# expect: {"ddp_buckets-test-values": 0, "ddp_buckets-test-buckets": 0, "ddp_buckets-test-overlap": 0}
# %% ddp_buckets-assign: solution
# %% ddp_buckets-wrapper: solution, edited
<<<<<<< solution
        self.reset()
        for i, p in enumerate(self.params):
            p.register_post_accumulate_grad_hook(lambda p, i=i: self.ready(i))
=======
        self.reset()
>>>>>>> mistake
<<<<<<< solution
        return self.module(*args, **kwargs)
=======
        for i, p in enumerate(self.params):
            p.register_post_accumulate_grad_hook(lambda p, i=i: self.ready(i))
        return self.module(*args, **kwargs)
>>>>>>> mistake
