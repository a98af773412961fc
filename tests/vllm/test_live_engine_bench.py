"""bench/live_engine.py at its smallest size, in the vLLM environment it needs: the real SmolLM2
through vLLM's offline engine and through a run that serves it, so a change that breaks the
script fails `make test` rather than `make bench`."""

from __future__ import annotations

import json

import pytest
from tests.bench.test_bench_scripts import IN_VLLM_SUITE, assert_records, run_script
from tests.conftest import SHARED_DATA

from halluscope.serving.vllm import vllm_installed

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not vllm_installed(), reason="needs vLLM: make test-vllm"),
              pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")]


@pytest.mark.timeout(900)
def test_live_engine_bench_runs_to_its_end(tmp_path):
    out = json.loads(run_script("live_engine.py", IN_VLLM_SUITE["live_engine.py"], tmp_path))
    assert_records(out)
    assert [r["name"] for r in out] == ["live_generation_saturation", "live_role_saturation", "live_plan_error"]
    assert all(r["ratio"] > 0 for r in out)
