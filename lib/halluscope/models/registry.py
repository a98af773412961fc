"""Builds the backend the pipeline calls for a live (non-replay) model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from halluscope.config import ModelSpec
from halluscope.models.base import ModelBackend, SamplingParams

if TYPE_CHECKING:
    from halluscope.serving.app import ServedEndpoint


def sampling_of(spec: ModelSpec) -> SamplingParams:
    s = spec.params.sampling if hasattr(spec.params, "sampling") else None
    return SamplingParams(temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_tokens) if s else SamplingParams()


def live_backend(spec: ModelSpec, endpoint: "ServedEndpoint | None" = None) -> ModelBackend:
    """openai: the configured base_url; vllm: the Serve OpenAI route this run deployed;
    scripted/hf: a DeploymentHandle, several prompts per request."""
    from halluscope.models.openai_http import OpenAIBackend

    if spec.backend == "openai":
        p = spec.params
        return OpenAIBackend(model_id=spec.id, base_url=p.base_url, model=p.model, api_key_env=p.api_key_env,
                             max_concurrency=p.max_concurrency, timeout_s=p.timeout_s, max_retries=p.max_retries,
                             sampling=sampling_of(spec))
    if endpoint is None:
        raise ValueError(f"model '{spec.id}': backend '{spec.backend}' is served, but no endpoint was deployed")
    if spec.backend == "vllm":
        return OpenAIBackend(model_id=spec.id, base_url=endpoint.base_url, model=spec.id,
                             max_concurrency=spec.params.serve.max_ongoing_requests, sampling=sampling_of(spec))
    from halluscope.serving.app import handle_backend

    return handle_backend(spec, endpoint)


def revision_of(spec: ModelSpec) -> str | None:
    return getattr(spec.params, "revision", None)
