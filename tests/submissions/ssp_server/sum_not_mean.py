# why: adds lr times each gradient (the sum of the workers' gradients per clock, not their mean): every step is workers times too long, so s = 0 is not synchronous SGD with the mean gradient; the waiting is right
# expect: {"ssp_server-test-values": 0, "ssp_server-test-bound": 3, "ssp_server-test-waits": 2, "ssp_server-test-sync": 0}
# %% ssp_server-rule: solution
# %% ssp_server-server
import torch


class SSPServer:
    def __init__(self, w, workers, staleness, lr):
        self.w = w.clone()
        self.staleness, self.lr = staleness, lr
        self.clocks = [0] * workers
        self.waiting = []

    def push(self, worker, grad):
        self.w -= self.lr * grad
        self.clocks[worker] += 1
        self.waiting.append((worker, self.clocks[worker]))
        slowest = min(self.clocks)
        answers = [(k, self.w.clone()) for k, c in self.waiting if slowest >= c - self.staleness]
        self.waiting = [(k, c) for k, c in self.waiting if slowest < c - self.staleness]
        return answers
