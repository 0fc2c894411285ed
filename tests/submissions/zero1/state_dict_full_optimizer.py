# why: the issue-25 attack with allowed constructs only: a full optimizer over all the parameters is rebuilt every step from a plain state_dict and dropped again, and the inner optimizer's .state is filled with the owned parameters' entries, so the census of live optimizers finds exactly the owned parameters and bytes; but every rank keeps the whole state, which the grader's memory reading (outside the process) sees: the score of its honest control full_state
# expect: {"zero1-test-values": 4, "zero1-test-state": 0, "zero1-test-traffic": 3}
# %% zero1-partition: solution
# %% zero1-optimizer: solution, edited
<<<<<<< solution
        self.optimizer = optimizer_class(mine, **kwargs) if mine else None
=======
        self.optimizer = optimizer_class(mine, **kwargs) if mine else None
        self.mine = mine
        self.make = lambda: optimizer_class(self.params, **kwargs)
        self.saved = None
>>>>>>> mistake
<<<<<<< solution
        if self.optimizer is not None:
            self.optimizer.step()
=======
        full = self.make()
        if self.saved is not None:
            full.load_state_dict(self.saved)
        full.step()
        self.saved = full.state_dict()
        if self.optimizer is not None:
            for p in self.mine:
                self.optimizer.state[p] = full.state[p]
        full = None
>>>>>>> mistake
