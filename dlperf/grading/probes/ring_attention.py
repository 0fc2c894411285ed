"""The rules of the ``ring_attention`` exercise: what the solution cells may use (public: the self-check applies them).

Ring attention is written with tensor arithmetic and point-to-point messages: the grader's reading of
the two solution cells (:func:`dlperf.grading.reading.read`, an allow-list) lets through ``torch``'s
tensor functions that attention needs (matrix products, ``exp``, ``log``, ``logsumexp``, ``maximum``,
``where``, masks), the process group's rank, size and messages (``dist.send``, ``recv``, ``isend``,
``irecv``, ``batch_isend_irecv``, ``P2POp``), a few standard modules (``math``, ...), and the methods of
tensors, lists and tuples; nothing else.  The course library's ready-made ring and merge
(``dlperf.parallel.context``, ``dlperf.attention``) and PyTorch's fused attention
(``torch.nn.functional.scaled_dot_product_attention``) are refused: that is what you write.

The collectives of ``torch.distributed`` (``all_gather``, ``broadcast``, ...) are allowed by the
reading: the grader's relay opens the group with them and counts them, and the traffic check says
why a ring needs none.

The same :data:`RULES` are applied by the grader (``read(solution_parts(...), RULES)``, in every
hidden cell) and by the self-check (``reading_case(RULES, block_attention, merge, ring_attention)``).
"""

from __future__ import annotations

from dlperf.grading.reading import DEFAULT_BUILTINS, STANDARD_LIBRARY, Rules

__all__ = ["RULES"]

_TORCH = {
    "torch.Tensor", "torch.no_grad", "torch.is_tensor",
    "torch.empty", "torch.empty_like", "torch.zeros", "torch.zeros_like", "torch.ones", "torch.ones_like",
    "torch.full", "torch.full_like", "torch.tensor", "torch.arange", "torch.cat", "torch.stack", "torch.split",
    "torch.chunk", "torch.unbind",
    "torch.exp", "torch.log", "torch.log1p", "torch.expm1", "torch.sqrt", "torch.rsqrt", "torch.maximum",
    "torch.minimum", "torch.max", "torch.amax", "torch.sum", "torch.where", "torch.logsumexp", "torch.logaddexp",
    "torch.softmax", "torch.matmul", "torch.bmm", "torch.einsum", "torch.tril", "torch.triu", "torch.isfinite",
    "torch.isinf", "torch.isnan", "torch.nan_to_num", "torch.clamp", "torch.sigmoid", "torch.finfo",
    "torch.float32", "torch.float64", "torch.float", "torch.double", "torch.bool", "torch.long", "torch.int64",
    "torch.inf",
}
_DIST = {
    "torch.distributed.get_rank", "torch.distributed.get_world_size", "torch.distributed.is_initialized",
    "torch.distributed.send", "torch.distributed.recv", "torch.distributed.isend", "torch.distributed.irecv",
    "torch.distributed.batch_isend_irecv", "torch.distributed.P2POp", "torch.distributed.barrier",
    # collectives: the relay counts them, the traffic check refuses them with a reason
    "torch.distributed.all_gather", "torch.distributed.all_gather_into_tensor", "torch.distributed.broadcast",
    "torch.distributed.all_reduce", "torch.distributed.ReduceOp", "torch.distributed.ReduceOp.SUM",
}
_ATTRIBUTES = {
    # tensors
    "shape", "size", "dim", "ndim", "dtype", "device", "numel", "element_size", "float", "double", "to",
    "clone", "detach", "contiguous", "is_contiguous", "transpose", "mT", "T", "permute", "unsqueeze", "squeeze",
    "view", "view_as", "reshape", "reshape_as", "expand", "expand_as", "flatten", "split", "chunk", "narrow",
    "unbind", "masked_fill", "masked_fill_", "exp", "exp_", "log", "log1p", "sqrt", "amax", "max", "min",
    "maximum", "minimum", "sum", "mean", "matmul", "mul", "add", "sub", "div", "neg", "mul_", "add_", "sub_",
    "div_", "copy_", "zero_", "fill_", "clamp", "clamp_min", "clamp_", "where", "logsumexp", "softmax", "tril",
    "triu", "new_empty", "new_zeros", "new_ones", "new_full", "new_tensor", "tolist", "item", "values",
    "indices", "isfinite", "all", "any", "abs", "bool", "long",
    # the requests of isend / irecv / batch_isend_irecv
    "wait", "is_completed",
    # lists, tuples, dicts
    "append", "extend", "insert", "pop", "index", "count", "reverse", "items", "keys", "get", "copy",
    # numbers
    "real", "bit_length",
}

_LIBRARY = ("the course library has ring attention and the log-sum-exp merge ready-made: write them yourself "
            "(torch and torch.distributed are all the cells need)")

RULES = Rules(
    what="block_attention, merge and ring_attention",
    imports={"torch", "torch.distributed", *STANDARD_LIBRARY["imports"]},
    names={*_TORCH, *_DIST, *STANDARD_LIBRARY["names"]},
    builtins=DEFAULT_BUILTINS,
    attributes=_ATTRIBUTES,
    decorators={"torch.no_grad", *STANDARD_LIBRARY["decorators"]},
    classes=False,
    explain={**{name: _LIBRARY for name in ("dlperf", "dlperf.attention", "dlperf.parallel",
                                            "dlperf.parallel.context", "autograder", "autograder.exercises")},
             "torch.nn": "torch.nn.functional.scaled_dot_product_attention computes the whole attention at "
                         "once; a block's attention is a matrix product, an exp and a sum",
             "torch.nn.functional": "scaled_dot_product_attention computes the whole attention at once; a "
                                    "block's attention is a matrix product, an exp and a sum",
             "torch.nn.functional.scaled_dot_product_attention": "it computes the whole attention at once; a "
                                                                 "block's attention is a matrix product, an exp "
                                                                 "and a sum",
             "torch.distributed.tensor": "PyTorch's context parallelism is the library version of this exercise"},
)
