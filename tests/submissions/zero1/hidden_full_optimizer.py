# why: keeps a second optimizer over all the parameters and steps that one, leaving self.optimizer (over the owned parameters) unused: the values and traffic are right, but the probe counts every optimizer alive on the rank, and they hold every parameter
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
