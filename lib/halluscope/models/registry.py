"""Builds the backend of a live (non-replay) model from its spec."""

from __future__ import annotations

from halluscope.config import ModelSpec
from halluscope.models.base import ModelBackend, SamplingParams


def live_backend(spec: ModelSpec) -> ModelBackend:
    if spec.backend == "openai":
        from halluscope.models.openai_http import OpenAIBackend

        p = spec.params
        return OpenAIBackend(model_id=spec.id, base_url=p.base_url, model=p.model, api_key_env=p.api_key_env,
                             max_concurrency=p.max_concurrency, timeout_s=p.timeout_s, max_retries=p.max_retries,
                             sampling=SamplingParams(temperature=p.sampling.temperature, top_p=p.sampling.top_p,
                                                     max_tokens=p.sampling.max_tokens))
    raise ValueError(f"model '{spec.id}': backend '{spec.backend}' has no live client")
