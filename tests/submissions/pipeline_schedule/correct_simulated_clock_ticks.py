# why: a correct alternative: builds 1F1B by simulating the pipeline tick by tick (a stage runs a ready backward first, else a ready forward while it holds fewer than p - s micro-batches), and GPipe with PyTorch's backward order 0..m-1; every property holds
# expect: {"pipeline_schedule-gpipe-test": 2, "pipeline_schedule-1f1b-test-valid": 3, "pipeline_schedule-1f1b-test-bubble": 2, "pipeline_schedule-1f1b-test-memory": 3}
# %% pipeline_schedule-gpipe
def gpipe(p, m):
    forwards = [("F", i) for i in range(m)]
    backwards = [("B", i) for i in range(m)]
    return [forwards + backwards for _ in range(p)]
# %% pipeline_schedule-1f1b
from collections import deque


def one_f_one_b(p, m):
    """Simulate unit-time ticks: what each stage may run once the previous tick's results have arrived."""
    orders = [[] for _ in range(p)]
    ready_f = [deque(range(m)) if s == 0 else deque() for s in range(p)]   # forwards whose input arrived
    ready_b = [deque() for _ in range(p)]                                   # backwards whose gradient arrived
    held = [0] * p
    while any(len(order) < 2 * m for order in orders):
        sent_f, sent_b = [], []
        for s in range(p):
            if ready_b[s]:
                i = ready_b[s].popleft()
                orders[s].append(("B", i))
                held[s] -= 1
                if s > 0:
                    sent_b.append((s - 1, i))
            elif ready_f[s] and held[s] < p - s:
                i = ready_f[s].popleft()
                orders[s].append(("F", i))
                held[s] += 1
                if s < p - 1:
                    sent_f.append((s + 1, i))
                else:
                    sent_b.append((s, i))       # the last stage's backward needs only its own forward
        for s, i in sent_f:
            ready_f[s].append(i)
        for s, i in sent_b:
            ready_b[s].append(i)
    return orders
