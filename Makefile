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

# Bytecode for the checkout's own packages, which an editable install leaves
# uncompiled: where PYTHONDONTWRITEBYTECODE is set (some images set it),
# every process (a command, a build or measuring worker, a notebook's kernel)
# would otherwise compile laytune's source again, about 0.6 s each. Python
# reads these files even when it may not write them; an edited module's file
# is stale and compiled again here (or in memory by the process, as before).
BYTECODE = $(BIN)/python -m compileall -q -j 0 laytune bench tests

tune: $(STAMP)
	$(BYTECODE)
	$(BIN)/laytune tune --demo --db sqlite:///laytune.db

test: $(STAMP)
	$(BIN)/ruff check laytune tests bench
	$(BYTECODE)
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup

test-fast: $(STAMP)
	$(BYTECODE)
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check laytune tests bench
	$(BIN)/ruff format --check laytune tests bench

# Peers for the side-by-side figures: Kernel Tuner, ONNX Runtime and onnx (the
# bench extra); CLBlast through pyclblast, which builds against Debian's
# libclblast-dev, installed with apt-get when it is missing and apt-get is there.
# Without CLBlast the benchmarks skip its rows and say so.
bench: $(STAMP)
	$(BYTECODE)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	@if ! $(BIN)/python -c 'import pyclblast' 2>/dev/null; then \
	  if [ ! -e /usr/include/clblast.h ] && command -v apt-get >/dev/null 2>&1; then \
	    sudo=""; \
	    if [ "$$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then sudo="sudo"; fi; \
	    $$sudo apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq libclblast-dev >/dev/null || \
	      echo "warning: libclblast-dev did not install; the CLBlast rows will be skipped" >&2; \
	  fi; \
	  $(BIN)/python -m pip install --quiet 'pyclblast>=1.4' || \
	    echo "warning: pyclblast did not install; the CLBlast rows will be skipped" >&2; \
	fi
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
