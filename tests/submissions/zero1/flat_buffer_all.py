# why: keeps a flat buffer of all the parameters' elements, allocated once and refilled every step before the broadcasts (a "communication buffer" that ZeRO-1 does not need): the values and traffic are right, but every rank holds a whole model's worth of extra memory, which the grader's memory reading (outside the process) sees
# expect: {"zero1-test-values": 4, "zero1-test-state": 0, "zero1-test-traffic": 3}
# %% zero1-partition: solution
# %% zero1-optimizer: solution, edited
<<<<<<< solution
        self.optimizer = optimizer_class(mine, **kwargs) if mine else None
=======
        self.optimizer = optimizer_class(mine, **kwargs) if mine else None
        self.flat = torch.zeros(sum(p.numel() for p in self.params))
>>>>>>> mistake
<<<<<<< solution
        with torch.no_grad():
            for p, owner in zip(self.params, self.owners):
                dist.broadcast(p, src=owner)
=======
        with torch.no_grad():
            views, start = [], 0
            for p in self.params:
                views.append(self.flat[start:start + p.numel()].view_as(p))
                start += p.numel()
            for p, v, owner in zip(self.params, views, self.owners):
                v.copy_(p)
                dist.broadcast(v, src=owner)
                p.copy_(v)
>>>>>>> mistake
