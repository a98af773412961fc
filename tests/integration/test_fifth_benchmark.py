"""The worked example of docs/adding-a-benchmark.md: a benchmark that lives outside halluscope's
source tree (examples/capitals) is registered by its package metadata alone, and `halluscope
run` gives it a leaderboard section, report.html, costs and a manifest (resume, like the rest, is
the engine's and tested there)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "capitals"
CLI = str(Path(sys.executable).parent / "halluscope")


def _installed(site: Path) -> dict[str, str]:
    """What `pip install examples/capitals` leaves behind that matters: the package on the path
    and a dist-info whose entry_points.txt names the benchmark."""
    shutil.copytree(EXAMPLE / "capitals_bench", site / "capitals_bench")
    info = site / "halluscope_capitals-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: halluscope-capitals\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[halluscope.benchmarks]\ncapitals = capitals_bench:BENCHMARK\n")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a Ray of its own sees the path
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _halluscope(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], env=env, capture_output=True, text=True, timeout=300)


def test_a_benchmark_outside_the_package_plugs_into_the_engine(tmp_path):
    env = _installed(tmp_path / "site")
    listed = _halluscope(env, "tasks")
    assert listed.returncode == 0, listed.stderr
    assert "capitals/name_the_capital" in listed.stdout

    config = tmp_path / "run.yaml"
    # on Ray, whose workers must find the benchmark too (8 generations would run in the driver)
    config.write_text((EXAMPLE / "run.yaml").read_text() + "\nray: {in_process_below: 0}\n")
    shutil.copy(EXAMPLE / "answers.jsonl", tmp_path / "answers.jsonl")
    root = f"file://{tmp_path / 'runs'}"
    first = _halluscope(env, "run", str(config), "--run-id", "capitals", "--storage-root", root, "--quiet")
    assert first.returncode == 0, first.stderr[-3000:]
    run = tmp_path / "runs" / "capitals"
    (record,) = [r for r in json.loads((run / "metrics.json").read_text()) if r.get("benchmark") == "capitals"]
    # 8 questions; "I don't know" for Australia; Mombasa and Toronto are wrong
    assert (record["n"], record["response_ratio"], record["wrong_answer_rate"]) == (8, 7 / 8, 2 / 7)
    assert "## Capitals (worked example)" in (run / "leaderboard.md").read_text()
    assert "<h2>Capitals (worked example)</h2>" in (run / "report.html").read_text()
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["counts"]["processed"] == 8
    assert "capitals_bench/questions.csv" in manifest["data_sources"]
    # a replayed model costs nothing: the ledger is there, with no line
    assert pq.read_table(run / "costs.parquet").num_rows == 0
