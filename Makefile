# Two commands on a fresh machine with only Python 3.11:
#   make tune   installs everything into .venv and runs a real tuning job
#   make test   installs everything into .venv and runs the whole test suite (the
#               notebooks, the README's blocks, and the C host example where a C
#               compiler and the OpenCL headers are installed)
#   make test-fast  the inner loop: the suite without the tests marked slow
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install tune test test-fast lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[pocl,intel,test,dev]'
	touch $(STAMP)

install: $(STAMP)

tune: $(STAMP)
	$(BIN)/laytune tune --demo --db sqlite:///laytune.db

test: $(STAMP)
	$(BIN)/ruff check laytune tests bench
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check laytune tests bench
	$(BIN)/ruff format --check laytune tests bench

# Peers for the side-by-side figures: Kernel Tuner from PyPI; CLBlast through
# pyclblast, which builds against Debian's libclblast-dev (skipped without it).
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	-$(BIN)/python -m pip install --quiet 'pyclblast>=1.4'
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
