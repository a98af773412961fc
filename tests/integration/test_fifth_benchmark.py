"""The worked example of docs/adding-a-benchmark.md: a benchmark that lives outside halluscope's
source tree (examples/capitals) is registered by its package metadata alone, and `halluscope
run` gives it a leaderboard section, report.html, costs and a manifest (resume, like the rest, is
the engine's and tested there)."""

from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
from tests.support.plugins import CAPITALS, EXAMPLES, env_with, halluscope, install, run_capitals

EXAMPLE = EXAMPLES / "capitals"


def test_a_benchmark_outside_the_package_plugs_into_the_engine(tmp_path):
    install(tmp_path / "site", *CAPITALS)
    env = env_with(tmp_path / "site")
    listed = halluscope(env, "tasks")
    assert listed.returncode == 0, listed.stderr
    assert "capitals/name_the_capital" in listed.stdout

    config = tmp_path / "run.yaml"
    # on Ray, whose workers must find the benchmark too (8 generations would run in the driver)
    config.write_text((EXAMPLE / "run.yaml").read_text() + "\nray: {in_process_below: 0}\n")
    shutil.copy(EXAMPLE / "answers.jsonl", tmp_path / "answers.jsonl")
    run, record = run_capitals(env, config, "capitals", tmp_path / "runs")
    # 8 questions; "I don't know" for Australia; Mombasa and Toronto are wrong
    assert (record["n"], record["response_ratio"], record["wrong_answer_rate"]) == (8, 7 / 8, 2 / 7)
    assert "## Capitals (worked example)" in (run / "leaderboard.md").read_text()
    assert "<h2>Capitals (worked example)</h2>" in (run / "report.html").read_text()
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["counts"]["processed"] == 8
    assert "capitals_bench/questions.csv" in manifest["data_sources"]
    # a replayed model costs nothing: the ledger is there, with no line
    assert pq.read_table(run / "costs.parquet").num_rows == 0
