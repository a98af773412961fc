"""The vllm backend end to end: Ray Serve runs the app ``build_application`` builds, on a real
vLLM CPU engine; halluscope's OpenAIBackend calls it at the Serve OpenAI route, and the run's
client, VLLMHandleBackend, calls its engine deployment by handle from a Ray task."""

from __future__ import annotations

import httpx
import pytest
from tests.support.servers import free_port

from halluscope.config.schema import VLLMModel
from halluscope.models.base import GenerationRequest
from halluscope.models.openai_http import OpenAIBackend
from halluscope.models.registry import live_backend, sampling_of
from halluscope.models.vllm_handle import VLLMHandleBackend
from halluscope.serving.app import ServedEndpoint
from halluscope.serving.vllm import build_application, vllm_installed

pytestmark = [pytest.mark.vllm, pytest.mark.slow,
              pytest.mark.skipif(not vllm_installed(), reason="needs vLLM: make test-vllm")]

PROMPTS = ["Who wrote Hamlet?", "What is the capital of France?", "Name a large ocean.",
           "Who wrote Hamlet?"]


def test_openai_route_answers_with_token_counts(ray_local: None, tiny_spec: VLLMModel) -> None:
    from ray import serve

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        ingress = serve.run(build_application(tiny_spec), name="tiny-llama", route_prefix="/tiny-llama")
        base_url = f"http://127.0.0.1:{port}/tiny-llama/v1"

        listed = httpx.get(f"{base_url}/models", timeout=30).json()
        assert [m["id"] for m in listed["data"]] == [tiny_spec.id]

        backend = OpenAIBackend(model_id=tiny_spec.id, base_url=base_url, max_retries=0,
                                sampling=sampling_of(tiny_spec))
        requests = [GenerationRequest(task="t", item_id=str(i), prompt=p) for i, p in enumerate(PROMPTS)]
        completions = backend.generate_batch(requests)
        by_handle = _by_handle_in_a_task(tiny_spec, ServedEndpoint(tiny_spec.id, "tiny-llama",
                                                                   ingress.deployment_name, base_url), requests)
    finally:
        serve.shutdown()

    assert [c.error for c in completions] == [None] * len(PROMPTS)
    for c in completions:
        assert isinstance(c.text, str)
        assert c.input_tokens > 0
        assert 0 < c.output_tokens <= tiny_spec.params.sampling.max_tokens
    # greedy decoding (temperature 0) of the same prompt gives the same answer
    assert completions[0].text == completions[3].text
    # by handle, from a Ray worker: the same chat request (so the same prompt tokens), no HTTP
    name, answers = by_handle
    assert name == "LLMServer:tiny-llama"
    assert [c.error for c in answers] == [None] * len(PROMPTS)
    assert [c.input_tokens for c in answers] == [c.input_tokens for c in completions]
    assert all(isinstance(c.text, str) and 0 < c.output_tokens <= tiny_spec.params.sampling.max_tokens
               for c in answers)
    assert answers[0].text == answers[3].text


def _by_handle_in_a_task(spec: VLLMModel, endpoint: ServedEndpoint, requests: list[GenerationRequest]
                         ) -> tuple[str | None, list]:
    """The run's client of a vllm model, pickled to a Ray task as the generation task gets it."""
    import ray

    backend = live_backend(spec, endpoint)
    assert isinstance(backend, VLLMHandleBackend)
    assert backend.max_concurrency == spec.params.serve.max_ongoing_requests  # one client, one replica

    @ray.remote(num_cpus=0.1)
    def generate(b: VLLMHandleBackend, rs: list[GenerationRequest]) -> tuple[str | None, list]:
        answers = b.generate_batch(rs)
        return b.deployment_name, answers  # the engine deployment the worker looked up

    return ray.get(generate.remote(backend, requests), timeout=300)
