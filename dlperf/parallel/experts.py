"""Expert parallelism by hand: a mixture-of-experts layer whose experts live on different ranks.

**The layer** (:class:`MoE`).  ``E`` experts, each a small MLP ``d -> ffn -> d``, and a gate
``W_g`` (``E x d``, no bias).  For a token ``x`` the gate's probabilities are
``p = softmax(W_g x)``; the token goes to its ``k`` most probable experts with weights ``p_e``
(renormalised over the ``k`` chosen when ``k > 1``, as Mixtral does; Switch's ``k = 1`` keeps
``p_e``), and the layer's output is ``sum_e w_e expert_e(x)`` (Shazeer et al., "Outrageously Large
Neural Networks: The Sparsely-Gated Mixture-of-Experts Layer", 2017; Fedus, Zoph & Shazeer,
"Switch Transformers", 2021; Jiang et al., "Mixtral of Experts", 2024).

**Capacity.**  So that every expert's batch has a fixed size, an expert accepts at most
``C = ceil(capacity_factor * T * k / E)`` of the ``T * k`` assignments of a group of ``T`` tokens
(GShard, Lepikhin et al. 2020; Switch).  Assignments beyond ``C`` are *dropped*: that expert's term
is missing from the token's output (in a transformer the residual connection carries the token on
unchanged).  Priority: every token's first choice before any second choice, and in token order
within a choice (GShard's rule).  A group is the tokens of one rank: capacity is decided locally,
without communication, and the one-process reference applies the same rule per group.

**Expert parallelism** (:func:`ep_forward`).  ``R`` ranks hold ``E / R`` experts each; rank ``r``
holds experts ``r E/R .. (r+1) E/R - 1``.  Every rank routes its own tokens, then

1. exchanges how many assignments it sends to each expert (an all-to-all of ``E`` integers);
2. **dispatch**: sends each kept assignment's token vector to the rank of its expert
   (``dist.all_to_all_single`` with per-rank split sizes);
3. runs each local expert once, on everything it received from every rank;
4. **combine**: sends the results back the same way (the split sizes swapped), and adds them,
   weighted, into its tokens' outputs.

**Traffic.**  Rank ``r`` sends in the dispatch ``d * b * sum_{e not on r} kept[r, e]`` bytes
(``b`` bytes per element; vectors for its own experts stay home) and in the combine
``d * b * sum_{s != r} sum_{e on r} kept[s, e]``; with perfectly even routing and no drops both are
``k T d b (R - 1) / R``.  The all-to-all's bytes are decided by the router, not by the layout:
an expert that attracts many tokens makes its rank receive (and compute) more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F

from .tensor import Traffic

__all__ = [
    "AllToAll",
    "MoE",
    "Routing",
    "capacity",
    "chapter_worker",
    "ep_bytes",
    "ep_forward",
    "grads_of",
    "load_balancing_loss",
    "moe_inputs",
    "route",
]


def capacity(tokens: int, experts: int, k: int, factor: float) -> int:
    """Assignments one expert accepts from a group of ``tokens`` tokens: ``ceil(factor T k / E)``."""
    return math.ceil(factor * tokens * k / experts)


@dataclass
class Routing:
    """The router's decisions for one group of ``T`` tokens (all tensors ``T x k``)."""

    expert: torch.Tensor     # the chosen experts, best first
    weight: torch.Tensor     # their weights in the output
    slot: torch.Tensor       # the assignment's place in its expert's queue (0-based)
    kept: torch.Tensor       # slot < capacity
    capacity: int
    experts: int

    def routed(self) -> torch.Tensor:
        """Assignments per expert before the capacity cut (``E``)."""
        return torch.bincount(self.expert.flatten(), minlength=self.experts)

    def accepted(self) -> torch.Tensor:
        """Assignments per expert after it (``E``)."""
        return torch.bincount(self.expert[self.kept], minlength=self.experts)


def route(logits: torch.Tensor, k: int, capacity_factor: float) -> Routing:
    """Top-``k`` softmax routing of ``T`` tokens (``logits``: ``T x E``) with GShard's capacity rule."""
    tokens, experts = logits.shape
    probs = torch.softmax(logits.float(), dim=-1)
    weight, expert = probs.topk(k, dim=-1)
    if k > 1:
        weight = weight / weight.sum(dim=-1, keepdim=True)
    by_priority = expert.t().reshape(-1)                     # choice 0 of every token, then choice 1 ...
    onehot = F.one_hot(by_priority, experts)
    slot = (onehot.cumsum(dim=0) - 1).gather(1, by_priority[:, None]).reshape(k, tokens).t()
    cap = capacity(tokens, experts, k, capacity_factor)
    return Routing(expert, weight, slot, slot < cap, cap, experts)


def load_balancing_loss(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Switch's auxiliary loss ``E * sum_e f_e P_e`` for ``T`` tokens' gate ``logits`` (``T x E``).

    ``f_e``: the fraction of the ``T k`` assignments that go to expert ``e`` (top-``k``, before
    the capacity cut; not differentiable), ``P_e``: the mean gate probability of ``e`` (which
    carries the gradient).  It is 1 when both are uniform, and grows as routing concentrates on
    a few experts (Fedus, Zoph & Shazeer 2021, eq. 4, without the weight ``alpha``)."""
    tokens, experts = logits.shape
    probs = torch.softmax(logits.float(), dim=-1)
    chosen = probs.topk(k, dim=-1).indices
    f = torch.bincount(chosen.flatten(), minlength=experts).float() / (tokens * k)
    return experts * (f * probs.mean(dim=0)).sum()


class MoE(nn.Module):
    """A mixture-of-experts layer on one process: the reference of :func:`ep_forward`."""

    def __init__(self, d: int, ffn: int, experts: int, k: int = 2, capacity_factor: float = 1.25,
                 seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.k, self.capacity_factor = k, capacity_factor
        self.gate = nn.Linear(d, experts, bias=False)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(d, ffn), nn.GELU(), nn.Linear(ffn, d))
                                     for _ in range(experts))

    def route(self, x: torch.Tensor) -> Routing:
        return route(self.gate(x), self.k, self.capacity_factor)

    def forward(self, x: torch.Tensor, groups: int = 1) -> torch.Tensor:
        """``x``: ``T x d``, cut into ``groups`` equal groups, each routed with its own capacity."""
        outs = []
        for xg in x.chunk(groups):
            r = self.route(xg)
            y = torch.zeros_like(xg)
            for e, expert in enumerate(self.experts):
                tok, choice = torch.nonzero((r.expert == e) & r.kept, as_tuple=True)
                if len(tok):
                    y = y.index_add(0, tok, r.weight[tok, choice, None] * expert(xg[tok]))
            outs.append(y)
        return torch.cat(outs)


def moe_inputs(tokens: int, d: int, seed: int = 0, skew: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens ``T x d`` sharing a common direction of size ``skew`` (hidden states are not
    isotropic; this is what makes a gate prefer some experts) and an upstream gradient ``G``."""
    g = torch.Generator().manual_seed(30_011 + seed)
    common = torch.randn(d, generator=g)
    x = torch.randn(tokens, d, generator=g) + skew * common
    return x, torch.randn(tokens, d, generator=g)


def ep_bytes(routings: list[Routing], d: int, element_size: int = 4) -> list[dict[str, int]]:
    """Bytes each rank sends in the dispatch and the combine, from the routing decisions alone."""
    world = len(routings)
    per_rank = routings[0].experts // world
    kept = torch.stack([r.accepted() for r in routings])          # R x E: kept[s, e]
    owner = torch.arange(routings[0].experts) // per_rank
    out = []
    for r in range(world):
        dispatch = int(kept[r, owner != r].sum())
        combine = int(kept[torch.arange(world) != r][:, owner == r].sum())
        out.append({"dispatch": dispatch * d * element_size, "combine": combine * d * element_size})
    return out


# --------------------------------------------------------------------------------------------
# The all-to-all, both ways
# --------------------------------------------------------------------------------------------


class AllToAll(torch.autograd.Function):
    """``dist.all_to_all_single`` of rows with split sizes; its backward is the reverse all-to-all
    (the gradient of a row goes back to the rank it came from)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, send: list[int], recv: list[int], group: Any) -> torch.Tensor:
        ctx.send, ctx.recv, ctx.group = send, recv, group
        out = x.new_empty((sum(recv), *x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), recv, send, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        out = grad.new_empty((sum(ctx.send), *grad.shape[1:]))
        dist.all_to_all_single(out, grad.contiguous(), ctx.send, ctx.recv, group=ctx.group)
        return out, None, None, None


def _all_to_all(x: torch.Tensor, send: list[int], recv: list[int], traffic: Traffic | None, phase: str,
                group: Any) -> torch.Tensor:
    """Rows ``x`` to the ranks (``send[s]`` rows to rank ``s``); the rows sent to *other* ranks are
    counted as ``"all-to-all"`` elements of the forward pass."""
    rank = dist.get_rank(group)
    if traffic is not None:
        traffic.calls.append(_call(phase, (sum(send) - send[rank]) * x.shape[1], x.element_size()))
    return AllToAll.apply(x, send, recv, group)


def _call(phase: str, elements: int, element_size: int):
    from .tensor import Call

    return Call("all-to-all", phase, elements, element_size)


def ep_forward(moe: MoE, x: torch.Tensor, traffic: Traffic | None = None, group: Any = None) -> dict[str, Any]:
    """This rank's output of ``moe`` for its tokens ``x``, with the experts spread over the group.

    Only experts ``r E/R .. (r+1) E/R - 1`` of ``moe`` are used on rank ``r``.  Returns the output
    (differentiable), the routing, and the rows each local expert computed."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    n_experts = len(moe.experts)
    per_rank = n_experts // world
    r = moe.route(x)
    tok, choice = torch.nonzero(r.kept, as_tuple=True)
    expert = r.expert[tok, choice]
    order = torch.argsort(expert, stable=True)      # grouped by expert, hence by rank
    tok, choice, expert = tok[order], choice[order], expert[order]
    per_expert = torch.bincount(expert, minlength=n_experts)

    # 1. how many rows each rank sends to each of this rank's experts
    counts = torch.empty_like(per_expert)
    if traffic is not None:
        traffic.calls.append(_call("counts", (world - 1) * per_rank, 8))
    dist.all_to_all_single(counts, per_expert, group=group)
    counts = counts.reshape(world, per_rank)        # [source rank, local expert]
    send = per_expert.reshape(world, per_rank).sum(dim=1).tolist()
    recv = counts.sum(dim=1).tolist()

    # 2. dispatch: each kept assignment's token vector to its expert's rank
    received = _all_to_all(x[tok], send, recv, traffic, "dispatch", group)
    local = torch.arange(per_rank).repeat(world).repeat_interleave(counts.flatten())
    done = torch.zeros_like(received)
    for j in range(per_rank):                       # 3. each local expert, once
        rows = torch.nonzero(local == j).flatten()
        if len(rows):
            expert_j = moe.experts[rank * per_rank + j]
            done = done.index_copy(0, rows, expert_j(received[rows]))
    # 4. combine: the results back to the tokens' ranks, weighted by the gate
    back = _all_to_all(done, recv, send, traffic, "combine", group)
    y = torch.zeros_like(x).index_add(0, tok, r.weight[tok, choice, None] * back)
    return {"output": y, "routing": r, "rows": counts.sum(dim=0).tolist()}


# --------------------------------------------------------------------------------------------
# Worker (run inside a process group: dlperf.launch.launch("dlperf.parallel.experts:...", R))
# --------------------------------------------------------------------------------------------


def grads_of(module: nn.Module) -> dict[str, torch.Tensor]:
    """Parameter gradients by name, zero for a parameter no token reached (``grad is None``)."""
    return {n: p.grad.clone() if p.grad is not None else torch.zeros_like(p.detach())
            for n, p in module.named_parameters()}


def chapter_worker(tokens: int, d: int, ffn: int, experts: int, k: int = 2,
                   factors: tuple[float, ...] = (1.0, 2.0), seed: int = 0) -> dict[str, Any]:
    """One rank of the expert-parallel layer, for each capacity factor: its output for its
    tokens, the gradients of its experts and of the gate (all-reduced over the ranks) under the
    loss ``sum(Y * G)``, its traffic record and the rows its experts computed.  A wrong variant
    (``"no_weight"``: the combine forgets the gate's weights) runs once, at the first factor."""
    rank, world = dist.get_rank(), dist.get_world_size()
    x_all, g_all = moe_inputs(tokens * world, d, seed)
    x, g = x_all.chunk(world)[rank], g_all.chunk(world)[rank]
    per_rank = experts // world
    res: dict[str, Any] = {"rank": rank, "world": world}
    for factor in factors:
        moe = MoE(d, ffn, experts, k, factor, seed)
        traffic = Traffic()
        out = ep_forward(moe, x, traffic)
        (out["output"] * g).sum().backward()
        gate = moe.gate.weight.grad.clone()
        dist.all_reduce(gate)                                   # every rank routed its own tokens
        mine = range(rank * per_rank, (rank + 1) * per_rank)
        res[factor] = {
            "output": out["output"].detach(), "rows": out["rows"], "traffic": list(traffic.calls),
            "routed": out["routing"].routed(), "accepted": out["routing"].accepted(),
            "capacity": out["routing"].capacity, "gate_grad": gate,
            "expert_grads": {e: grads_of(moe.experts[e]) for e in mine},
        }
    moe = MoE(d, ffn, experts, k, factors[0], seed)
    with torch.no_grad():
        r = moe.route(x)
        r.weight.fill_(1.0)
        moe.route = lambda _x, r=r: r                           # WRONG: weights of 1 in the combine
        res["no_weight"] = ep_forward(moe, x)["output"]
    return res
