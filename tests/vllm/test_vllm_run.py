"""A halluscope run whose model under test is the tiny Llama on vLLM, deployed by the run itself."""

from __future__ import annotations

import pytest

from halluscope.config import VLLMModel, parse_config
from halluscope.pipeline.runner import run
from halluscope.serving.vllm import vllm_installed
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore
from tests.conftest import SHARED_DATA

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not vllm_installed(), reason="needs vLLM: make test-vllm"),
              pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")]


def test_code_task_generated_by_vllm(ray_local: None, tiny_spec: VLLMModel, tmp_path) -> None:
    cfg = parse_config({"storage": {"root": f"file://{tmp_path}"}, "tasks": ["halogen/code"],
                        "limits": {"max_items_per_task": 4}, "costs": {"price_table": None},
                        "models": [tiny_spec.model_dump(mode="json")]})
    from ray import serve

    try:
        result = run(cfg, run_id="vllm", progress=False)
    finally:
        serve.shutdown()  # the next test starts Serve on a port of its own
    store = RunStore(Location.from_url(f"file://{tmp_path}"), "vllm")
    gens = store.read_table("generations").to_pylist()
    assert len(gens) == 4 and all(g["text"] is not None and g["output_tokens"] > 0 for g in gens)
    m = [r for r in result.metrics if r["task"] == "halogen/code"][0]
    assert m["n_items"] == 4 and m["n_errors"] == 0
    costs = {(r["model"], r["stage"]): r for r in store.read_table_file("costs.parquet").to_pylist()}
    assert costs[("tiny-llama", "generate")]["calls"] == 4
    assert costs[("tiny-llama", "generate")]["output_tokens"] == sum(g["output_tokens"] for g in gens)
