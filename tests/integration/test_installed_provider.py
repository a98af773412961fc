"""The worked example of a model provider outside halluscope's source tree
(examples/canned_provider): registered by its package metadata alone, its config validated by its
own params model, its calls made through the engine's model (the retry of a busy answer, the
call count the ledger reads). Run in the driver; a provider's module reaches Ray workers the way a
benchmark's does (test_fifth_benchmark)."""

from __future__ import annotations

import shutil

import pyarrow.parquet as pq
from tests.support.plugins import CANNED, CAPITALS, EXAMPLES, env_with, halluscope, install, run_capitals


def test_a_provider_outside_the_package_answers_a_run(tmp_path):
    site = tmp_path / "site"
    install(site, *CAPITALS)
    install(site, *CANNED)
    env = env_with(site)
    config = tmp_path / "run.yaml"
    shutil.copy(EXAMPLES / "canned_provider" / "run.yaml", config)
    run, record = run_capitals(env, config, "canned", tmp_path / "runs")
    # 8 questions; France, Japan and Kenya have replies (Mombasa is wrong), the rest "I don't know"
    assert (record["n"], record["response_ratio"], record["wrong_answer_rate"]) == (8, 3 / 8, 1 / 3)
    gens = pq.read_table(run / "generations").to_pylist()
    # every first attempt was answered "busy": the engine's model tried each prompt again
    assert len(gens) == 8 and {g["attempts"] for g in gens} == {2} and {g["error"] for g in gens} == {None}
    costs = pq.read_table(run / "costs.parquet").to_pylist()
    assert [(c["model"], c["stage"], c["calls"], c["usd"]) for c in costs] == [("canned-model", "generate", 8, 0.0)]


def test_a_provider_checks_its_own_params_when_the_config_is_read(tmp_path):
    site = tmp_path / "site"
    install(site, *CAPITALS)
    install(site, *CANNED)
    config = tmp_path / "run.yaml"
    config.write_text((EXAMPLES / "canned_provider" / "run.yaml").read_text().replace("busy_first", "busy_frist"))
    out = halluscope(env_with(site), "plan", str(config))
    assert out.returncode != 0
    assert "models.0.installed.busy_frist" in out.stderr and "Extra inputs are not permitted" in out.stderr, out.stderr
