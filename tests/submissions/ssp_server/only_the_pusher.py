# why: after a push checks only the pusher's own pull, never the pulls already waiting: a worker held back by the bound is never released, and the run stops once every other worker waits too
# expect: {"ssp_server-test-values": 0, "ssp_server-test-bound": 0, "ssp_server-test-waits": 0, "ssp_server-test-sync": 0}
# %% ssp_server-rule: solution
# %% ssp_server-server
import torch


class SSPServer:
    def __init__(self, w, workers, staleness, lr):
        self.w = w.clone()
        self.workers, self.staleness, self.lr = workers, staleness, lr
        self.clocks = [0] * workers

    def push(self, worker, grad):
        self.w -= self.lr * grad / self.workers
        self.clocks[worker] += 1
        if min(self.clocks) >= self.clocks[worker] - self.staleness:
            return [(worker, self.w.clone())]
        return []
