"""Measure collectives like nccl-tests: time per size, algbw, busbw, and an alpha-beta fit per operation.

Starts ``--ranks`` processes (gloo on the CPU; NCCL when there is one GPU per
rank) and prints one nccl-tests-style block per operation, then the fitted
alpha and beta.  The same as ``python -m dlperf.collectives``; under
``torchrun`` each process is one rank of the existing group instead::

    .venv/bin/python scripts/sweep_collectives.py --ranks 4 --max-bytes 64M
    torchrun --nproc-per-node 8 -m dlperf.collectives --max-bytes 1G

Exit status 1 if any collective returned a wrong value.  ``--help`` lists the
options (sizes as in nccl-tests: ``-b``, ``-e``, ``-f``; ``--ops``,
``--iters``, ``--warmup``, ``--dtype``, ``--backend``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dlperf.collectives import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
