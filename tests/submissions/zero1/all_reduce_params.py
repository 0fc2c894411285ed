# why: every rank updates every parameter, then all-reduces the parameters and divides by N instead of broadcasting from the owners: the values come out right, but every rank keeps the whole state and the step sends all-reduces, no broadcast
# expect: {"zero1-test-values": 4, "zero1-test-state": 0, "zero1-test-traffic": 0}
# %% zero1-partition: solution
# %% zero1-optimizer: solution, edited
<<<<<<< solution
        mine = [p for p, owner in zip(self.params, self.owners) if owner == rank]
        self.optimizer = optimizer_class(mine, **kwargs) if mine else None
=======
        self.optimizer = optimizer_class(self.params, **kwargs)
>>>>>>> mistake
<<<<<<< solution
            for p, owner in zip(self.params, self.owners):
                dist.broadcast(p, src=owner)
=======
            for p in self.params:
                dist.all_reduce(p)
                p /= dist.get_world_size()
>>>>>>> mistake
