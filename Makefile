# Each target bootstraps the virtualenv it needs from the pinned dependencies; a second call
# reuses it (the stamp is newer than pyproject.toml and requirements.lock).
VENV   ?= .venv
PYTHON ?= python3
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

export RAY_USAGE_STATS_ENABLED := 0
# every Ray the tests and bench scripts start keeps to 127.0.0.1 (tests/conftest.py says why)
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER := 0

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

# both environments and chromium are independent; -j3 builds them side by side. After lint three
# lanes run side by side, each one suite after another: the vLLM suite (a Ray of its own: its temp
# dir, the default worker ports, Serve on free ports), the unit tests (no Ray) and the bench scripts
# of BENCH_BESIDE_VLLM; at nice 5 (NICER: the vLLM suite's engine starts, chains of processes that
# import vLLM one after another, get the cores first), the type check, the integration tests (one
# Ray head on ports the OS hands out) and the other bench scripts (each at its smallest size starts
# what it measures, on ports of its own); and the integration tests marked `clock`, which wait on
# back-offs and deadlines more than they compute (a Ray head of their own). BENCH_BESIDE_VLLM evens
# the first two lanes; the measurements are in docs/architecture.md ("The test suite").
# Each suite's output follows, then the slowest tests.
PYTEST := $(PY) -m pytest -q -p no:cacheprovider
SLOWEST ?= 15  # how many of the slowest tests `make test` lists
BENCH_SCRIPT := tests/bench/test_bench_scripts.py::test_bench_script_runs_to_its_end
BENCH_BESIDE_VLLM := $(foreach s,cluster_layouts many_models,'$(BENCH_SCRIPT)[$(s).py]')
NICER := nice -n 5  # the lane that lets the vLLM suite's engine starts have the cores first
MAKEFLAGS += -j3
test: venv venv-vllm chromium  ## lint; then the vLLM, unit and some bench tests beside types, integration and the other bench tests, beside the tests that wait on clocks (report.html rendered in headless chromium)
	$(VENV)/bin/ruff check lib tests bench jobs
	d=$$(mktemp -d); \
	suite() { name=$$1; shift; "$$@" > $$d/$$name 2>&1; echo $$? > $$d/$$name.rc; }; \
	(suite vllm $(MAKE) --no-print-directory test-vllm PYTEST_ARGS="--junitxml=$$d/vllm.xml"; \
	 suite unit $(PYTEST) --junitxml=$$d/unit.xml tests/unit $(BENCH_BESIDE_VLLM)) & \
	(suite mypy $(NICER) $(VENV)/bin/mypy; \
	 suite integration $(NICER) $(PYTEST) --junitxml=$$d/integration.xml -m 'not clock' tests/integration; \
	 suite bench $(NICER) $(PYTEST) --junitxml=$$d/bench.xml tests/bench $(addprefix --deselect ,$(BENCH_BESIDE_VLLM))) & \
	suite clock $(PYTEST) --junitxml=$$d/clock.xml -m clock tests/integration; \
	wait; rc=0; \
	for s in mypy vllm unit integration clock bench; do \
		echo "--- $$s"; cat $$d/$$s; rc=$$((rc + $$(cat $$d/$$s.rc))); done; \
	$(PY) mk/slowest.py $(SLOWEST) $$d/*.xml; \
	rm -rf $$d; test $$rc -eq 0

bench: venv venv-vllm  ## writes bench/results.json
	$(PY) bench/run.py

clean:
	rm -rf runs bench/results.json
