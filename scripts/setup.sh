#!/usr/bin/env bash
# Create (or bring up to date) the virtual environment .venv with everything the
# book, the exercises and the tests need.  Idempotent: a second run with the same
# pyproject.toml and the same script returns at once.
#
# torch: a machine that already ships torch (the GPU machines: torch + CUDA
# preinstalled, no network) keeps its own, through --system-site-packages.
# Elsewhere the CPU build torch==2.13.0 is installed first, from the local wheel
# folder pip is configured with, so that the range in pyproject.toml is already
# satisfied and pip never pulls a multi-GB CUDA build.
#
# Offline (an air-gapped GPU node): WHEELHOUSE=<folder made by `make wheelhouse`>
# installs from that folder alone (pip --no-index --find-links), never from an
# index.  The node's torch (and numpy) are kept as above; the folder holds every
# other wheel (scripts/wheelhouse.py).  Without torch on the machine, the folder
# must hold one (make wheelhouse TORCH=torch==2.13.0).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
TORCH_CPU=${TORCH_CPU:-torch==2.13.0}
D2L=d2l==1.0.3
WHEELHOUSE=${WHEELHOUSE:-}
offline=()
if [ -n "$WHEELHOUSE" ]; then
  if [ ! -d "$WHEELHOUSE" ]; then
    echo "setup: WHEELHOUSE=$WHEELHOUSE is not a folder (make one with: make wheelhouse PY=<the node's python>)" >&2
    exit 1
  fi
  WHEELHOUSE=$(cd "$WHEELHOUSE" && pwd)
  offline=(--no-index --find-links "$WHEELHOUSE")
fi

key=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
stamp="$VENV/.setup-$key"
if [ -f "$stamp" ]; then
  exit 0
fi

echo "setup: creating $VENV (one time; about two minutes)"
if [ -n "$WHEELHOUSE" ]; then
  echo "setup: installing offline from $WHEELHOUSE (no package index)"
fi
if [ ! -x "$VENV/bin/python" ]; then
  if "$PYTHON" -c "import torch" 2>/dev/null; then
    echo "setup: this machine ships torch $("$PYTHON" -c 'import torch; print(torch.__version__)'); keeping it"
    "$PYTHON" -m venv --system-site-packages "$VENV"
    # A machine whose python3 is itself a virtual environment (the GPU images: /opt/torch/.venv):
    # --system-site-packages reaches the installation it was made from, not its packages, so
    # its site-packages are added to .venv by a .pth file (after .venv's own, which win).
    if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
      # every site-packages folder on its path: those its own .pth files add too (a chain of environments)
      parent=$("$PYTHON" -c 'import sys; print("\n".join(p for p in sys.path if p.rstrip("/").endswith(("site-packages", "dist-packages"))))')
      own=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
      echo "$parent" > "$own/_dlperf_parent_site.pth"
      echo "setup: $PYTHON is a virtual environment; its packages are visible to $VENV through $own/_dlperf_parent_site.pth"
    fi
  else
    "$PYTHON" -m venv "$VENV"
  fi
fi
pip=("$VENV/bin/python" -m pip --disable-pip-version-check --quiet)
install=("${pip[@]}" install ${offline[@]+"${offline[@]}"})
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  echo "setup: installing $TORCH_CPU (CPU build)"
  if ! "${install[@]}" "$TORCH_CPU"; then
    if [ -n "$WHEELHOUSE" ]; then
      echo "setup: this machine's $PYTHON has no torch and $WHEELHOUSE holds no $TORCH_CPU wheel: use the" \
           "node's Python that ships torch (PYTHON=...), or build the wheelhouse with TORCH=$TORCH_CPU" >&2
    fi
    exit 1
  fi
fi
if [ -n "$WHEELHOUSE" ] && [ -f "$WHEELHOUSE/device-kit.json" ]; then
  # A device kit (scripts/device_kit.py) is resolved already, against the GPU image's packages, and
  # leaves out what a GPU check never runs: every wheel goes in as it is, the course package too.
  echo "setup: $WHEELHOUSE is a device kit: installing its wheels as resolved (--no-deps)"
  "${install[@]}" --no-deps "$WHEELHOUSE"/*.whl
  "${install[@]}" --no-deps --no-build-isolation -e .
else
  echo "setup: installing the course package and the book and test tools"
  # the hub extra (JupyterHub, batchspawner) only online: an offline node runs no hub (its proxy is from npm)
  "${install[@]}" -e ".[book,course,test$([ -z "$WHEELHOUSE" ] && echo ,hub)]"
  # d2l pins numpy 1.23 and matplotlib 3.7, which cannot install beside numpy 2 /
  # Python 3.12: its helpers work on a modern stack, so it comes without its pins.
  "${install[@]}" --no-deps "$D2L"
fi
# jsonschema's optional rfc3987-syntax (pulled in by jupyter-events) builds a parser
# grammar at import: 4 s added to every notebook kernel that imports nbformat (each
# chapter's glue, each grading run). jsonschema works without it (that URI format
# check is skipped), so it goes.
"${pip[@]}" uninstall -y rfc3987-syntax >/dev/null 2>&1 || true
rm -f "$VENV"/.setup-*
touch "$stamp"
echo "setup: done ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
