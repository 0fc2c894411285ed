"""dlperf: the runtime library of the course *Computational Performance for Deep Learning*.

One home per concept, shared by the book's chapters, the exercises and the
autograder:

* :mod:`dlperf.devices` -- device discovery that never crashes and says what it chose;
* :mod:`dlperf.bench` -- the one benchmark helper (warm-up, device sync, robust stats);
* :mod:`dlperf.trace` -- the one profiler helper (``torch.profiler`` around a callable, its timeline
  as a figure, counts and overlaps per lane, the trace saved for Perfetto/TensorBoard);
* :mod:`dlperf.probe` -- a probe of the reader's machine used live by the hardware chapter;
* :mod:`dlperf.cluster` -- a simulated cluster (alpha-beta links, exact accounting) for the
  multi-device chapters, their widgets and the graded exercises;
* :mod:`dlperf.kernels` -- GPUs from the inside: Triton kernels (compiled on a GPU, interpreted on a CPU),
  their memory traffic counted, a systolic-array simulator, per-layer resources;
* :mod:`dlperf.parallel` -- model parallelism: tensor-parallel layers, pipeline schedules and their
  simulator, real-rank stages, a strategy planner;
* :mod:`dlperf.memory` -- training-memory accounting (formulas, ZeRO, saved activations);
* :mod:`dlperf.data` -- offline data sets (Fashion-MNIST files when present, else shipped digits);
* :mod:`dlperf.launch` -- real process groups started from a notebook (gloo / NCCL);
* :mod:`dlperf.collectives` -- measured collectives: an nccl-tests-style sweep (algbw, busbw) on real
  process groups and an alpha-beta fit compared with the simulator;
* :mod:`dlperf.kvstore` -- a push/pull key-value store over point-to-point messages;
* :mod:`dlperf.staleness` -- synchronous, asynchronous and stale-synchronous (SSP) workers around a
  parameter-server process, with a straggler, and the same rule simulated;
* :mod:`dlperf.ensembles` -- many small models trained at once (``stack_module_state`` + ``vmap``)
  against one after the other;
* :mod:`dlperf.ddp_examples` -- the DistributedDataParallel worker code of the DDP chapter;
* :mod:`dlperf.ddp_timeline` -- DDP's buckets at work: a hook that times each bucket's all-reduce, the layout, a timeline;
* :mod:`dlperf.widgets` -- widgets that stay interactive in the static book;
* :mod:`dlperf.d2l_compat` -- the d2l helpers, loaded without imposing d2l's pins;
* :mod:`dlperf.gpu_reference` -- what a GPU build of the book measured, with its provenance, shown in
  every build (or that there is none yet).
"""

from .bench import (
    Measurement,
    Stopwatch,
    Timeline,
    benchmark,
    benchmark_interleaved,
    compare,
    format_bytes,
    format_seconds,
    load_average,
    speed_phrase,
)
from .devices import (
    accelerator_count,
    by_device,
    cpu_threads,
    default_device,
    describe,
    device_info,
    get_devices,
    has_cuda,
    has_mps,
    synchronize,
)

__version__ = "0.1.0"

__all__ = [
    "Measurement",
    "Stopwatch",
    "Timeline",
    "accelerator_count",
    "benchmark",
    "benchmark_interleaved",
    "by_device",
    "compare",
    "cpu_threads",
    "default_device",
    "format_bytes",
    "format_seconds",
    "describe",
    "device_info",
    "get_devices",
    "has_cuda",
    "has_mps",
    "load_average",
    "speed_phrase",
    "synchronize",
]
