# why: zero_grad clears only the owned parameters' gradients: the others accumulate from step to step on every rank, so the all-reduced gradients (and the values) are wrong from the second step on
# expect: {"zero1-test-values": 0, "zero1-test-state": 3, "zero1-test-traffic": 3}
# %% zero1-partition: solution
# %% zero1-optimizer: solution, edited
<<<<<<< solution
        for p in self.params:
            if set_to_none:
=======
        rank = dist.get_rank()
        for p, owner in zip(self.params, self.owners):
            if owner != rank:
                continue
            if set_to_none:
>>>>>>> mistake
