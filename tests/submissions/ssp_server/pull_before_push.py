# why: answers the pulls the push allows before applying the push's gradient: the pusher reads weights without its own last gradient (and at s = 0 every worker reads the clock without the last worker's), one update behind; the waiting is right
# expect: {"ssp_server-test-values": 0, "ssp_server-test-bound": 3, "ssp_server-test-waits": 2, "ssp_server-test-sync": 0}
# %% ssp_server-rule: solution
# %% ssp_server-server
import torch


class SSPServer:
    def __init__(self, w, workers, staleness, lr):
        self.w = w.clone()
        self.workers, self.staleness, self.lr = workers, staleness, lr
        self.clocks = [0] * workers
        self.waiting = []

    def push(self, worker, grad):
        self.clocks[worker] += 1
        self.waiting.append((worker, self.clocks[worker]))
        slowest = min(self.clocks)
        answers = [(k, self.w.clone()) for k, c in self.waiting if slowest >= c - self.staleness]
        self.waiting = [(k, c) for k, c in self.waiting if slowest < c - self.staleness]
        self.w -= self.lr * grad / self.workers
        return answers
