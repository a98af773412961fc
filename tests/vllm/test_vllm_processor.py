"""Batch generation inside Ray Data: the ``ray.data.llm`` processor ``build_processor`` builds,
on a real vLLM CPU engine."""

from __future__ import annotations

import pytest

from halluscope.config.schema import VLLMModel
from halluscope.serving.vllm import build_processor, vllm_installed

pytestmark = [pytest.mark.vllm, pytest.mark.slow,
              pytest.mark.skipif(not vllm_installed(), reason="needs vLLM: make test-vllm")]


def test_processor_adds_text_and_token_counts(ray_local: None, smollm2: VLLMModel) -> None:
    import ray

    items = [{"item_id": f"i{n}", "prompt": f"Question {n}: who wrote Hamlet?"} for n in range(8)]
    processor = build_processor(smollm2, batch_size=4)
    rows = sorted(processor(ray.data.from_items(items)).take_all(), key=lambda r: r["item_id"])

    assert [(r["item_id"], r["prompt"]) for r in rows] == [(i["item_id"], i["prompt"]) for i in items]
    assert set(rows[0]) == {"item_id", "prompt", "text", "input_tokens", "output_tokens"}
    for r in rows:
        assert isinstance(r["text"], str)
        assert r["input_tokens"] > 0
        assert 0 < r["output_tokens"] <= smollm2.params.sampling.max_tokens
