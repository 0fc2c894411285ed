# why: a correct alternative: each stage is an object that knows its warm-up and emits its operations, with private attributes on self and a dataclass; the reading allows a class's own attributes, and every property holds
# expect: {"pipeline_schedule-gpipe-test": 2, "pipeline_schedule-1f1b-test-valid": 3, "pipeline_schedule-1f1b-test-bubble": 2, "pipeline_schedule-1f1b-test-memory": 3}
# %% pipeline_schedule-gpipe: solution
# %% pipeline_schedule-1f1b
from dataclasses import dataclass, field


@dataclass
class Stage:
    index: int
    p: int
    m: int
    ops: list = field(default_factory=list)

    def __init__(self, index, p, m):
        self.index, self.p, self.m = index, p, m
        self.ops = []
        self._next_f = 0
        self._next_b = 0

    def forward(self):
        self.ops.append(("F", self._next_f))
        self._next_f += 1

    def backward(self):
        self.ops.append(("B", self._next_b))
        self._next_b += 1

    def build(self):
        for _ in range(min(self.p - self.index - 1, self.m)):
            self.forward()
        while self._next_f < self.m:
            self.forward()
            self.backward()
        while self._next_b < self.m:
            self.backward()
        return self.ops


def one_f_one_b(p, m):
    return [Stage(s, p, m).build() for s in range(p)]
