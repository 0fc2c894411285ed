"""Choosing a parallel strategy: memory per GPU, bytes per step and the pipeline bubble, by arithmetic.

A decoder-only transformer (:class:`Transformer`) of ``L`` layers, hidden size ``h``, MLP size
``f``, ``a`` attention heads (``a_kv`` key/value heads), vocabulary ``V``, trained on sequences of
``s`` tokens, is laid out on ``N = d * t * p`` GPUs (:class:`Strategy`): ``t``-way tensor
parallelism inside a layer, ``p`` pipeline stages of ``L / p`` layers, and ``d``-way data
parallelism (with ZeRO stage ``z``) over the rest.  :func:`plan` returns, per GPU of the busiest
stage (the first: it also holds the token embedding):

* **model state**: :func:`dlperf.memory.model_state_bytes` (mixed-precision Adam, ``16`` bytes per
  parameter, ZeRO over ``d``) of the ``P_gpu`` parameters it holds;
* **activations**: per layer and micro-batch of ``b`` sequences, Korthikanti et al. (2022),
  Table 2, in 16-bit: ``s b h (10 + 24/t + 5 a s / (h t))`` with tensor parallelism,
  ``s b h / t (34 + 5 a s / h)`` with sequence parallelism; selective recomputation drops the
  ``5 a s`` term, full recomputation keeps only the layer input ``2 s b h`` (``/ t`` with sequence
  parallelism); times ``L / p`` layers, times the micro-batches the first stage holds (``min(p, m)``
  for 1F1B, ``m`` for GPipe, 1 without a pipeline);
* **bytes sent per step** (ring collectives, bandwidth term only): tensor parallelism 4
  all-reduces of ``2 s b h`` bytes per layer and micro-batch (2 forward, 2 backward; 6 with full
  recomputation), each ``2 (t-1)/t`` of it; pipeline activations and gradients, ``2 s b h / t``
  each per micro-batch (Megatron's scatter/gather of the replicated activation), what an *inner*
  stage sends (the first stage sends only the activations, the last only the gradients); data
  parallelism :func:`data_parallel_bytes` of ``P_gpu``: the gradients reduced in
  ``Strategy.reduce_dtype`` (``"fp32"`` by default, as PyTorch's DDP does with float32 weights,
  as the memory chapter's FSDP run did, and as Megatron's distributed optimizer does with bf16
  parameters; ``"bf16"`` gives :func:`dlperf.memory.zero_communication_bytes`), the parameters
  gathered in 16-bit; gradients reduced in float32 are also *held* in float32 (4 bytes per
  parameter instead of 2: Megatron-Core's "bf16 parameters, fp32 gradients, 6 + 12/d");
* **time**: ``6 P`` FLOPs per token (``8 P`` with full recomputation; attention's ``s^2`` term
  is left out, Kaplan et al. 2020) at a given fraction of peak (MFU), stretched by the bubble
  ``(p-1)/(m+p-1)``; communication times are bytes over the link each kind uses (tensor
  parallelism inside a node, the others over the network) and are *not* added to ``step_s``: how
  much of them overlaps with compute depends on the implementation.  :attr:`Plan.data_exposed_s`
  is one bound on that: the gradients of a step are final only in the backward pass of its last
  micro-batch (the others accumulate, as under DDP's ``no_sync``), so only that backward pass
  (``4P`` of the ``6P`` FLOPs per token, ``6P`` of ``8P`` with full recomputation) can hide their
  reduction; ZeRO's parameter all-gather, after the optimizer step, is counted as not hidden.
  :attr:`Plan.context_exposed_s` is ring attention's messages beyond what the attention work of the
  same ring step hides (:func:`context_parallel_exposed_s`), :attr:`Plan.expert_exposed_s` the
  all-to-alls, none hidden (:func:`expert_parallel_exposed_s`), both alpha-beta on the link the
  layout puts them on and stretched by the bubble like the compute; :attr:`Plan.step_with_comm_s`
  adds all three to ``step_s``.  Tensor parallelism's all-reduces are left inside the utilisation.

The token embedding and the output projection are split over the ``t`` tensor-parallel ranks (a
vocabulary-parallel embedding and a vocabulary-parallel loss, as Megatron-LM does and as PyTorch's
``loss_parallel`` does for a ``ColwiseParallel`` output layer), not replicated.

**Context parallelism** (``cp``, ring attention, :mod:`dlperf.parallel.context`): each rank holds
``s / c`` tokens of every sequence, so activations and the tensor and pipeline messages shrink by
``c``; the K/V blocks travel the ring, :func:`context_parallel_bytes` per layer and micro-batch
(``c - 1`` blocks forward, ``2c - 1`` backward); the weights are replicated over the ``c`` ranks,
whose gradients join the data-parallel reduction (over ``d c`` ranks, as Megatron-Core does).
**HSDP** (``shard``): ZeRO inside groups of ``shard`` ranks, replicated across groups
(:func:`data_parallel_bytes`); the groups' collectives use the node's links when they fit in it.
**Expert parallelism** (``ep``, :mod:`dlperf.parallel.experts`): a mixture-of-experts model's
``E`` experts per layer are split over ``ep`` of the ``d c`` data x context ranks; each rank sends
:func:`expert_parallel_bytes` per MoE layer and micro-batch (dispatch and combine, and both again
backward, even routing assumed); the experts' optimizer state is sharded (ZeRO) over the
``d c / ep`` ranks that hold the same experts, their gradients reduced there; FLOPs count the
*active* parameters (``k`` of ``E`` experts per token); an MoE layer keeps the MLP's ``19 s b h``
of Korthikanti et al.'s ``34 s b h`` once per routed expert.  **Schedules**: ``"interleaved 1F1B"``
(``virtual`` chunks per rank; bubble ``(p-1)/(v m + p - 1)``, ``v`` times the pipeline messages,
rank 0 holding ``p + (p-1)/v`` micro-batches) and ``"ZB-H1"`` (bubble ``(p-1)/(3m + p - 1)`` with
the backward pass split into two equal halves, each as long as the forward pass; 1F1B's memory),
from :mod:`dlperf.parallel.schedules`.  :func:`recommend` picks the quickest layout that fits.

These are estimates with stated assumptions, not measurements; their parts are checked against
real tensors and real ranks in the memory and model-parallelism chapters.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..memory import MemoryBreakdown, model_state_bytes
from .costs import (REDUCE_BYTES, context_parallel_bytes, context_parallel_exposed_s, data_parallel_bytes,
                    expert_parallel_bytes, expert_parallel_exposed_s)

__all__ = [
    "A100_80GB",
    "LLAMA2_70B",
    "MIXTRAL_8X7B",
    "TABLE_HEADER",
    "Hardware",
    "Plan",
    "Strategy",
    "Transformer",
    "context_parallel_bytes",
    "context_parallel_exposed_s",
    "data_parallel_bytes",
    "expert_parallel_bytes",
    "expert_parallel_exposed_s",
    "layer_activation_bytes",
    "plan",
    "rank_state_bytes",
    "recommend",
    "table",
    "tensor_parallel_params",
    "zero_group",
]


@dataclass(frozen=True)
class Transformer:
    """A Llama-style decoder: gated MLP (three ``h x f`` matrices) or plain (two), grouped-query attention."""

    name: str
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    vocab: int
    seq_len: int
    gated_mlp: bool = True
    tied_embeddings: bool = False
    experts: int = 0           # a mixture of experts in every layer: E MLPs and a gate (0: one dense MLP)
    top_k: int = 1             # experts per token

    @property
    def mlp_params(self) -> int:
        """One MLP (one expert): three ``h x f`` matrices when gated, two otherwise."""
        return (3 if self.gated_mlp else 2) * self.hidden * self.ffn

    @property
    def expert_params(self) -> int:
        """Per layer, the weights expert parallelism splits: the ``E`` experts (0 for a dense model)."""
        return self.experts * self.mlp_params

    @property
    def layer_params(self) -> int:
        """``Q`` and ``O`` (``h^2`` each), ``K`` and ``V`` (``h * h a_kv / a`` each), the MLP (or ``E`` experts
        and the gate's ``E x h``), two norms."""
        h = self.hidden
        kv = h * self.kv_heads // self.heads
        attention = 2 * h * h + 2 * h * kv
        mlp = self.expert_params + self.experts * h if self.experts else self.mlp_params
        return attention + mlp + 2 * h

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        """All parameters: layers, input embedding, output projection (unless tied), final norm."""
        heads = 1 if self.tied_embeddings else 2
        return self.layers * self.layer_params + heads * self.embedding_params + self.hidden

    @property
    def active_params(self) -> int:
        """The parameters one token uses: all but the ``E - k`` experts it is not routed to."""
        idle = (self.experts - self.top_k) * self.mlp_params if self.experts else 0
        return self.params - self.layers * idle


#: Llama 2 70B as released (Touvron et al., "Llama 2: Open Foundation and Fine-Tuned Chat Models",
#: 2023, Table 1: 4k context, grouped-query attention; sizes from the released configuration).
LLAMA2_70B = Transformer("Llama 2 70B", layers=80, hidden=8192, ffn=28672, heads=64, kv_heads=8,
                         vocab=32000, seq_len=4096)


@dataclass(frozen=True)
class Hardware:
    """One GPU: peak 16-bit FLOP/s, memory bytes, bytes/s per direction inside a node and to the network, and
    the latency of one message on each link (the alpha of the alpha-beta model; by default the simulator's
    illustrative figures, :mod:`dlperf.cluster.topology`: 5 us inside a machine, 20 us between machines)."""

    name: str
    flops: float
    memory: float
    intra_node: float
    network: float
    gpus_per_node: int
    intra_latency: float = 5e-6
    network_latency: float = 2e-5


#: NVIDIA A100 80GB SXM (A100 datasheet, 2021): 312 TFLOP/s dense BF16, 80 GB, NVLink 600 GB/s in
#: both directions together (300 GB/s each way); 200 Gbit/s = 25 GB/s per GPU to the network, as on
#: the clusters Llama 2 was trained on (Touvron et al. 2023, section 2.2.1); 8 GPUs per node.  The
#: memory is NVIDIA's "80GB" read as 80e9 bytes; the board reports 81920 MiB (80 GiB, 85.9e9 bytes), so
#: the "fits" of a plan keeps about 7% in reserve for the CUDA context, workspaces and fragmentation.
#: Mixtral 8x7B (Jiang et al., "Mixtral of Experts", 2024, Table 1: 32 layers, dimension 4096, 32 heads,
#: 8 KV heads, hidden 14336, 8 experts, top 2, vocabulary 32000, context 32768).
MIXTRAL_8X7B = Transformer("Mixtral 8x7B", layers=32, hidden=4096, ffn=14336, heads=32, kv_heads=8,
                           vocab=32000, seq_len=32768, experts=8, top_k=2)

A100_80GB = Hardware("A100 80GB SXM", flops=312e12, memory=80e9, intra_node=300e9, network=25e9, gpus_per_node=8)


@dataclass(frozen=True)
class Strategy:
    """``dp * tp * pp`` GPUs; ZeRO stage over ``dp``; micro-batches of ``micro_batch`` sequences."""

    dp: int
    tp: int = 1
    pp: int = 1
    zero: int = 1
    micro_batch: int = 1
    sequence_parallel: bool = True
    recompute: str = "selective"
    schedule: str = "1F1B"
    reduce_dtype: str = "fp32"
    cp: int = 1                # context parallelism: the sequence split over cp ranks (ring attention)
    ep: int = 1                # expert parallelism: the experts split over ep of the dp x cp ranks
    virtual: int = 2           # chunks per rank of the "interleaved 1F1B" schedule
    shard: int = 0             # HSDP: ZeRO shards over groups of `shard` of the dp x cp ranks (0: over all)

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def label(self) -> str:
        parts = [f"DP {self.dp}" + (f" (ZeRO-{self.zero})" if self.zero else "")]
        if self.shard:
            parts = [f"DP {self.dp} (HSDP: ZeRO-{self.zero} in groups of {self.shard})"]
        if self.tp > 1:
            parts.append(f"TP {self.tp}" + (" + SP" if self.sequence_parallel else ""))
        if self.cp > 1:
            parts.append(f"CP {self.cp}")
        if self.ep > 1:
            parts.append(f"EP {self.ep}")
        if self.pp > 1:
            schedule = f"interleaved 1F1B, v={self.virtual}" if self.schedule == "interleaved 1F1B" else self.schedule
            parts.append(f"PP {self.pp} ({schedule})")
        return " x ".join(parts)


def layer_activation_bytes(seq_len: int, micro_batch: int, hidden: int, heads: int, *, tp: int = 1,
                           sequence_parallel: bool = False, recompute: str = "none") -> float:
    """Bytes one layer keeps for backward per micro-batch (Korthikanti et al. 2022, Table 2; 16-bit).

    ``t = 1`` gives :func:`dlperf.memory.gpt_layer_activation_bytes`.  Without sequence
    parallelism, the ``10 s b h`` of LayerNorms, dropouts and the block inputs are replicated on
    the ``t`` ranks; with it, everything is divided by ``t``.
    """
    s, b, h, a, t = float(seq_len), float(micro_batch), float(hidden), float(heads), float(tp)
    sbh = s * b * h
    attention = 5 * a * s / h
    if recompute == "full":
        return 2 * sbh / (t if sequence_parallel else 1)
    if recompute not in ("none", "selective"):
        raise ValueError(f"recompute is 'none', 'selective' or 'full', got {recompute!r}")
    core = 0.0 if recompute == "selective" else attention
    if sequence_parallel:
        return sbh / t * (34 + core)
    return sbh * (10 + 24 / t + core / t)


def zero_group(st: Strategy) -> int:
    """The ranks ZeRO shards the (dense) model state over: ``st.shard`` under HSDP, else all ``dp x cp``."""
    return st.shard or st.dp * st.cp


def tensor_parallel_params(split: float, replicated: float, tp: int) -> float:
    """Parameters one tensor-parallel rank holds: the ``split`` ones (column- and row-parallel weights,
    the column-parallel bias) divided over ``tp``, the ``replicated`` ones (norms, the row-parallel bias)
    whole."""
    return split / tp + replicated


def rank_state_bytes(params_gpu: float, st: Strategy, *, group: int | None = None,
                     precision: str = "mixed") -> MemoryBreakdown:
    """The model state one rank holds for ``params_gpu`` parameters under ``st``: Adam's
    (:func:`dlperf.memory.model_state_bytes`: ``"mixed"``, 16-bit weights with float32 master and
    moments; ``"fp32"``, float32 weights and moments), ZeRO-``st.zero`` over ``group`` ranks
    (:func:`zero_group` by default).  Under mixed precision the gradients are held as they are
    reduced, in ``st.reduce_dtype``; in fp32 they are 4 bytes anyway.  :func:`plan` uses this for
    every rank; the model-parallelism tests compare it with the tensors of ranks on a device mesh."""
    memory = model_state_bytes(params_gpu, optimizer="adam", precision=precision, stage=st.zero,
                               n=group or zero_group(st))
    if precision == "mixed":
        memory = replace(memory, grads=memory.grads * REDUCE_BYTES.get(st.reduce_dtype, 2) / 2)
    return memory


@dataclass
class Plan:
    """What :func:`plan` worked out, per GPU of the first pipeline stage and per training step."""

    strategy: Strategy
    gpus: int
    feasible: bool
    reason: str
    microbatches: int
    params_per_gpu: float
    memory: MemoryBreakdown
    bubble: float
    flops_per_gpu: float
    compute_s: float
    step_s: float
    sent_bytes: dict[str, float] = field(default_factory=dict)
    comm_s: dict[str, float] = field(default_factory=dict)
    hardware_memory: float = float("inf")
    data_exposed_s: float = 0.0
    context_exposed_s: float = 0.0
    expert_exposed_s: float = 0.0

    @property
    def step_with_data_s(self) -> float:
        """``step_s`` plus the data-parallel time the last micro-batch's backward cannot hide."""
        return self.step_s + self.data_exposed_s

    @property
    def step_with_comm_s(self) -> float:
        """The step with all the communication the planner counts as not hidden: data parallelism's,
        ring attention's and expert parallelism's (tensor parallelism's is inside the utilisation)."""
        return self.step_with_data_s + self.context_exposed_s + self.expert_exposed_s

    @property
    def fits(self) -> bool:
        """Feasible, and the estimated bytes per GPU fit in the GPU's memory."""
        return self.feasible and self.memory.total <= self.hardware_memory


def _bubble_and_held(st: Strategy, m: int) -> tuple[float, float]:
    """The schedule's idle share and the micro-batches' activations (in whole-stage units) the first stage holds."""
    from .schedules import interleaved_bubble_fraction

    p, v = st.pp, st.virtual
    if p == 1:
        return 0.0, 1.0
    if st.schedule == "GPipe":
        return (p - 1) / (m + p - 1), float(m)
    if st.schedule == "interleaved 1F1B":   # Narayanan et al. 2021; rank 0 holds up to 2(p-1) + (v-1)p + 1 chunks
        return interleaved_bubble_fraction(p, m, v), min(m * v, 2 * (p - 1) + (v - 1) * p + 1) / v
    if st.schedule == "ZB-H1":              # Qi et al. 2024 with T_F = T_B = T_W: (p-1) T_F idle of 3m T_F + ...
        return (p - 1) / (3 * m + p - 1), float(min(p, m))
    if st.schedule != "1F1B":
        raise ValueError(f"schedule is GPipe, 1F1B, interleaved 1F1B or ZB-H1, got {st.schedule!r}")
    return (p - 1) / (m + p - 1), float(min(p, m))


def plan(model: Transformer, strategy: Strategy, batch_sequences: int, hardware: Hardware = A100_80GB,
         mfu: float = 0.4) -> Plan:
    """Memory, traffic and time of one step of ``batch_sequences`` sequences (see the module docstring)."""
    st = strategy
    reasons = []
    if model.layers % (st.pp * (st.virtual if st.schedule == "interleaved 1F1B" else 1)):
        reasons.append(f"{model.layers} layers do not split into {st.pp} stages"
                       + (f" of {st.virtual} chunks" if st.schedule == "interleaved 1F1B" else ""))
    if model.heads % st.tp:
        reasons.append(f"{model.heads} heads do not split over {st.tp} ranks")
    if st.tp > model.kv_heads and st.tp % model.kv_heads:
        reasons.append(f"{model.kv_heads} KV heads cannot be replicated evenly over {st.tp} ranks")
    if st.cp > 1 and model.seq_len % (2 * st.cp):
        reasons.append(f"{model.seq_len} tokens do not split into the 2 x {st.cp} chunks of a zig-zag ring")
    if st.ep > 1 and (model.experts % st.ep or (st.dp * st.cp) % st.ep):
        reasons.append(f"{model.experts} experts over {st.ep} of the {st.dp * st.cp} data x context ranks "
                       "do not split evenly")
    if st.shard and ((st.dp * st.cp) % st.shard or not st.zero or st.ep > 1):
        reasons.append(f"HSDP needs ZeRO, groups of {st.shard} that divide the {st.dp * st.cp} data x context ranks, "
                       "and no expert parallelism (not modelled)")
        st = replace(st, shard=0)
    per_replica = batch_sequences / st.dp
    m = per_replica / st.micro_batch
    if per_replica < 1 or m != int(m):
        reasons.append(f"{batch_sequences} sequences do not split into {st.dp} replicas x micro-batches of {st.micro_batch}")
        m = max(1.0, m)
    m = int(m)
    if st.schedule == "interleaved 1F1B" and st.pp > 1 and m % st.pp:
        reasons.append(f"interleaved 1F1B needs micro-batches in multiples of {st.pp}, got {m}")
    if st.tp > hardware.gpus_per_node:
        reasons.append(f"tensor parallelism over {st.tp} GPUs leaves the {hardware.gpus_per_node}-GPU node")

    h, b, t, p, c = model.hidden, st.micro_batch, st.tp, st.pp, st.cp
    s = model.seq_len / c                                           # the tokens of a sequence on one rank
    layers_here = model.layers / p
    # K and V project to kv_heads heads (grouped-query attention): over more ranks than KV heads, each KV
    # head is replicated on t / kv_heads ranks (as Megatron does), so those weights split kv_heads ways only
    kv_weights = 2 * h * (h * model.kv_heads // model.heads)
    dense_layer = model.layer_params - model.expert_params
    sharded_layer = ((dense_layer - 2 * h - kv_weights) / t + kv_weights / min(t, model.kv_heads)
                     + 2 * h)                                       # norms are replicated
    dense_gpu = layers_here * sharded_layer + model.embedding_params / t + (h if p == 1 else 0)
    if p == 1 and not model.tied_embeddings:
        dense_gpu += model.embedding_params / t                     # both ends on the one stage
    expert_gpu = layers_here * model.expert_params / (t * st.ep)    # each rank: E / ep experts, split t ways
    params_gpu = dense_gpu + expert_gpu

    bubble, in_flight = _bubble_and_held(st, m)
    sp = st.sequence_parallel and t > 1
    layer_acts = layer_activation_bytes(s, b, h, model.heads, tp=t, sequence_parallel=sp, recompute=st.recompute)
    if model.experts and st.recompute != "full":    # the MLP's 19 sbh of Korthikanti's 34, once per routed expert
        layer_acts += (model.top_k - 1) * 19 * s * b * h / t
    acts = layers_here * in_flight * layer_acts
    # ZeRO shards the dense weights over the dp x cp ranks that hold them, the experts over dp x cp / ep
    experts_group = max(1, zero_group(st) // st.ep)                 # the ranks that hold the same experts
    memory = (rank_state_bytes(dense_gpu, st) + rank_state_bytes(expert_gpu, st, group=experts_group)
              + MemoryBreakdown(activations=acts))

    act_bytes = 2.0 * s * b * h                                     # one micro-batch's activation, 16-bit
    sent: dict[str, float] = {}
    if t > 1:
        per_layer = 6 if st.recompute == "full" else 4
        sent["tensor"] = per_layer * 2 * (t - 1) / t * act_bytes * layers_here * m
    if c > 1:
        kv_hidden = h * model.kv_heads / model.heads / min(t, model.kv_heads)
        ring = context_parallel_bytes(model.seq_len, c, kv_hidden, b, recompute=st.recompute)
        sent["context"] = (ring["forward"] + ring["backward"]) * layers_here * m
    if st.ep > 1 and model.experts:
        tokens = s * b / (t if sp else 1)                           # sequence parallelism: each rank its share
        a2a = expert_parallel_bytes(tokens, h, model.top_k, st.ep, recompute=st.recompute)
        sent["expert"] = sum(a2a.values()) * layers_here * m
    if p > 1:
        chunks = st.virtual if st.schedule == "interleaved 1F1B" else 1
        sent["pipeline"] = 2 * act_bytes / t * m * chunks
    grads_sent, params_sent = data_parallel_bytes(dense_gpu, st.dp * c, st.zero, reduce_dtype=st.reduce_dtype,
                                                  shard=st.shard)
    if expert_gpu:
        eg, ep_ = data_parallel_bytes(expert_gpu, max(1, st.dp * c // st.ep), st.zero, reduce_dtype=st.reduce_dtype,
                                      shard=st.shard)
        grads_sent, params_sent = grads_sent + eg, params_sent + ep_
    if st.dp * c > 1:
        sent["data"] = grads_sent + params_sent

    def link(ranks: int) -> float:                                  # inside the node when t x ranks fit in it
        return hardware.intra_node if t * ranks <= hardware.gpus_per_node else hardware.network

    def latency(ranks: int) -> float:
        return hardware.intra_latency if t * ranks <= hardware.gpus_per_node else hardware.network_latency

    links = {"tensor": hardware.intra_node, "pipeline": hardware.network, "data": hardware.network,
             "context": link(c), "expert": link(st.ep)}
    comm_s = {k: v / links[k] for k, v in sent.items()}
    net = hardware.network
    # HSDP: a group's reduce-scatter and all-gathers on the group's link, the all-reduce across groups on the network
    in_group = data_parallel_bytes(dense_gpu + expert_gpu, st.shard, st.zero,
                                   reduce_dtype=st.reduce_dtype)[0] if st.shard else grads_sent
    group_link = link(st.shard) if st.shard else net
    grads_s = in_group / group_link + (grads_sent - in_group) / net
    params_s = params_sent / group_link
    if "data" in comm_s:
        comm_s["data"] = grads_s + params_s

    tokens_step = batch_sequences * model.seq_len
    flops = (8 if st.recompute == "full" else 6) * model.active_params * tokens_step / st.gpus
    compute = flops / (hardware.flops * mfu)
    # the backward pass: 4P of the 6P FLOPs per token (6P of 8P with the forward recomputed)
    last_backward = compute / m * (6 / 8 if st.recompute == "full" else 4 / 6)
    exposed = max(0.0, grads_s - last_backward) + params_s if st.dp * c > 1 else 0.0
    # ring attention and the all-to-alls: per layer and micro-batch on every stage, so the bubble stretches them
    per_slot = layers_here * m / (1 - bubble)
    rate = hardware.flops * mfu
    context_exposed = expert_exposed = 0.0
    if c > 1:
        ring_s = context_parallel_exposed_s(model.seq_len, c, kv_hidden, h, b, tp=t, bandwidth=link(c),
                                            latency=latency(c), flop_rate=rate, recompute=st.recompute)
        context_exposed = sum(ring_s.values()) * per_slot
    if "expert" in sent:
        expert_exposed = expert_parallel_exposed_s(tokens, h, model.top_k, st.ep, bandwidth=link(st.ep),
                                                   latency=latency(st.ep), recompute=st.recompute) * per_slot
    return Plan(strategy, st.gpus, not reasons, "; ".join(reasons), m, params_gpu, memory, bubble, flops, compute,
                compute / (1 - bubble), sent, comm_s, hardware.memory, exposed, context_exposed, expert_exposed)


def recommend(plans: list[Plan]) -> tuple[Plan, str]:
    """The layout to use among ``plans``, and why: the quickest step (:attr:`Plan.step_with_comm_s`, with the
    data-parallel, ring-attention and all-to-all time not hidden) of those that are possible and fit
    (equal steps: the one whose traffic takes less time at link speed); if none fits, the one that needs
    the least memory."""
    fitting = sorted((pl for pl in plans if pl.fits),
                     key=lambda pl: (round(pl.step_with_comm_s, 6), sum(pl.comm_s.values())))
    GB = 1e9
    if not fitting:
        best = min((pl for pl in plans if pl.feasible), key=lambda pl: pl.memory.total)
        return best, (f"none fits; {_name(best.strategy)} needs the least memory, {best.memory.total / GB:.0f} GB "
                      f"of {best.hardware_memory / GB:.0f}")
    best = fitting[0]
    why = (f"{_name(best.strategy)}: fits ({best.memory.total / GB:.0f} GB of {best.hardware_memory / GB:.0f}), "
           f"bubble {best.bubble:.3f}, {best.step_with_comm_s:.2f} s per step, the quickest of the "
           f"{len(fitting)} layouts that fit")
    if len(fitting) > 1:
        runner = fitting[1]
        longer = 100 * (runner.step_with_comm_s / best.step_with_comm_s - 1)
        why += (f"; next, {_name(runner.strategy)}, " + (f"takes {longer:.1f}% longer" if longer >= 0.05 else
                "is as quick, but its traffic takes longer at link speed"))
    return best, why


TABLE_HEADER = ["layout", "GPUs", "micro-batches", "model state GB", "activations GB", "on the GPU", "bubble",
                "step time; bytes sent per GPU (time at link speed)",
                "step + communication not hidden (data, context, expert)"]


def _name(st: Strategy) -> str:
    """The layout's label with what it leaves out: recomputation other than selective, micro-batches of more."""
    name = st.label() + ("" if st.recompute == "selective" else f", {st.recompute} recompute")
    return name + (f", micro-batch {st.micro_batch}" if st.micro_batch > 1 else "")


def _with_comm(pl: Plan) -> str:
    """The last column: the step with what is not hidden, and its parts where there is more than one."""
    parts = {"data": pl.data_exposed_s, "context": pl.context_exposed_s, "expert": pl.expert_exposed_s}
    shown = [f"{k} {v:.2f}" for k, v in parts.items() if v > 0]
    return f"{pl.step_with_comm_s:.2f} s" + (f" ({', '.join(shown)})" if len(shown) > 1 else "")


def table(plans: list[Plan]) -> list[list[Any]]:
    """One row per plan, under :data:`TABLE_HEADER`: what the chapter's planner tables show."""
    GB, rows = 1e9, []
    for pl in plans:
        name = _name(pl.strategy)
        if not pl.feasible:
            rows.append([name, pl.gpus, "not possible: " + pl.reason, "", "", "", "", "", ""])
            continue
        comm = ", ".join(f"{k} {v / GB:.3g} GB ({pl.comm_s[k]:.2f} s)" for k, v in pl.sent_bytes.items())
        rows.append([name, pl.gpus, pl.microbatches, f"{pl.memory.model_state / GB:.1f}",
                     f"{pl.memory.activations / GB:.1f}",
                     ("fits" if pl.fits else "too large") + f" ({pl.memory.total / GB:.0f} GB)",
                     f"{pl.bubble:.3f}", f"{pl.step_s:.2f} s; {comm}", _with_comm(pl)])
    return rows
