# why: answers every pull at once (fully asynchronous whatever s): the copy is right, but a fast worker reads weights more than s clocks stale, and at s = 0 it reads before the clock is complete
# expect: {"ssp_server-test-values": 3, "ssp_server-test-bound": 0, "ssp_server-test-waits": 0, "ssp_server-test-sync": 0}
# %% ssp_server-rule: solution
# %% ssp_server-server
import torch


class SSPServer:
    def __init__(self, w, workers, staleness, lr):
        self.w = w.clone()
        self.workers = workers
        self.lr = lr

    def push(self, worker, grad):
        self.w -= self.lr * grad / self.workers
        return [(worker, self.w.clone())]
