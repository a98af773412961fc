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

# both environments and chromium are independent; -j3 builds them side by side. The suites mostly
# wait (on Ray start-ups, Serve, engines), so they run side by side: the vLLM suite (a Ray with a
# temp dir and ports of its own) beside two pytest-xdist workers that share out the integration
# test files, longest first, then the unit tests; each worker starts its own Ray head, S3 server
# and Serve, on free ports of 127.0.0.1.
MAKEFLAGS += -j3
test: venv venv-vllm chromium  ## lint, type-check the engine, then the vLLM suite beside the integration and unit tests (report.html rendered in headless chromium)
	$(VENV)/bin/ruff check lib tests bench jobs
	$(VENV)/bin/mypy
	log=$$(mktemp); ($(MAKE) --no-print-directory test-vllm > $$log 2>&1; echo $$? > $$log.rc) & \
	$(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --durations=12 tests/integration tests/unit; \
	rc=$$?; wait; echo "--- vLLM suite"; cat $$log; vllm=$$(cat $$log.rc); rm -f $$log $$log.rc; \
	test $$rc -eq 0 && test $$vllm -eq 0

bench: venv  ## writes bench/results.json
	$(PY) bench/run.py

clean:
	rm -rf runs bench/results.json
