"""The client factory: the backend every stage and job calls for a live (non-replay) model."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from halluscope.config.schema import ModelSpec, ScriptedModel
from halluscope.models.base import ModelBackend, SamplingParams, share_of
from halluscope.models.cache import CachedBackend

if TYPE_CHECKING:
    from halluscope.storage.fs import Location


class Endpoint(Protocol):
    """A deployment this run serves (serving.app.ServedEndpoint): named here, as serving/ sits above
    models/ and builds the client of its own kinds of deployment."""

    model_id: str
    app_name: str
    deployment_name: str

    def backend(self, spec: ModelSpec, clients: int = 1) -> ModelBackend: ...


def sampling_of(spec: ModelSpec) -> SamplingParams:
    s = spec.params.sampling if hasattr(spec.params, "sampling") else None
    return SamplingParams(temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_tokens) if s else SamplingParams()


def live_backend(spec: ModelSpec, endpoint: Endpoint | None = None, clients: int = 1) -> ModelBackend:
    """openai: the configured base_url; scripted in process: answered right here; vllm: a
    DeploymentHandle on the engine deployment of the app this run deployed, one prompt per request;
    scripted/hf: a DeploymentHandle, several prompts per request. ``clients``: how many clients of
    this model the run runs at once (one per Evaluate actor for a role model); each keeps its share
    of the endpoint's capacity in flight."""
    from halluscope.models.openai_http import OpenAIBackend

    if isinstance(spec, ScriptedModel) and not spec.served:
        from halluscope.models.scripted import ScriptedBackend

        return ScriptedBackend(spec)
    if spec.backend == "openai":
        p = spec.params
        return OpenAIBackend(model_id=spec.id, base_url=p.base_url, model=p.model, api_key_env=p.api_key_env,
                             max_concurrency=share_of(p.max_concurrency, clients), timeout_s=p.timeout_s,
                             max_retries=p.max_retries,
                             sampling=sampling_of(spec), structured_output=p.structured_output)
    if endpoint is None:
        raise ValueError(f"model '{spec.id}': backend '{spec.backend}' is served, but no endpoint was deployed")
    if spec.backend == "vllm":  # the engine deployment by handle: no HTTP proxy needed on the caller's node
        from halluscope.models.vllm_handle import VLLMHandleBackend

        opts = spec.params.serve
        return VLLMHandleBackend(spec.id, endpoint.app_name, endpoint.deployment_name,
                                 max_concurrency=share_of(opts.num_replicas * opts.max_ongoing_requests, clients),
                                 sampling=sampling_of(spec))
    return endpoint.backend(spec, clients)  # serving/ sits above models/: the endpoint builds its own client


def revision_of(spec: ModelSpec) -> str | None:
    return getattr(spec.params, "revision", None)


def client(spec: ModelSpec, endpoints: dict, cache: Location | None, template: str) -> ModelBackend:
    """The model's backend, answering from the call cache first when there is one. ``template``
    names the prompt template, so a change of wording never reuses old answers."""
    backend = live_backend(spec, endpoints.get(spec.id))
    if cache is None:
        return backend
    return CachedBackend(backend, cache, revision_of(spec), template, sampling_of(spec).as_dict())
