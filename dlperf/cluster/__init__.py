"""A simulated cluster: ranks that hold tensors, links with an alpha-beta cost, exact accounting.

The multi-device chapters, their widgets and the graded exercises run
collectives on this simulator instead of real GPUs: it needs one CPU, it is
deterministic, and it counts exactly what a real cluster hides (who sent how
many bytes over which link, in how many steps).

The model
---------
* **Ranks.**  A :class:`Topology` has ``n`` ranks ``0 .. n-1`` (the devices) and
  possibly extra *nodes* named by strings (a PCIe switch, a network card, a
  network switch).  Rank ``r`` holds ordinary torch tensors (CPU tensors; a
  tensor on the ``meta`` device has a shape and a dtype but no storage, which
  lets the simulator cost a 160 MB transfer without allocating it; sums of
  meta tensors are skipped, only their sizes matter).  Collectives take one
  tensor per rank and return one per rank; ``cluster.memory[r]`` is a dict
  for what a rank keeps (memory accounting).  Dtypes are preserved;
  reductions happen in the tensors' own dtype, as NCCL does.
* **Links** are directed: ``connect(a, b)`` makes a full-duplex cable, one link
  each way.  Link ``l`` costs ``alpha_l`` seconds of latency and carries
  ``beta_l`` bytes per second.  A message follows the route with the fewest
  hops whose intermediate nodes are *not* ranks: ranks never forward other
  ranks' messages (on a ring, rank 0 cannot send to rank 2; rank 1 must
  receive and send again, and that is counted as two messages).
* **Steps.**  A step is a set of concurrent transfers (the ``with
  cluster.step():`` block).  The *load* of a link in a step is the number of
  bytes that all the step's transfers put on it.  A transfer of ``S`` bytes
  over route ``R`` costs::

      cost = sum(alpha_l for l in R) + max(load_l / beta_l for l in R)

  i.e. the alpha-beta model ``alpha + S / beta`` when nothing else shares its
  links, and the bandwidth of a shared link divided among the step's
  transfers otherwise (every transfer on a shared link is charged the time to
  drain the whole link; this is exact for equal transfers and pessimistic for
  the smaller ones of unequal transfers).
* **Clocks.**  Each rank has a clock.  A transfer starts when both its ends
  are free, at ``max(clock[src], clock[dst])`` (the clocks from before the
  step), and ends ``cost`` later.  After the step a rank's clock is the latest
  end among its transfers; ranks that took no part keep their clocks.  So a
  rank's clock advances by the cost of its slowest transfer of the step, and a
  rank that waits for data waits for the sender.  :attr:`Cluster.time` is the
  latest clock.
* **Accounting.**  Per rank: bytes and messages sent and received.  Per
  directed link: bytes and messages.  The number of (non-empty) steps.  A
  trace of :class:`Step` records (who sent how many bytes to whom, with a note
  saying which chunk), which :meth:`Cluster.replay` re-costs step by step for
  a widget, on the same or another topology.

Reference collectives run *on* the simulator, through the same primitives a
student uses, so their accounting is the simulator's: :func:`ring_allreduce`
(= :func:`ring_reduce_scatter` + :func:`ring_all_gather`),
:func:`multi_ring_allreduce` (several rings at once), :func:`naive_allreduce`
(reduce to a root, broadcast), :func:`tree_allreduce`,
:func:`parameter_server_allreduce` (sharded over ``k`` servers),
:func:`pipelined_broadcast` and :func:`pipelined_reduce`.  Each step is
labelled (``"reduce-scatter 2/3"``) and each message noted
(``"chunk 1, sum of 2 ranks"``), so ``cluster.trace`` -- or the ``on_step``
callback, called as each step completes -- runs a collective step by step.
Closed-form costs (:func:`ring_allreduce_time`, ...) and the bus-bandwidth
conversion (:func:`bus_bandwidth`) sit next to them, and
:func:`parameter_server_example` reproduces the worked example of the source
notes (60 / 80 / 15 ms, and the ring over 8 V100s).

Limits (said so that no chapter over-reads the numbers): computation is free
(a reduction of ``S`` bytes costs nothing); no memory-bandwidth, PCIe-root or
NIC-injection limits beyond the links modelled; no protocol overhead, no
packetisation and no overlap *between* steps (a step is a barrier for the
ranks it involves); contention is only between transfers of the same step.

Figures in the named topologies come from the sources cited in each factory's
docstring or are labelled illustrative there (all latencies are illustrative).

Example, the exercise's shape::

    from dlperf import cluster as C
    c = C.Cluster(C.ring(4))
    out = C.ring_allreduce(c, [torch.randn(12) for _ in range(4)])
    c.steps, c.bytes_sent, c.time        # 6, (72, 72, 72, 72), 6 * (alpha + 12 B / beta)

Student code uses the primitives::

    with c.step():                                  # concurrent sends
        for r in range(c.n):
            c.send(r, (r + 1) % c.n, chunks[r][i])
    got = c.recv(src=3, dst=0)                      # delivered when the step ended
"""


from __future__ import annotations

from .topology import (
    DGX1_RINGS, LinkSpec, Topology, dgx1_double_ring, fully_connected, multi_machine,
    parameter_server, pcie_switch, ring,
)
from .machine import Cluster, Message, Step, Transfer
from .programs import (
    multi_ring_allreduce, naive_allreduce, parameter_server_allreduce, pipelined_broadcast,
    pipelined_reduce, ring_all_gather, ring_allreduce, ring_reduce_scatter, tree_allreduce, _run,
)  # noqa: F401
from .closed_forms import (
    algorithm_bandwidth, bus_bandwidth, busbw_factor, naive_allreduce_time, parameter_server_time,
    pipelined_broadcast_time, place_zero_states, ring_all_gather_time, ring_allreduce_bytes_sent,
    ring_allreduce_time, ring_reduce_scatter_time, transfer_time, tree_allreduce_time,
)
from .worked_example import WorkedExample, parameter_server_example
from ..memory import zero_memory_bytes  # noqa: F401  (the formula lives in dlperf.memory)

__all__ = [
    "DGX1_RINGS",
    "Cluster",
    "LinkSpec",
    "Message",
    "Step",
    "Topology",
    "Transfer",
    "WorkedExample",
    "algorithm_bandwidth",
    "bus_bandwidth",
    "busbw_factor",
    "dgx1_double_ring",
    "fully_connected",
    "multi_machine",
    "multi_ring_allreduce",
    "naive_allreduce",
    "naive_allreduce_time",
    "parameter_server",
    "parameter_server_allreduce",
    "parameter_server_example",
    "parameter_server_time",
    "pcie_switch",
    "pipelined_broadcast",
    "pipelined_broadcast_time",
    "pipelined_reduce",
    "place_zero_states",
    "ring",
    "ring_all_gather",
    "ring_all_gather_time",
    "ring_allreduce",
    "ring_allreduce_bytes_sent",
    "ring_allreduce_time",
    "ring_reduce_scatter",
    "ring_reduce_scatter_time",
    "transfer_time",
    "tree_allreduce",
    "tree_allreduce_time",
]
