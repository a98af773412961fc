# Each target bootstraps the virtualenv it needs from the pinned dependencies; a second call
# reuses it (the stamp is newer than pyproject.toml and requirements.lock).
VENV   ?= .venv
PYTHON ?= python3
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

export RAY_USAGE_STATS_ENABLED := 0

include mk/uv.mk
include mk/vllm.mk
include mk/chromium.mk

.PHONY: venv demo test bench clean

# what runs, Ray's own processes and the tests import (mk/warm_imports.py: bytecode compiled once)
WARM_IMPORTS := halluscope/ ray.data ray.serve ray.dashboard.dashboard ray.dashboard.agent ray.scripts.scripts \
	ray.util.client.server sentence_transformers transformers.models.auto.modeling_auto torch faiss nltk.tokenize \
	boto3 s3fs moto.server pytest

venv: $(STAMP)

$(STAMP): pyproject.toml requirements.lock | $(UV)
	test -x $(PY) || $(UV) venv -q --python $(PYTHON) $(VENV)
	# torch first and pinned: an unpinned torch pulls a multi-GB CUDA build
	$(UV) pip install -q --python $(PY) torch==2.13.0
	$(UV) pip install -q --python $(PY) -c requirements.lock -e '.[dev]'
	$(PY) mk/warm_imports.py $(WARM_IMPORTS)
	touch $(STAMP)

demo: venv  ## score HALOGEN's recorded responses of 14 models; prints the leaderboard
	$(PY) jobs/evaluate.py

# both environments and chromium are independent; -j3 builds them side by side. After lint and the
# type check, the vLLM suite (a Ray of its own: its temp dir, the default worker ports, Serve on free
# ports) and the unit tests (no Ray) with the bench scripts at their smallest sizes (each starts
# what it measures, on ports of its own) run in the background beside the integration tests (one
# Ray head on ports the OS hands out). Their output follows its own, then the slowest tests of all.
MAKEFLAGS += -j3
test: venv venv-vllm chromium  ## lint, type check, then the vLLM and unit+bench suites beside the integration tests (report.html rendered in headless chromium)
	$(VENV)/bin/ruff check lib tests bench jobs
	$(VENV)/bin/mypy
	d=$$(mktemp -d); \
	($(MAKE) --no-print-directory test-vllm PYTEST_ARGS="--junitxml=$$d/vllm.xml" > $$d/vllm 2>&1; \
	 echo $$? > $$d/vllm.rc) & \
	($(PY) -m pytest -q -p no:cacheprovider --junitxml=$$d/unit.xml tests/unit tests/bench > $$d/unit 2>&1; \
	 echo $$? > $$d/unit.rc) & \
	$(PY) -m pytest -q -p no:cacheprovider --junitxml=$$d/integration.xml tests/integration; rc=$$?; wait; \
	for s in unit vllm; do echo "--- $$s suite"; cat $$d/$$s; rc=$$((rc + $$(cat $$d/$$s.rc))); done; \
	$(PY) mk/slowest.py 15 $$d/integration.xml $$d/unit.xml $$d/vllm.xml; \
	rm -rf $$d; test $$rc -eq 0

bench: venv  ## writes bench/results.json
	$(PY) bench/run.py

clean:
	rm -rf runs bench/results.json
