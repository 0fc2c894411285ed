"""Model parallelism: the code of the chapters *Model parallelism* (tensor and pipeline) and its part two
(meshes, context and experts).

One concept per module:

* :mod:`dlperf.parallel.tensor` -- tensor parallelism written by hand on a process group:
  column- and row-parallel ``Linear`` layers, Megatron's conjugate operators ``f`` and ``g`` as
  autograd functions, the MLP block with and without sequence parallelism, a counter of the
  collectives' bytes, and the workers that check it all against the unsharded model;
  PyTorch's own ``parallelize_module`` on the same block;
* :mod:`dlperf.parallel.schedules` -- pipeline schedules as data (GPipe, 1F1B, interleaved 1F1B,
  ZB-H1), their closed forms, and drawing a simulated run;
* :mod:`dlperf.parallel.pipeline` -- a simulator with per-stage compute times and point-to-point
  transfers, stages on real processes (chunks, B and W apart), and ``torch.distributed.pipelining``
  on the same model;
* :mod:`dlperf.parallel.planner` -- the arithmetic of choosing a strategy: memory per GPU,
  bytes per step and the pipeline bubble for data, tensor, pipeline, context, expert and sharded
  data parallelism, and the layout it recommends;
* :mod:`dlperf.parallel.costs` -- the bytes each kind of communication sends (data parallelism and
  HSDP, ring attention, the all-to-alls) and the seconds ring attention and the all-to-alls add to a
  step (alpha-beta, with their overlap assumptions), which the planner uses;
* :mod:`dlperf.parallel.context` -- context parallelism: ring attention on real ranks (contiguous and
  zig-zag layouts, forward and backward), merged with :mod:`dlperf.attention`, its traffic counted;
* :mod:`dlperf.parallel.experts` -- expert parallelism: a mixture-of-experts layer with top-k routing,
  capacity and dropped tokens, all-to-all dispatch and combine on real ranks;
* :mod:`dlperf.parallel.mesh` -- composing on a 2-D ``DeviceMesh``: FSDP2 with tensor parallelism, and HSDP,
  the model state each rank holds and the collectives of a step, beside the planner's figures.

Nothing is imported here: ``import dlperf.parallel.tensor`` loads only what it needs.
"""
