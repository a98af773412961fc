"""The provider kinds of the backends a run serves itself (scripted, hf, vllm): each builds the
client of one deployed model, sized to its Serve options. Registered under the
``halluscope.providers`` entry-point group; kept free of Ray Serve's import, as a client only needs
a handle, looked up on first use."""

from __future__ import annotations

from halluscope.config.schema import HFModel, ScriptedModel, VLLMModel
from halluscope.models.base import SamplingParams, share_of
from halluscope.models.provider import CallLimits, Context, Endpoint, ProviderKind
from halluscope.models.registry import sampling_of
from halluscope.models.scripted import ScriptedProvider, ScriptedResponder
from halluscope.models.serve_handle import ServeHandleProvider
from halluscope.models.vllm_handle import VLLMHandleProvider

_CALL_TIMEOUT_S = 60.0  # a Serve call of a scripted deployment, unless its params say otherwise
_SLOW_DECODE_TOKENS_PER_S = 5.0  # per sequence: a floor under what a busy engine decodes for each of its sequences
_HF_CALLS_PER_REPLICA = 2  # one generating, one waiting: the replica never idles


def _endpoint(spec: ScriptedModel | HFModel | VLLMModel, context: Context) -> Endpoint:
    if context.endpoint is None:
        raise ValueError(f"model '{spec.id}': backend '{spec.backend}' is served, but no endpoint was deployed")
    return context.endpoint


def _handle(spec: ScriptedModel | HFModel, context: Context, in_flight: int, sampling: SamplingParams,
            timeout_s: float = _CALL_TIMEOUT_S) -> ServeHandleProvider:
    """A client of a ``complete_batch`` deployment; ``context.clients`` of them share ``in_flight`` calls."""
    endpoint = _endpoint(spec, context)
    # a Serve call is answered within its timeout or is retried; five calls in a row with no answer
    # from a replica mean the deployment is gone
    limits = CallLimits(calls_in_flight=share_of(in_flight, context.clients),
                    prompts_per_call=spec.params.serve.max_batch_prompts, timeout_s=timeout_s, max_retries=3,
                    backoff_max_s=10.0, breaker_threshold=5)
    return ServeHandleProvider(spec.id, endpoint.app_name, endpoint.deployment_name, limits=limits, sampling=sampling)


def _scripted(spec: ScriptedModel, context: Context) -> ScriptedProvider | ServeHandleProvider:
    """In process when the config says so; else its deployment, whose replicas each overlap all
    their ongoing requests."""
    if not spec.served:
        return ScriptedProvider(spec)
    opts = spec.params.serve
    return _handle(spec, context, opts.num_replicas * opts.max_ongoing_requests, SamplingParams(),
                   spec.params.request_timeout_s or _CALL_TIMEOUT_S)


def _hf(spec: HFModel, context: Context) -> ServeHandleProvider:
    """One call generating and one waiting per replica: a replica never idles, and no call waits in
    a queue behind more than one other."""
    return _handle(spec, context, _HF_CALLS_PER_REPLICA * spec.params.serve.num_replicas, sampling_of(spec),
                   request_timeout_s(spec))


def request_timeout_s(spec: HFModel | VLLMModel) -> float:
    """How long one whole (not streamed) answer may take: configured, or long enough for
    ``max_tokens`` at a slow per-sequence decode, as a busy engine gives each of its sequences; an
    hf call also waits for the call ahead of it on its replica, which generates a batch as long."""
    p = spec.params
    waits = _HF_CALLS_PER_REPLICA if isinstance(spec, HFModel) else 1
    return p.request_timeout_s or 60.0 + waits * p.sampling.max_tokens / _SLOW_DECODE_TOKENS_PER_S


def _vllm(spec: VLLMModel, context: Context) -> VLLMHandleProvider:
    """The engine deployment by handle, one prompt per call: no HTTP proxy needed on the caller's node."""
    endpoint = _endpoint(spec, context)
    opts = spec.params.serve
    limits = CallLimits(calls_in_flight=share_of(opts.num_replicas * opts.max_ongoing_requests, context.clients),
                    timeout_s=request_timeout_s(spec))
    return VLLMHandleProvider(spec.id, endpoint.app_name, endpoint.deployment_name, limits=limits,
                              sampling=sampling_of(spec))


SCRIPTED = ProviderKind(_scripted, predict=lambda spec: ScriptedResponder(spec.params).answer)
HF = ProviderKind(_hf)
VLLM = ProviderKind(_vllm, constrains=lambda spec: True)
