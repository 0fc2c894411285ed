# why: builds the inner optimizer over all the parameters and drops the gradients of the ones it does not own before stepping: torch.optim then creates state for the owned ones only (the bytes are right, the values and traffic too), but the optimizer holds every parameter, which the state check reads
# expect: {"zero1-test-values": 4, "zero1-test-state": 0, "zero1-test-traffic": 3}
# %% zero1-partition: solution
# %% zero1-optimizer: solution, edited
<<<<<<< solution
        mine = [p for p, owner in zip(self.params, self.owners) if owner == rank]
        self.optimizer = optimizer_class(mine, **kwargs) if mine else None
=======
        self.optimizer = optimizer_class(self.params, **kwargs)
>>>>>>> mistake
<<<<<<< solution
        if self.optimizer is not None:
            self.optimizer.step()
=======
        for p, owner in zip(self.params, self.owners):
            if owner != dist.get_rank():
                p.grad = None
        self.optimizer.step()
>>>>>>> mistake
