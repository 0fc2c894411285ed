# why: zero_grad always sets the gradients to None, whatever set_to_none says: the values do not change (backward makes new gradients), but zero_grad(set_to_none=False) must leave tensors of zeros, as torch.optim's does; the training loop calls it in the second step
# expect: {"zero1-test-values": 0, "zero1-test-state": 3, "zero1-test-traffic": 3}
# %% zero1-partition: solution
# %% zero1-optimizer: solution, edited
<<<<<<< solution
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()
=======
        for p in self.params:
            p.grad = None
>>>>>>> mistake
