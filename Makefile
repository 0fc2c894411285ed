# The two commands of the README:
#   make book   build the whole book (executing every chapter) into _build/html
#   make test   run the test suite
# Both set up .venv first (scripts/setup.sh; instant when already done).
#   make exercises   regenerate the student notebooks exercises/ from solutions/ (nbgrader)

VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup book test exercises clean

setup:
	@bash scripts/setup.sh

book: setup
	@$(BIN)/python scripts/build_book.py

test: setup
	@bash scripts/install_browser.sh
	@$(BIN)/python -m pytest $(PYTEST_ARGS)

exercises: setup
	@$(BIN)/python -m autograder.course generate

clean:
	rm -rf _build
