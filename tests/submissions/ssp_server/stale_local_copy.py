# why: applies a push to the copy that worker last read (kept per worker), then makes that the server's copy: the gradients other workers pushed since are lost; the waiting is right
# expect: {"ssp_server-test-values": 0, "ssp_server-test-bound": 3, "ssp_server-test-waits": 2, "ssp_server-test-sync": 0}
# %% ssp_server-rule: solution
# %% ssp_server-server
import torch


class SSPServer:
    def __init__(self, w, workers, staleness, lr):
        self.w = w.clone()
        self.workers, self.staleness, self.lr = workers, staleness, lr
        self.clocks = [0] * workers
        self.read = [w.clone() for _ in range(workers)]    # what each worker computed on
        self.waiting = []

    def push(self, worker, grad):
        self.w = self.read[worker] - self.lr * grad / self.workers
        self.clocks[worker] += 1
        self.waiting.append((worker, self.clocks[worker]))
        slowest = min(self.clocks)
        answers, still = [], []
        for k, c in self.waiting:
            if slowest >= c - self.staleness:
                self.read[k] = self.w.clone()
                answers.append((k, self.read[k]))
            else:
                still.append((k, c))
        self.waiting = still
        return answers
