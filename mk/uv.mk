# uv installs the pinned closures into the virtualenvs (about 10 s each where pip takes minutes).
# It is bootstrapped from PyPI at a pinned version into a small virtualenv of its own.
# Included from the main Makefile and from mk/vllm.mk; the guard keeps a second include harmless.

ifndef UV_MK_INCLUDED
UV_MK_INCLUDED := 1

PYTHON     ?= python3
UV_VERSION := 0.9.5
UV_ENV     ?= .venv-uv
UV         := $(UV_ENV)/bin/uv

ifneq ($(wildcard /opt/wheels),)
# a CPU build of torch ships on the development and CI machines; let pip and uv find it there
export PIP_FIND_LINKS ?= /opt/wheels
export UV_FIND_LINKS ?= /opt/wheels
endif
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# Bytecode: installing with --compile-bytecode compiled all of torch, transformers, Ray and vLLM,
# twice: 135 s of a fresh clone's `make test` before any test, ~230 CPU-s. Instead each venv's
# recipe imports what runs and tests use (mk/warm_imports.py, one process: ~50 s for both venvs side by side, 85% of the
# modules later imported), and Python compiles the rest on first import and keeps it. Left to the
# suites alone, the same modules were compiled by many processes starting at once (~240 CPU-s).
# An environment's PYTHONDONTWRITEBYTECODE would make every process compile them again.
unexport PYTHONDONTWRITEBYTECODE

$(UV):
	$(PYTHON) -m venv $(UV_ENV)
	$(UV_ENV)/bin/python -m pip install -q uv==$(UV_VERSION)

endif
