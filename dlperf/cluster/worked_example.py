"""The worked parameter-server example of the source notes."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .closed_forms import naive_allreduce_time, parameter_server_time, ring_allreduce_time
from .machine import Cluster
from .programs import multi_ring_allreduce, naive_allreduce, parameter_server_allreduce
from .topology import dgx1_double_ring, pcie_switch


# --------------------------------------------------------------------------------------------
# The worked example of the source notes
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkedExample:
    """One strategy of the worked example: simulated time, closed form, the source's figure.

    ``cluster`` is the simulated run (its ``trace`` can be replayed by a widget).
    """

    name: str
    simulated_s: float
    formula_s: float
    stated_s: float
    cluster: Cluster
    assumptions: str


def parameter_server_example(nbytes: int = 160_000_000) -> dict[str, WorkedExample]:
    """The worked example of the source notes (d2l, "Parameter Servers"), simulated.

    160 MB (``1.6e8`` bytes, float32 meta tensors) of gradients:

    * ``"gpu0"`` -- 4 GPUs on a 16 GB/s PCIe switch, :func:`naive_allreduce` to
      GPU0: GPU0's port takes 3 x 160 MB in (30 ms) then 3 x 160 MB out (30 ms):
      **60 ms**;
    * ``"cpu"`` -- the same switch with the CPU on a fifth 16 GB/s port as the
      one server of :func:`parameter_server_allreduce`: the CPU's port takes
      4 x 160 MB each way: **80 ms**;
    * ``"sharded"`` -- every GPU is the server of a quarter (40 MB): each port
      carries 3 x 40 MB each way per phase, 7.5 ms, twice: **15 ms**;
    * ``"ring_nvlink"`` -- 8 V100s, :func:`dgx1_double_ring` with the source's
      18 GB/s per link, :func:`multi_ring_allreduce` splitting 2:1 over the
      double-bandwidth ring (36 GB/s) and the single ring (18 GB/s), i.e. one
      ring of 3 x 18 = 54 GB/s: ``2 (n-1)/n S / 54 GB/s`` = **5.19 ms**.  The
      source's "2 x 160 MB / (3 x 18 GB/s) = 6 ms" is this with
      ``(n-1)/n`` rounded to 1 (it says so: "(n-1)/n ~ 1"); ``stated_s`` keeps
      its 5.93 ms, which ``formula_s * n / (n-1)`` equals.

    Assumptions, as in the source: latency ``alpha = 0``; summing is free;
    every port is full duplex at the same speed in each direction; the switch
    is non-blocking ("full-bandwidth operation between all links").
    """
    S = nbytes
    grad = torch.empty(S // 4, dtype=torch.float32, device="meta")
    out: dict[str, WorkedExample] = {}

    c = Cluster(pcie_switch(4, beta=16e9, alpha=0.0))
    naive_allreduce(c, [grad] * 4)
    out["gpu0"] = WorkedExample(
        "aggregate on GPU0, then broadcast", c.time, naive_allreduce_time(4, S, 0.0, 16e9), 0.060, c,
        "3 x 10 ms into GPU0's port, 3 x 10 ms out of it; the switch port is the bottleneck; alpha = 0")

    c = Cluster(pcie_switch(4, beta=16e9, alpha=0.0, cpu=True))
    parameter_server_allreduce(c, [grad] * 4)
    out["cpu"] = WorkedExample(
        "aggregate on the CPU", c.time, parameter_server_time(4, 1, S, 0.0, 16e9), 0.080, c,
        "the CPU sits on a fifth 16 GB/s port of the switch (its x16 link); 4 x 10 ms in, 4 x 10 ms out; alpha = 0")

    c = Cluster(pcie_switch(4, beta=16e9, alpha=0.0))
    parameter_server_allreduce(c, [grad] * 4, servers=range(4))
    out["sharded"] = WorkedExample(
        "sharded over the 4 GPUs", c.time, parameter_server_time(4, 4, S, 0.0, 16e9, colocated=True), 0.015, c,
        "each GPU aggregates 40 MB: its port carries 3 x 40 MB each way (full duplex), 7.5 ms, twice; alpha = 0")

    n, link = 8, 18e9
    c = Cluster(dgx1_double_ring(link_beta=link, alpha=0.0))
    multi_ring_allreduce(c, [grad] * n)
    out["ring_nvlink"] = WorkedExample(
        "ring over 8 V100s with NVLink", c.time, ring_allreduce_time(n, S, 0.0, 3 * link), 2 * S / (3 * link), c,
        "two rings, 2 x 18 and 18 GB/s per direction, data split 2:1, alpha = 0; the source rounds (n-1)/n = 7/8 "
        "to 1, hence its 2 S / (3 x 18 GB/s) = 5.9 ms ('about 6 ms') against 5.2 ms here")
    return out
