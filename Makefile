# The two commands of the README:
#   make book   build the whole book (executing every chapter) into _build/html
#   make test   run the test suite
# Both set up .venv first (scripts/setup.sh; instant when already done).
#   make exercises   regenerate the student notebooks exercises/ from solutions/ (nbgrader)
#   make sample-class   grade the sample class (honest and adversarial submissions) with the autograder
#   make wheelhouse PY=3.12   download every wheel the course needs (but torch) for another machine's
#                             Python, to install there with no network: WHEELHOUSE=<folder> make test
#   make doctor     can this machine grade? (autograder doctor: sandbox, limits, stack, GPUs, gradebook,
#                   a timed grade of each reference solution); make doctor DOCTOR_ARGS=--gpu on a GPU runner
#   make device-kit  .kit/device-kit.tar.xz: every wheel a lent GPU machine's image lacks, in one file
#                    (<= 50 MB) that travels with the tree; there: bash scripts/device_check.sh SECONDS
#   make gpu-check  the whole project's GPU check (gpu tests, doctor --gpu, sample class, book), with a
#                   report in _build/gpu-check/report.md; says so and stops where there is no GPU

VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup book test exercises sample-class wheelhouse doctor gpu-check device-kit clean

# make wheelhouse: the target's Python (MAJOR.MINOR), its platform (glibc 2.28 or newer by default),
# the folder, what the node already has (not downloaded, resolved against: HAVE="numpy==2.5.0"),
# and TORCH=torch==2.13.0 to include a torch (a node without one).
PY ?= $(shell python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
PLATFORM ?= manylinux_2_28_x86_64
OUT ?= wheelhouse
HAVE ?=
TORCH ?=

setup:
	@bash scripts/setup.sh

# The course's own modules compiled once: where PYTHONDONTWRITEBYTECODE is set (as on this project's
# machines), every process of the suite and of the book build would otherwise compile what it imports
# of them again; a file changed since is recompiled in memory, its stale .pyc never used.
PYC := $(BIN)/python -m compileall -q -j 0 -x /submissions/ dlperf autograder scripts tests

book: setup
	@$(PYC)
	@$(BIN)/python scripts/build_book.py

test: setup
	@bash scripts/install_system.sh
	@bash scripts/hub_proxy.sh
	@$(PYC)
	@$(BIN)/python -m pytest $(PYTEST_ARGS)

exercises: setup
	@$(BIN)/python -m autograder.course generate

# Without a GPU the GPU exercise is graded on CPU, which must be asked for (--cpu): said, and marked
# in every record.
sample-class: setup
	@bash scripts/install_system.sh
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then cpu=; else \
	  cpu=--cpu; echo "no GPU here: grading on CPU (--cpu), marked in every record"; fi; \
	  $(BIN)/python -m autograder sample $$cpu $(SAMPLE_ARGS)

# Needs only python3 and pip with access to the package index (not the course's .venv).
wheelhouse:
	@python3 scripts/wheelhouse.py --python-version "$(PY)" --platform "$(PLATFORM)" --out "$(OUT)" \
	  --have "$(HAVE)" $(if $(TORCH),--torch "$(TORCH)")

# The doctor installs nothing: it reports what this machine lacks (bubblewrap included).
doctor: setup
	@$(BIN)/python -m autograder doctor $(DOCTOR_ARGS)

device-kit:
	@python3 scripts/device_kit.py --out .kit
	@git describe --always --dirty --abbrev=12 > .kit/commit

gpu-check: setup
	@$(BIN)/python scripts/gpu_check.py $(GPU_CHECK_ARGS)

clean:
	rm -rf _build
