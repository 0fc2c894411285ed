# The two commands of the README:
#   make book   build the whole book (executing every chapter) into _build/html
#   make test   run the test suite
# Both set up .venv first (scripts/setup.sh; instant when already done).
#   make exercises   regenerate the student notebooks exercises/ from solutions/ (nbgrader)
#   make sample-class   grade the sample class (honest and adversarial submissions) with the autograder

VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup book test exercises sample-class clean

setup:
	@bash scripts/setup.sh

book: setup
	@$(BIN)/python scripts/build_book.py

test: setup
	@bash scripts/install_system.sh
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

clean:
	rm -rf _build
