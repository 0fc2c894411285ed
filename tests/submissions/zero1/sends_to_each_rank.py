# why: the owner sends its updated parameters to each other rank with dist.send / dist.recv instead of a broadcast: the values are right, but the relay sees point-to-point messages and no broadcast (traffic), no rank broadcasts its shard as a root, and the reading refuses point-to-point calls (state)
# expect: {"zero1-test-values": 4, "zero1-test-state": 0, "zero1-test-traffic": 0}
# %% zero1-partition: solution
# %% zero1-optimizer: solution, edited
<<<<<<< solution
        with torch.no_grad():
            for p, owner in zip(self.params, self.owners):
                dist.broadcast(p, src=owner)
=======
        rank, world = dist.get_rank(), dist.get_world_size()
        with torch.no_grad():
            for p, owner in zip(self.params, self.owners):
                if owner == rank:
                    for other in range(world):
                        if other != rank:
                            dist.send(p, dst=other)
                else:
                    dist.recv(p, src=owner)
>>>>>>> mistake
