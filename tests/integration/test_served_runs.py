"""Runs whose models this run serves with Ray Serve: scripted and a tiny transformers Llama."""

from __future__ import annotations

import pytest
from tests.conftest import SHARED_DATA
from tests.support.resolved import planned
from tests.support.tiny_llama import build_tiny_llama

from halluscope.config.load import parse_config
from halluscope.pipeline.runner import run
from halluscope.resolve.run import ResolvedRun
from halluscope.resolve.tables import cache_location
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")]

CODE_ANSWER = "```python\nimport numpy as np\nimport fakepkg_that_does_not_exist\n```"


def _scripted(model_id: str, **faults) -> dict:
    return {"id": model_id, "backend": "scripted",
            "params": {"rules": [{"pattern": "(?i)recursi", "response": "I'm sorry, I cannot help with that."},
                                 {"pattern": "Python", "response": CODE_ANSWER}],
                       "seed": 7, **faults,
                       "serve": {"num_cpus": 0.25, "max_batch_prompts": 8}}}


def _cfg(root, models, limit=40, **extra) -> dict:
    return {"storage": {"root": root}, "tasks": ["halogen/code"], "limits": {"max_items_per_task": limit},
            "models": models, "costs": {"price_table": None}, **extra}


def _rows(store: RunStore, table: str, key: str) -> list[dict]:
    """A table's rows without what differs between runs of the same answers (run id, timing)."""
    t = store.read_table(table)
    t = t.drop_columns([c for c in ("run_id", "attempts", "latency_s", "cached") if c in t.column_names])
    return sorted(t.to_pylist(), key=lambda r: r[key])


def test_faulty_endpoint_gives_the_verdicts_of_a_clean_one(ray_head, tmp_path):
    """5% errors and 2% hangs, retried: the same verdicts as a clean endpoint."""
    root = f"file://{tmp_path}"
    clean = run(ResolvedRun.of(parse_config(_cfg(root, [_scripted("m")], cache={"enabled": False}))), run_id="clean",
                progress=False)
    faulty = run(ResolvedRun.of(parse_config(_cfg(root, [_scripted("m", error_rate=0.05, timeout_rate=0.02)],
                                   cache={"enabled": False}))), run_id="faulty", progress=False)
    a, b = (RunStore(Location.from_url(root), r) for r in ("clean", "faulty"))
    assert _rows(a, "verdicts", "atom_id") == _rows(b, "verdicts", "atom_id")
    assert _rows(a, "scores", "gen_id") == _rows(b, "scores", "gen_id")
    retried = [g for g in b.read_table("generations").to_pylist() if g["attempts"] > 1]
    assert retried, "the fault injection never fired"
    m = [r for r in faulty.metrics if r["task"] == "halogen/code"][0]
    assert m["n_errors"] == 0 and m["n_items"] == 40 == clean.metrics[0]["n_items"]
    assert 0 < m["response_ratio"] < 1  # the abstain pattern matched some prompts


def test_calls_failing_past_retries_are_errors_never_scores(ray_head, tmp_path):
    root = f"file://{tmp_path}"
    result = run(ResolvedRun.of(parse_config(_cfg(root, [_scripted("always-down", error_rate=1.0)], limit=10,
                                   cache={"enabled": False}))), run_id="down", progress=False)
    m = [r for r in result.metrics if r["task"] == "halogen/code"][0]
    assert m["n_items"] == 0 and m["n_errors"] == 10 and m["hallucination_score"] is None
    scores = RunStore(Location.from_url(root), "down").read_table("scores").to_pylist()
    assert all(s["error"] and s["responded"] is None and s["f"] is None for s in scores)


def test_tiny_llama_served_by_serve_then_cached(ray_head, tmp_path):
    model_dir = build_tiny_llama(tmp_path / "tiny")
    root = f"file://{tmp_path}/runs"
    hf = {"id": "tiny-llama", "backend": "hf",
          "params": {"model_source": str(model_dir), "sampling": {"max_tokens": 16},
                     "serve": {"num_cpus": 0.5, "max_batch_prompts": 4}}}
    first = run(ResolvedRun.of(parse_config(_cfg(root, [hf], limit=8))), run_id="tiny", progress=False)
    store = RunStore(Location.from_url(root), "tiny")
    gens = store.read_table("generations").to_pylist()
    assert len(gens) == 8 and all(g["text"] is not None and g["output_tokens"] > 0 for g in gens)
    assert not any(g["cached"] for g in gens)
    costs = {(r["model"], r["stage"]): r for r in store.read_table_file("costs.parquet").to_pylist()}
    assert costs[("tiny-llama", "generate")]["calls"] == 8
    assert costs[("tiny-llama", "serve")]["resource"] == "CPU" and costs[("tiny-llama", "serve")]["resource_seconds"] > 0
    # the same run id again: nothing left to do
    assert run(ResolvedRun.of(parse_config(_cfg(root, [hf], limit=8))), run_id="tiny", progress=False).processed == 0
    # a new run id: every answer from the call cache, so the plan schedules no deployment and the
    # run deploys none; zero model calls, identical scores
    cfg = parse_config(_cfg(root, [hf], limit=8))
    estimate = planned(cfg, None, cache=cache_location(cfg))
    assert not estimate.schedule.windows and not [r for r in estimate.rows if r.stage == "idle"]
    second = run(ResolvedRun.of(cfg), run_id="tiny-2", progress=False)
    store2 = RunStore(Location.from_url(root), "tiny-2")
    assert all(g["cached"] for g in store2.read_table("generations").to_pylist())
    assert not store2.read_json("manifest.json").get("schedule", {}).get("deployments")
    assert [r for r in second.metrics if r["task"] == "costs/total"][0]["calls"] == 0
    assert ("tiny-llama", "serve") not in {(r["model"], r["stage"]) for r in store2.read_table_file("costs.parquet").to_pylist()}
    assert _rows(store, "scores", "gen_id") == _rows(store2, "scores", "gen_id")
    assert first.metrics[0]["n_items"] == second.metrics[0]["n_items"] == 8
