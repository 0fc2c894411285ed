# why: all-reduces and averages the gradients a second time inside step(): the values do not change (they are averaged already) and the state is right, but every step sends the whole gradient once more
# expect: {"zero1-test-values": 4, "zero1-test-state": 3, "zero1-test-traffic": 0}
# %% zero1-partition: solution
# %% zero1-optimizer: solution, edited
<<<<<<< solution
        if self.optimizer is not None:
            self.optimizer.step()
=======
        for p in self.params:
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()
        if self.optimizer is not None:
            self.optimizer.step()
>>>>>>> mistake
