# why: zero_grad always fills the gradients with zeros and never frees them, whatever set_to_none says: the values are right, but zero_grad() (set_to_none=True, the default) must set every .grad to None, as specified
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
            if p.grad is not None:
                p.grad.zero_()
>>>>>>> mistake
