#!/usr/bin/env bash
# The prepared script of a lent GPU window: everything GPU in two calls, nothing lost when time runs out.
#
#   make device-kit            # here, once: .kit/device-kit.tar.xz (scripts/device_kit.py)
#   git describe --always --dirty --abbrev=12 > .kit/commit     # here, before each window: the tree's commit
#   there (device run, carry [".kit"]), one call each, the second at once while the machine is warm:
#     bash scripts/device_check.sh 400 references
#     bash scripts/device_check.sh 330 grading
#   (bash scripts/device_check.sh SECONDS all: both parts in one call, for a machine of one's own)
#
# On the GPU machine (its python3 ships torch; no network) every part
#   - records the machine (nvidia-smi, the image's `pip freeze`) and checks that every torch/triton/numpy
#     name the project uses exists in the image's versions (scripts/api_names.py);
#   - installs the kit offline (WHEELHOUSE=<kit> make setup: every wheel --no-deps, resolved here; a warm
#     machine keeps .venv and returns at once) and unpacks bubblewrap from it where the image lacks bwrap;
# then the part `references`:
#   - runs the CUDA isolation probe (which namespaces CUDA starts in: scripts/cuda_isolation_probe.py);
#   - reads Nsight Compute's DRAM and L2 byte counters of the course's Triton kernels beside the
#     interpreter's counts and the book's models (scripts/ncu_traffic.py, at most 110 s);
#   - executes the chapters that record GPU references, one by one (scripts/gpu_references.py through
#     gpu_check's references step), keeping each executed notebook;
# and the part `grading`:
#   - the gpu tests and the doctor's grade of every exercise's reference on the GPU (with why a point
#     was lost, if one was);
#   - every exercise's honest class on the GPU, its fixture scores checked, with the planning figures
#     (submissions per hour per GPU, a class of 100's wait: gpu_check's throughput step);
#   - triton_softmax's fixtures (the GPU exercise: every wrong and correct alternative, expected scores),
#     then gradscaler's sample class (honest and misbehaving submissions) with the time left;
# each step through scripts/gpu_check.py (make gpu-check), which bounds it by the time left.  Every 10 s
# (and at the end) what was found is packed into $OUT (the device tool's folder; elsewhere
# _build/device-out), at most 8 files: device.log (this script's output), image-freeze.txt,
# api-names.json, and gpu-check.tar.gz (reports, logs, doctor JSON, sample-class grades and reports,
# executed chapters, tracebacks, recorded GPU references).
# The first window (2026-11-27, an H200) ran the book beside the grading in one call: the book reached
# five chapters in 380 s (its DDP chapter alone 220 s) and the grading's sample class was cut short.
# Where there is no GPU it still installs and runs every step, each of which says so (gpu_check exits 2).
set -uo pipefail
cd "$(dirname "$0")/.."
LIMIT=${1:-520}
PART=${2:-all}
case "$PART" in references|grading|all) ;; *) echo "device-check: the part is references, grading or all, not $PART" >&2; exit 2;; esac
START=$(date +%s)
OUTDIR=${OUT:-_build/device-out}
KIT=${KIT:-.kit/device-kit.tar.xz}
PY=${PYTHON:-python3}
mkdir -p "$OUTDIR" _build/gpu-check
# the commit of the tree (this copy's .git may be an older one's): written here by `make device-kit`
if [ -f .kit/commit ]; then export DLPERF_COMMIT; DLPERF_COMMIT=$(cat .kit/commit); fi
exec > >(tee -a "$OUTDIR/device.log") 2>&1
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
say() { echo "device-check [$(( $(date +%s) - START )) s]: $*"; }

pack() {
  # reports, logs, JSON, CSV, tracebacks, recorded references: small text files only
  local list=_build/device-pack.txt
  (find _build/gpu-check _build/gpu_reference _build/html/reports -type f \
     \( -name '*.md' -o -name '*.log' -o -name '*.json' -o -name '*.csv' -o -name '*.txt' -o -name '*.html' -o -name '*.out' -o -name '*.ipynb' \) \
     -size -4M 2>/dev/null | grep -v '/sample-class/\(submitted\|autograded\|feedback\|release\|source\)/') > "$list"
  tar -czf "$OUTDIR/gpu-check.tar.gz.tmp" -T "$list" 2>/dev/null && mv "$OUTDIR/gpu-check.tar.gz.tmp" "$OUTDIR/gpu-check.tar.gz"
}
( while sleep 10; do pack; done ) &
PACKER=$!
trap 'kill $PACKER 2>/dev/null; pack' EXIT

say "part ${PART}, limit ${LIMIT} s; $(uname -n), $(nproc) cores"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | sed 's/^/  nvidia-smi: /'
"$PY" -m pip freeze > "$OUTDIR/image-freeze.txt" 2>/dev/null
"$PY" -c 'import sys, torch, numpy; print("  python", sys.version.split()[0], sys.executable, "torch", torch.__version__,
  "cuda", torch.version.cuda, "numpy", numpy.__version__)'

# every torch/triton/numpy name the project uses, resolved in the image's versions (a few seconds)
timeout 60 "$PY" scripts/api_names.py --json "$OUTDIR/api-names.json" 2>&1 | sed 's/^/  api names: /' | head -40

# the kit, offline
if [ -f "$KIT" ]; then
  rm -rf /tmp/device-kit && mkdir -p /tmp/device-kit
  tar -xJf "$KIT" -C /tmp/device-kit && say "kit unpacked: $(ls /tmp/device-kit/*.whl | wc -l) wheels"
  if ! command -v bwrap >/dev/null; then
    deb=$(ls /tmp/device-kit/bubblewrap_*.deb 2>/dev/null | head -1)
    if [ -n "$deb" ]; then
      dpkg -x "$deb" /tmp/device-kit/bwrap && export PATH=/tmp/device-kit/bwrap/usr/bin:$PATH
      say "bubblewrap from the kit: $(bwrap --version 2>&1)"
    fi
  else
    say "bubblewrap: $(command -v bwrap) ($(bwrap --version 2>&1))"
  fi
  export WHEELHOUSE=/tmp/device-kit
else
  say "no kit at $KIT: make setup uses the package index (make device-kit builds the kit)"
fi
timeout 240 make setup PYTHON="$PY" || say "setup FAILED (exit $?)"
.venv/bin/python -m pip check 2>&1 | sed 's/^/  pip check: /' | head -20

check() {   # check NAME ARGS...: scripts/gpu_check.py bounded by the time left (and by $CAP seconds, if set)
  local name=$1; shift
  local t=$(( $(left) - 15 ))
  if [ -n "${CAP:-}" ] && [ "$t" -gt "$CAP" ]; then t=$CAP; fi
  if [ "$t" -le 20 ]; then say "$name: no time left"; return; fi
  say "$name: up to $t s"
  .venv/bin/python scripts/gpu_check.py --out "_build/gpu-check/$name" --time-limit "$t" "$@" \
    > "_build/gpu-check/$name.out" 2>&1
  say "$name: exit $? ($(grep -c '' "_build/gpu-check/$name.out") lines of output)"
}
# EXERCISES=a,b (default: every exercise, those named in $FIRST before the others: the ones no GPU has
# yet graded 10/10, so that a window cut short still confirms them) and CHAPTERS=a,b (default: every
# chapter that records a reference) narrow a window's parts
FIRST=${FIRST:-no_sync_loop,tensor_parallel}
EXERCISES=${EXERCISES:-$(FIRST="$FIRST" .venv/bin/python -c 'import os
from autograder import course
first = [e for e in os.environ["FIRST"].split(",") if e in course.assignments()]
print(",".join(first + [e for e in course.assignments() if e not in first]))' 2>/dev/null)}

references() {
  if [ "${PROBE:-yes}" != no ]; then
    # which namespaces CUDA starts in (about 10 s)
    timeout 60 "$PY" scripts/cuda_isolation_probe.py plain userns+pidns all-but-pid+dropcaps \
      userns+mntns+pidns+freshproc all+freshproc+dropcaps all+emptyproc+dropcaps 2>&1 | sed 's/^/  probe: /'
  fi
  # the interpreter's traffic counts beside Nsight Compute's DRAM and L2 counters (about a minute)
  if [ "${NCU:-yes}" != no ]; then CAP=110 check ncu --steps ncu; fi
  check references --steps references ${CHAPTERS:+--chapters "$CHAPTERS"}
}
grading() {
  CAP=${GRADING_CAP:-} check grading --steps tests,doctor --doctor-exercises "$EXERCISES"
  # every exercise's honest class on the GPU: fixture scores and the planning figures (THROUGHPUT=no: not)
  if [ "${THROUGHPUT:-yes}" != no ]; then
    CAP=${THROUGHPUT_CAP:-} check throughput --steps throughput --throughput-limit "${THROUGHPUT_LIMIT:-8}"
  fi
  if [ "${FIXTURES:-yes}" != no ]; then
    check triton-fixtures --steps sample --sample-assignment triton_softmax
    check gradscaler-class --steps sample --sample-assignment gradscaler
  fi
}
# the part `all` runs references, then grading; ORDER=grading,references the other way round.
# PROBE=no, NCU=no, THROUGHPUT=no and FIXTURES=no leave out a step that an earlier window has already
# recorded; GRADING_CAP and THROUGHPUT_CAP bound a step's seconds, THROUGHPUT_LIMIT the submissions per exercise.
case "$PART" in
  references) references ;;
  grading) grading ;;
  all) if [ "${ORDER:-references,grading}" = grading,references ]; then grading; references; else references; grading; fi ;;
esac
for r in _build/gpu-check/*/report.md; do echo; echo "== $r"; cat "$r"; done
say "done"
