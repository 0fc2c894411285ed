"""pytest collects dlperf's modules for their doctests: leave out the ones that import triton where it is missing."""

import importlib.util

collect_ignore = [] if importlib.util.find_spec("triton") else ["triton_kernels.py"]
