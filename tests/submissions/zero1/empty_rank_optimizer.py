# why: builds the inner optimizer even on a rank that owns no parameter: torch.optim raises "optimizer got an empty parameter list" on that rank (3 ranks, parameters of 8 and 1 elements: rank 1 owns nothing), the run stops there in every cell
# expect: {"zero1-test-values": 0, "zero1-test-state": 0, "zero1-test-traffic": 0}
# %% zero1-partition: solution
# %% zero1-optimizer: solution, edited
<<<<<<< solution
        self.optimizer = optimizer_class(mine, **kwargs) if mine else None
=======
        self.optimizer = optimizer_class(mine, **kwargs)
>>>>>>> mistake
<<<<<<< solution
        if self.optimizer is not None:
            self.optimizer.step()
=======
        self.optimizer.step()
>>>>>>> mistake
