"""Each `make bench` script at its smallest size, so a change that breaks one fails `make test`
rather than the hour-long bench. The figures themselves mean nothing at these sizes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import SHARED_DATA

BENCH = Path(__file__).resolve().parents[2] / "bench"

# script -> its arguments at the smallest size that still runs every path it measures
SMALLEST = {
    "run.py": ["--compare-only", "--max-items", "2"],
    "saturation.py": ["--calls", "200", "--json"],
    "scale.py": ["--sizes", "300", "--tasks", "halogen/code", "--json"],  # the domains: test_halogen_all_domains
    # 28 models on halogen/code: past the 16 models up to which every two are paired (neighbours beyond)
    "driver_memory.py": ["--aliases", "1", "2", "--max-items", "2", "--many-models", "28", "--many-items", "2",
                         "--json"],
    # one wave of three models, their modelled loads and tokens 20 times faster (33-36 s; 38-39 s without)
    "many_models.py": ["--models", "3", "--items", "1", "--speedup", "20", "--json"],
    # the RayService's pods, its engine calibrated, the run (its own pilot at one item) and the outage
    # drill: one model on one task, every modelled time 50 times shorter (58-60 s on 2 quiet cores,
    # 188-206 s with three models in two waves, both tasks and a separate pilot run). The integration
    # suite runs the rest: the killed driver's resubmission (tests/integration/test_faults.py: the model
    # generated before the kill is not deployed again), served models in waves (test_waves.py,
    # test_faults.py, test_many_models.py) and halogen/code on them (the same three)
    "cluster_layouts.py": ["--layouts", "3x8-service", "--models", "1", "--items", "1",
                           "--tasks", "halogen/historical_events", "--drills", "faults", "--speedup", "50", "--json"],
    "filtered_reads.py": ["--models", "2", "--json"],
    "halogen_rules.py": ["--json"],
}


# the scripts that need vLLM: run at their smallest size by the vLLM suite (tests/vllm), in its environment
IN_VLLM_SUITE = {"live_engine.py": ["--prompts", "4", "--max-tokens", "8", "--pilot-items", "0", "--json"]}


def test_every_bench_script_is_run_here():
    assert sorted(p.name for p in BENCH.glob("*.py")) == sorted({**SMALLEST, **IN_VLLM_SUITE})


def test_make_bench_runs_every_script_that_writes_records():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_run", BENCH / "run.py")
    assert spec is not None and spec.loader is not None
    bench_run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_run)
    # run.py is the runner; halogen_rules.py counts the corrections' cases for docs/architecture.md, no records
    assert sorted(bench_run.scripts()) == sorted({**SMALLEST, **IN_VLLM_SUITE}.keys() - {"run.py", "halogen_rules.py"})


def run_script(script: str, args: list[str], cwd) -> str:
    """The script's last line of output, once it has run to its end."""
    # each script starts the Ray it measures (or none): not one a test session left in the environment
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run([sys.executable, str(BENCH / script), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout.strip().splitlines()[-1]


def assert_records(out: list) -> None:
    assert out and all({"name", "value", "unit", "baseline", "baseline_value", "ratio"} <= set(r) for r in out)


@pytest.mark.parametrize("script", sorted(SMALLEST))
def test_bench_script_runs_to_its_end(script, tmp_path):
    if script != "filtered_reads.py" and not SHARED_DATA.exists():
        pytest.skip("reads HALOGEN's released data: needs ../shared/data")
    last = run_script(script, SMALLEST[script], tmp_path)
    if script == "run.py":  # prints its records a line each
        assert last.startswith("halogen_demo_pipeline_wall_time: ")
        return
    out = json.loads(last)
    if script == "halogen_rules.py":  # counts per task, not records
        assert out and all(isinstance(c, dict) for c in out.values())
        return
    assert_records(out)
