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

These are estimates with stated assumptions, not measurements; their parts are checked against
real tensors and real ranks in the memory and model-parallelism chapters.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..memory import MemoryBreakdown, model_state_bytes

__all__ = [
    "A100_80GB",
    "LLAMA2_70B",
    "Hardware",
    "Plan",
    "Strategy",
    "Transformer",
    "data_parallel_bytes",
    "layer_activation_bytes",
    "plan",
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

    @property
    def layer_params(self) -> int:
        """``Q`` and ``O`` (``h^2`` each), ``K`` and ``V`` (``h * h a_kv / a`` each), the MLP, two norms."""
        h = self.hidden
        kv = h * self.kv_heads // self.heads
        attention = 2 * h * h + 2 * h * kv
        mlp = (3 if self.gated_mlp else 2) * h * self.ffn
        return attention + mlp + 2 * h

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        """All parameters: layers, input embedding, output projection (unless tied), final norm."""
        heads = 1 if self.tied_embeddings else 2
        return self.layers * self.layer_params + heads * self.embedding_params + self.hidden


#: Llama 2 70B as released (Touvron et al., "Llama 2: Open Foundation and Fine-Tuned Chat Models",
#: 2023, Table 1: 4k context, grouped-query attention; sizes from the released configuration).
LLAMA2_70B = Transformer("Llama 2 70B", layers=80, hidden=8192, ffn=28672, heads=64, kv_heads=8,
                         vocab=32000, seq_len=4096)


@dataclass(frozen=True)
class Hardware:
    """One GPU: peak 16-bit FLOP/s, memory bytes, bytes/s per direction inside a node and to the network."""

    name: str
    flops: float
    memory: float
    intra_node: float
    network: float
    gpus_per_node: int


#: NVIDIA A100 80GB SXM (A100 datasheet, 2021): 312 TFLOP/s dense BF16, 80 GB, NVLink 600 GB/s in
#: both directions together (300 GB/s each way); 200 Gbit/s = 25 GB/s per GPU to the network, as on
#: the clusters Llama 2 was trained on (Touvron et al. 2023, section 2.2.1); 8 GPUs per node.  The
#: memory is NVIDIA's "80GB" read as 80e9 bytes; the board reports 81920 MiB (80 GiB, 85.9e9 bytes), so
#: the "fits" of a plan keeps about 7% in reserve for the CUDA context, workspaces and fragmentation.
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

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp

    def label(self) -> str:
        parts = [f"DP {self.dp}" + (f" (ZeRO-{self.zero})" if self.zero else "")]
        if self.tp > 1:
            parts.append(f"TP {self.tp}" + (" + SP" if self.sequence_parallel else ""))
        if self.pp > 1:
            parts.append(f"PP {self.pp} ({self.schedule})")
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


REDUCE_BYTES = {"fp32": 4, "bf16": 2}


def data_parallel_bytes(params: float, dp: int, zero: int, *,
                        reduce_dtype: str = "fp32") -> tuple[float, float]:
    """Bytes one rank sends per step for data parallelism, ``(gradients, parameters)``; rings.

    Gradients of ``r`` bytes (``reduce_dtype``): an all-reduce, ``2 (d-1)/d r P``, without ZeRO;
    a reduce-scatter, ``(d-1)/d r P``, with it.  16-bit parameters: none without ZeRO (every
    replica updates its own copy); an all-gather after the step, ``(d-1)/d 2 P``, with ZeRO-1/2;
    two (before the forward and the backward), ``2 (d-1)/d 2 P``, with ZeRO-3.  With
    ``reduce_dtype="bf16"`` the sum is :func:`dlperf.memory.zero_communication_bytes`.
    """
    if reduce_dtype not in REDUCE_BYTES:
        raise ValueError(f"reduce_dtype is one of {sorted(REDUCE_BYTES)}, got {reduce_dtype!r}")
    share, r, P = (dp - 1) / dp, REDUCE_BYTES[reduce_dtype], float(params)
    if zero == 0:
        return 2 * share * r * P, 0.0
    return share * r * P, (2 if zero == 3 else 1) * share * 2 * P


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

    @property
    def step_with_data_s(self) -> float:
        """``step_s`` plus the data-parallel time the last micro-batch's backward cannot hide."""
        return self.step_s + self.data_exposed_s

    @property
    def fits(self) -> bool:
        """Feasible, and the estimated bytes per GPU fit in the GPU's memory."""
        return self.feasible and self.memory.total <= self.hardware_memory


def plan(model: Transformer, strategy: Strategy, batch_sequences: int, hardware: Hardware = A100_80GB,
         mfu: float = 0.4) -> Plan:
    """Memory, traffic and time of one step of ``batch_sequences`` sequences (see the module docstring)."""
    st = strategy
    reasons = []
    if model.layers % st.pp:
        reasons.append(f"{model.layers} layers do not split into {st.pp} stages")
    if model.heads % st.tp:
        reasons.append(f"{model.heads} heads do not split over {st.tp} ranks")
    if st.tp > model.kv_heads and st.tp % model.kv_heads:
        reasons.append(f"{model.kv_heads} KV heads cannot be replicated evenly over {st.tp} ranks")
    per_replica = batch_sequences / st.dp
    m = per_replica / st.micro_batch
    if per_replica < 1 or m != int(m):
        reasons.append(f"{batch_sequences} sequences do not split into {st.dp} replicas x micro-batches of {st.micro_batch}")
        m = max(1.0, m)
    m = int(m)
    if st.tp > hardware.gpus_per_node:
        reasons.append(f"tensor parallelism over {st.tp} GPUs leaves the {hardware.gpus_per_node}-GPU node")

    h, s, b, t, p = model.hidden, model.seq_len, st.micro_batch, st.tp, st.pp
    layers_here = model.layers / p
    # K and V project to kv_heads heads (grouped-query attention): over more ranks than KV heads, each KV
    # head is replicated on t / kv_heads ranks (as Megatron does), so those weights split kv_heads ways only
    kv_weights = 2 * h * (h * model.kv_heads // model.heads)
    sharded_layer = ((model.layer_params - 2 * h - kv_weights) / t + kv_weights / min(t, model.kv_heads)
                     + 2 * h)                                       # norms are replicated
    params_gpu = layers_here * sharded_layer + model.embedding_params / t + (h if p == 1 else 0)
    if p == 1 and not model.tied_embeddings:
        params_gpu += model.embedding_params / t                    # both ends on the one stage

    in_flight = 1 if p == 1 else (min(p, m) if st.schedule == "1F1B" else m)
    acts = layers_here * in_flight * layer_activation_bytes(s, b, h, model.heads, tp=t,
                                                            sequence_parallel=st.sequence_parallel and t > 1,
                                                            recompute=st.recompute)
    memory = model_state_bytes(params_gpu, optimizer="adam", precision="mixed", stage=st.zero, n=st.dp,
                               activations=acts)
    grad_bytes = REDUCE_BYTES.get(st.reduce_dtype, 2)
    memory = replace(memory, grads=memory.grads * grad_bytes / 2)  # held as they are reduced

    act_bytes = 2.0 * s * b * h                                     # one micro-batch's activation, 16-bit
    sent: dict[str, float] = {}
    if t > 1:
        per_layer = 6 if st.recompute == "full" else 4
        sent["tensor"] = per_layer * 2 * (t - 1) / t * act_bytes * layers_here * m
    if p > 1:
        sent["pipeline"] = 2 * act_bytes / t * m
    grads_sent, params_sent = data_parallel_bytes(params_gpu, st.dp, st.zero,
                                                  reduce_dtype=st.reduce_dtype)
    if st.dp > 1:
        sent["data"] = grads_sent + params_sent
    links = {"tensor": hardware.intra_node, "pipeline": hardware.network, "data": hardware.network}
    comm_s = {k: v / links[k] for k, v in sent.items()}

    tokens = batch_sequences * s
    flops = (8 if st.recompute == "full" else 6) * model.params * tokens / st.gpus
    compute = flops / (hardware.flops * mfu)
    bubble = (p - 1) / (m + p - 1)
    # the backward pass: 4P of the 6P FLOPs per token (6P of 8P with the forward recomputed)
    last_backward = compute / m * (6 / 8 if st.recompute == "full" else 4 / 6)
    net = hardware.network
    exposed = max(0.0, grads_sent / net - last_backward) + params_sent / net if st.dp > 1 else 0.0
    return Plan(st, st.gpus, not reasons, "; ".join(reasons), m, params_gpu, memory, bubble, flops, compute,
                compute / (1 - bubble), sent, comm_s, hardware.memory, exposed)
