# why: correct, written differently: the rule as the newest clock anyone may read (min + s), one pass; the server keeps w0 and the running sum of the gradients and answers w0 - lr / workers * sum, its waiting pulls in a dict by worker
# expect: {"ssp_server-test-values": 3, "ssp_server-test-bound": 3, "ssp_server-test-waits": 2, "ssp_server-test-sync": 2}
# %% ssp_server-rule
def split_ready(waiting, clocks, staleness):
    limit = min(clocks) + staleness             # the newest clock anyone may read now
    ready, still = [], []
    for pull in waiting:
        (ready if pull[1] <= limit else still).append(pull)
    return ready, still
# %% ssp_server-server
import torch


class SSPServer:
    def __init__(self, w, workers, staleness, lr):
        self.start = w.clone()
        self.total = torch.zeros_like(w)
        self.n = workers
        self.s = staleness
        self.lr = lr
        self.pushed = [0] * workers
        self.asked = {}                          # worker -> the clock it wants to read

    def current(self):
        return self.start - (self.lr / self.n) * self.total

    def push(self, worker, grad):
        self.total += grad
        self.pushed[worker] += 1
        self.asked[worker] = self.pushed[worker]
        ready, still = split_ready(sorted(self.asked.items()), self.pushed, self.s)
        self.asked = dict(still)
        return [(k, self.current()) for k, _ in ready]
