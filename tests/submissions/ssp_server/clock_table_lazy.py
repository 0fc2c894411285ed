# why: the clock table is filled as pushes arrive (a dict with no entry for a worker that has not pushed yet), so the slowest is taken over the workers heard from: a straggler that has not pushed is not waited for; no deadlock, values right, the bound broken
# expect: {"ssp_server-test-values": 3, "ssp_server-test-bound": 0, "ssp_server-test-waits": 0, "ssp_server-test-sync": 0}
# %% ssp_server-rule: solution
# %% ssp_server-server
import torch


class SSPServer:
    def __init__(self, w, workers, staleness, lr):
        self.w = w.clone()
        self.workers, self.staleness, self.lr = workers, staleness, lr
        self.clocks = {}
        self.waiting = []

    def push(self, worker, grad):
        self.w -= self.lr * grad / self.workers
        self.clocks[worker] = self.clocks.get(worker, 0) + 1
        self.waiting.append((worker, self.clocks[worker]))
        slowest = min(self.clocks.values())
        answers = [(k, self.w.clone()) for k, c in self.waiting if slowest >= c - self.staleness]
        self.waiting = [(k, c) for k, c in self.waiting if slowest < c - self.staleness]
        return answers
