"""``python -m autograder``: the instructor command (see :mod:`autograder.cli`)."""

import sys

from .cli import main

if __name__ == "__main__":  # Dask starts its worker processes by spawning: they import this module
    sys.exit(main())
