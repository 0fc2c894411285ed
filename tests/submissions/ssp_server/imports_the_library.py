# why: takes the rule from the chapter's library (dlperf.staleness.ssp_ready) instead of writing it: right values and waits, but the reading's allow-list refuses dlperf in every hidden cell
# expect: {"ssp_server-test-values": 0, "ssp_server-test-bound": 0, "ssp_server-test-waits": 0, "ssp_server-test-sync": 0}
# %% ssp_server-rule: solution
# %% ssp_server-server
import torch
from dlperf.staleness import ssp_ready


class SSPServer:
    def __init__(self, w, workers, staleness, lr):
        self.w = w.clone()
        self.workers, self.staleness, self.lr = workers, staleness, lr
        self.clocks = [0] * workers
        self.waiting = []

    def push(self, worker, grad):
        self.w -= self.lr * grad / self.workers
        self.clocks[worker] += 1
        self.waiting.append((worker, self.clocks[worker]))
        ready = [ssp_ready(c, min(self.clocks), self.staleness) for _, c in self.waiting]
        answers = [(k, self.w.clone()) for (k, _), r in zip(self.waiting, ready) if r]
        self.waiting = [p for p, r in zip(self.waiting, ready) if not r]
        return answers
