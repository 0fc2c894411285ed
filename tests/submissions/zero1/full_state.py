# why: every rank builds the inner optimizer over all the parameters and updates them all (then broadcasts from the owners): the values and the traffic are right, but every rank keeps the whole optimizer state, which is what ZeRO removes (the memory read from outside the ranks, and the census)
# expect: {"zero1-test-values": 4, "zero1-test-state": 0, "zero1-test-traffic": 3}
# %% zero1-partition: solution
# %% zero1-optimizer: solution, edited
<<<<<<< solution
        mine = [p for p, owner in zip(self.params, self.owners) if owner == rank]
        self.optimizer = optimizer_class(mine, **kwargs) if mine else None
=======
        self.optimizer = optimizer_class(self.params, **kwargs)
>>>>>>> mistake
