# why: correct, written differently: the waiting pulls kept in a deque per clock, released clock by clock up to slowest + s; the update in place with add_(alpha=...)
# expect: {"ssp_server-test-values": 3, "ssp_server-test-bound": 3, "ssp_server-test-waits": 2, "ssp_server-test-sync": 2}
# %% ssp_server-rule: solution
# %% ssp_server-server
from collections import defaultdict, deque

import torch


class SSPServer:
    def __init__(self, w, workers, staleness, lr):
        self.weights = w.detach().clone()
        self.step = -lr / workers
        self.bound = staleness
        self.clock_of = [0] * workers
        self.queues = defaultdict(deque)        # clock -> the workers waiting to read it

    def push(self, worker, grad):
        self.weights.add_(grad, alpha=self.step)
        self.clock_of[worker] += 1
        self.queues[self.clock_of[worker]].append(worker)
        top = min(self.clock_of) + self.bound
        out = []
        for clock in sorted(c for c in self.queues if c <= top):
            queue = self.queues.pop(clock)
            while queue:
                out.append((queue.popleft(), self.weights.clone()))
        return out
