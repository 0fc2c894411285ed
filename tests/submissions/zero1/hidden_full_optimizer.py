# why: keeps a second optimizer over all the parameters and steps that one, leaving self.optimizer (over the owned parameters) unused: the values and traffic are right, but every rank keeps the whole optimizer state: the grader's memory reading (outside the process) sees it, and the census of the optimizers alive on the rank too
# expect: {"zero1-test-values": 4, "zero1-test-state": 0, "zero1-test-traffic": 3}
# %% zero1-partition: solution
# %% zero1-optimizer: solution, edited
<<<<<<< solution
        self.optimizer = optimizer_class(mine, **kwargs) if mine else None
=======
        self.optimizer = optimizer_class(mine, **kwargs) if mine else None
        self.everything = optimizer_class(self.params, **kwargs)
>>>>>>> mistake
<<<<<<< solution
        if self.optimizer is not None:
            self.optimizer.step()
=======
        self.everything.step()
>>>>>>> mistake
