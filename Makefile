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

venv: $(STAMP)

$(STAMP): pyproject.toml requirements.lock | $(UV)
	test -x $(PY) || $(UV) venv -q --python $(PYTHON) $(VENV)
	# torch first and pinned: an unpinned torch pulls a multi-GB CUDA build
	$(UV) pip install -q --compile-bytecode --python $(PY) torch==2.13.0
	$(UV) pip install -q --compile-bytecode --python $(PY) -c requirements.lock -e '.[dev]'
	touch $(STAMP)

demo: venv  ## score HALOGEN's recorded responses of 14 models; prints the leaderboard
	$(PY) jobs/evaluate.py

# both environments and chromium are independent; -j3 builds them side by side. The unit tests
# start no Ray and no Serve, so they run beside the vLLM suite (whose Ray has a temp dir and ports
# of its own) while it waits on its engines; the integration tests, which share one Ray head, follow.
MAKEFLAGS += -j3
test: venv venv-vllm chromium  ## lint, type-check the engine, unit tests beside the vLLM suite, then the integration tests (report.html rendered in headless chromium)
	$(VENV)/bin/ruff check lib tests bench jobs
	$(VENV)/bin/mypy
	log=$$(mktemp); ($(MAKE) --no-print-directory test-vllm > $$log 2>&1; echo $$? > $$log.rc) & \
	$(PY) -m pytest -q -p no:cacheprovider tests/unit; unit=$$?; wait; \
	echo "--- vLLM suite"; cat $$log; vllm=$$(cat $$log.rc); rm -f $$log $$log.rc; \
	test $$unit -eq 0 && test $$vllm -eq 0
	$(PY) -m pytest -q -p no:cacheprovider --durations=12 tests/integration

bench: venv  ## writes bench/results.json
	$(PY) bench/run.py

clean:
	rm -rf runs bench/results.json
