# why: keeps the gradients of every step in a list "for debugging": the values and traffic are right, but each rank's memory grows by a whole model's gradients every step, which the grader's memory reading (outside the process) sees
# expect: {"zero1-test-values": 4, "zero1-test-state": 0, "zero1-test-traffic": 3}
# %% zero1-partition: solution
# %% zero1-optimizer: solution, edited
<<<<<<< solution
        self.optimizer = optimizer_class(mine, **kwargs) if mine else None
=======
        self.optimizer = optimizer_class(mine, **kwargs) if mine else None
        self.history = []
>>>>>>> mistake
<<<<<<< solution
        if self.optimizer is not None:
            self.optimizer.step()
=======
        self.history.append([p.grad.detach().clone() for p in self.params])
        if self.optimizer is not None:
            self.optimizer.step()
>>>>>>> mistake
