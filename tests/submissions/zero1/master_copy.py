# why: keeps a "master" copy of every parameter (not only the owned ones), updated after each broadcast: the values and traffic are right, but every rank holds a second copy of the whole model between steps, which the grader's memory reading (outside the process) sees
# expect: {"zero1-test-values": 4, "zero1-test-state": 0, "zero1-test-traffic": 3}
# %% zero1-partition: solution
# %% zero1-optimizer: solution, edited
<<<<<<< solution
        self.optimizer = optimizer_class(mine, **kwargs) if mine else None
=======
        self.optimizer = optimizer_class(mine, **kwargs) if mine else None
        self.master = [p.detach().clone() for p in self.params]
>>>>>>> mistake
<<<<<<< solution
            for p, owner in zip(self.params, self.owners):
                dist.broadcast(p, src=owner)
=======
            for p, owner, m in zip(self.params, self.owners, self.master):
                dist.broadcast(p, src=owner)
                m.copy_(p)
>>>>>>> mistake
