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

# both environments and chromium are independent; -j3 builds them side by side. The vLLM suite
# (a Ray of its own: its temp dir, the default worker ports, Serve on free ports) then runs in the
# background beside everything else, which runs in order: lint, type check, unit tests (no Ray),
# the integration tests (one Ray head on ports the OS hands out). The integration suite leaves about
# a third of the 2 cores idle (it waits on Ray start-ups, Serve and S3), which the vLLM suite uses.
MAKEFLAGS += -j3
test: venv venv-vllm chromium  ## the vLLM suite beside lint, type check, unit and integration tests (report.html rendered in headless chromium)
	log=$$(mktemp); ($(MAKE) --no-print-directory test-vllm > $$log 2>&1; echo $$? > $$log.rc) & \
	$(VENV)/bin/ruff check lib tests bench jobs && $(VENV)/bin/mypy \
	  && $(PY) -m pytest -q -p no:cacheprovider tests/unit \
	  && $(PY) -m pytest -q -p no:cacheprovider --durations=12 tests/integration; rc=$$?; wait; \
	echo "--- vLLM suite"; cat $$log; vllm=$$(cat $$log.rc); rm -f $$log $$log.rc; \
	test $$rc -eq 0 && test $$vllm -eq 0

bench: venv  ## writes bench/results.json
	$(PY) bench/run.py

clean:
	rm -rf runs bench/results.json
