"""The vllm backend end to end on one engine for the module: Ray Serve runs the app
``build_application`` builds, on a real vLLM CPU engine serving SmolLM2; halluscope's OpenAI provider
calls it at the Serve OpenAI route, the run's client (the vllm provider) calls its engine deployment
by handle from a Ray task, and a run asks it as the model under test and, held to vLLM's structured
outputs, as the judge. An engine start is most of such a test's time on 2 cores, so the checks share
one (the run deploying engines of its own is tests/vllm/test_vllm_run.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

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
from halluscope.resolve.run import ResolvedRun
from halluscope.serving.app import ServedEndpoint
from halluscope.serving.vllm import build_application, vllm_installed
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore

pytestmark = [pytest.mark.vllm, pytest.mark.slow,
              pytest.mark.skipif(not vllm_installed(), reason="needs vLLM: make test-vllm")]

PROMPTS = ["Who wrote Hamlet?", "What is the capital of France?", "Name a large ocean.",
           "Who wrote Hamlet?"]


@pytest.fixture(scope="module")
def engine(ray_local: None, smollm2: VLLMModel) -> Iterator[tuple[VLLMModel, ServedEndpoint]]:
    """The model served once for the module."""
    from ray import serve

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        serve.run(build_application(smollm2), name="smollm2", route_prefix="/smollm2")
        # the engine deployment behind the OpenAI ingress: what the run's client calls by handle
        (server,) = [d for d in serve.status().applications["smollm2"].deployments if d.startswith("LLMServer:")]
        yield smollm2, ServedEndpoint(smollm2.id, "smollm2", server, f"http://127.0.0.1:{port}/smollm2/v1")
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
    answers = by_handle
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

    from halluscope.serving.served import placement

    spec, _ = engine
    (bundles,) = [p["bundles"] for p in ray.util.placement_group_table().values() if p["state"] == "CREATED"]
    assert placement(spec) == ("CPU", 2.0) and bundles == {0: {"CPU": 2.0}}
    # and the ingress, outside the group, none (a task of the test before may still hold its 0.1)
    assert ray.cluster_resources()["CPU"] - ray.available_resources().get("CPU", 0.0) < 2.5


def _by_handle_in_a_task(spec: VLLMModel, endpoint: ServedEndpoint, requests: list[GenerationRequest]) -> list:
    """The run's client of a vllm model, pickled to a Ray task as the generation task gets it."""
    import ray

    backend = client(spec, Context(endpoint), None, "t")
    assert isinstance(backend, Model) and isinstance(backend.provider, VLLMHandleProvider)
    # one client, one replica
    assert backend.provider.limits.calls_in_flight == spec.params.serve.max_ongoing_requests

    @ray.remote(num_cpus=0.1)
    def generate(b: Model, rs: list[GenerationRequest]) -> list:
        return b.generate_batch(rs)

    return ray.get(generate.remote(backend, requests), timeout=300)


ENGLISH = {"the", "a", "an", "to", "of", "and", "is", "in", "you", "your", "for", "with", "this", "it", "can",
           "import", "use", "here", "that", "are", "be"}


def _english(text: str) -> bool:
    """Mostly ASCII and at least one common English word (a random model's tokens are neither)."""
    words = set(re.findall(r"[a-z]+", text.lower()))
    return bool(text) and sum(c.isascii() for c in text) >= 0.9 * len(text) and bool(words & ENGLISH)


@pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")
def test_a_run_of_the_real_model_answers_in_english_is_judged_readably_counts_its_tokens_and_caches(
        engine: tuple[VLLMModel, ServedEndpoint], tmp_path) -> None:
    """The model under test and the judge are the served SmolLM2 (a user's vLLM server, reached at its
    OpenAI route): HALOGEN code and its corrected-rule twin (the same prompts: one generation call per
    item, both tasks score the same text) and historical events under the corrected rules, whose judge
    is held to "Yes" or "No". The token counts are the tokenizer's, and a second run is answered by the
    call cache alone, with the same scores."""
    spec, endpoint = engine
    served = {"base_url": endpoint.base_url, "model": spec.id, "max_retries": 1}
    tasks = ["halogen/code", "halogen/code@corrected", "halogen/historical_events@corrected"]
    raw = {"storage": {"root": f"file://{tmp_path}"}, "tasks": tasks, "limits": {"max_items_per_task": 4},
           "costs": {"price_table": None},
           "models": [{"id": "smollm2-under-test", "backend": "openai",
                       "params": {**served, "sampling": {"max_tokens": 48, "temperature": 0.0}}},
                      {"id": "smollm2-judge", "role": "judge", "backend": "openai",
                       "params": {**served, "structured_output": "vllm", "sampling": {"max_tokens": 8}}}]}
    runs = {rid: run(ResolvedRun.of(parse_config(raw)), run_id=rid, progress=False) for rid in ("first", "again")}
    stores = {rid: RunStore(Location.from_url(f"file://{tmp_path}"), rid) for rid in runs}

    gens = stores["first"].read_table("generations").to_pylist()
    assert len(gens) == 12 and [g for g in gens if g["error"]] == []
    assert all(_english(g["text"]) for g in gens), [g["text"] for g in gens]
    by_task = {t: sorted(g["text"] for g in gens if g["task"] == t) for t in tasks}
    assert by_task["halogen/code"] == by_task["halogen/code@corrected"]
    prompts = {(t, i["item_id"]): i["prompt"] for t in tasks for i in stores["first"].read_items(t).to_pylist()}
    _assert_tokenizer_counts(spec, [{**g, "prompt": prompts[(g["task"], g["item_id"])]} for g in gens])

    scores = stores["first"].read_table("scores").to_pylist()
    assert len(scores) == 12 and [s["error"] for s in scores] == [None] * 12  # no unreadable verdict
    judged = [c for c in stores["first"].read_table("role_calls").to_pylist() if c["role_model"] == "smollm2-judge"]
    assert judged and all(c["failed_calls"] == 0 for c in judged)
    assert all(s["responded"] is not None for s in scores if s["task"] == "halogen/historical_events@corrected")

    costs = {rid: {(r["model"], r["stage"], r["task"]): r for r in s.read_table_file("costs.parquet").to_pylist()}
             for rid, s in stores.items()}
    first_code = costs["first"][("smollm2-under-test", "generate", "halogen/code")]
    twin = costs["first"][("smollm2-under-test", "generate", "halogen/code@corrected")]
    assert (first_code["calls"], twin["calls"], twin["cached_calls"]) == (4, 0, 4)
    again = [r for r in costs["again"].values() if r["stage"] in ("generate", "abstain")]
    assert again and all(r["calls"] == 0 and r["cached_calls"] > 0 for r in again), again
    assert _metrics(runs["again"].metrics, tasks) == _metrics(runs["first"].metrics, tasks)


def _assert_tokenizer_counts(spec: VLLMModel, gens: list[dict]) -> None:
    """Prompt tokens: the chat template's; answer tokens: the answer's, plus the end-of-text token
    the engine counts when the answer ended there rather than at max_tokens."""
    from transformers import AutoTokenizer

    from halluscope.serving.weights import local_weights

    tokenizer = AutoTokenizer.from_pretrained(local_weights(spec).params.model_source)
    for g in gens:
        chat = tokenizer.apply_chat_template([{"role": "user", "content": g["prompt"]}], add_generation_prompt=True,
                                             tokenize=False)
        assert g["input_tokens"] == _count(tokenizer, chat), g["item_id"]
        answer = _count(tokenizer, g["text"])
        assert g["output_tokens"] - answer in (0, 1), (g["item_id"], g["output_tokens"], answer)


def _count(tokenizer: Any, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def _metrics(records: list[dict], tasks: list[str]) -> list[str]:
    """The benchmark's records of these tasks (a run's cost records differ: the second paid nothing)."""
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in records if r["task"] in tasks)


def test_the_engines_speed_is_measured_as_a_throughput_row(engine: tuple[VLLMModel, ServedEndpoint]) -> None:
    """`halluscope calibrate --throughput`'s loads on the real engine: as many calls as the
    deployment takes at once (8), a prefill of distinct long prompts and a decode of the run's
    prompts, into the CPU row of a table the plan reads."""
    from halluscope.pipeline.engine_speed import DECODE_TOKENS, hardware, measure_deployed, with_measured_row
    from halluscope.serving.served import busy_seconds, placement
    from halluscope.serving.throughput import PlanOptions
    from halluscope.serving.vllm import engine_kwargs

    spec, endpoint = engine
    speed = measure_deployed(spec, endpoint, PROMPTS, deploy_s=30.0)
    assert speed.calls == 8 and speed.prefill_tokens > 8 * 200  # 200 made-up words each
    assert 8 <= speed.decode_output_tokens <= 8 * min(DECODE_TOKENS, 24)
    # a relation, not a speed: an engine takes in a prompt's tokens faster than it writes its own on any
    # machine, and the rates themselves are this machine's (SmolLM2 on 2 AMD EPYC cores: 610-700 and
    # 150-270 tokens/s). A CPU engine computing bfloat16 without the instructions for it was the case
    # where this failed (38 against 540): the product now runs it in float32 there (serving/vllm.py)
    assert speed.prefill_tokens_per_s > speed.decode_tokens_per_s > 0, (
        f"prefill {speed.prefill_tokens_per_s:.0f} tokens/s, decode {speed.decode_tokens_per_s:.0f} on "
        f"{hardware('CPU')} in {engine_kwargs(spec).get('dtype')}: the engine's speeds on this machine, not "
        f"targets; a prefill slower than decode means the engine computes in a dtype this CPU emulates: {speed}")
    assumed = PlanOptions()
    table = with_measured_row(assumed.table_or_raise(), spec, speed, assumed, "2026-11-28")
    assert table.measured["CPU"].model == "smollm2" and "cores" in table.measured["CPU"].hardware
    # planned with the row, the decode load takes the time it took: resource-seconds over the units held
    seconds, _ = busy_seconds(spec, 8, speed.decode_input_tokens, speed.decode_output_tokens, PlanOptions(table=table))
    _, units = placement(spec)
    assert abs(seconds / units - speed.decode_s) < 1e-6 * speed.decode_s
