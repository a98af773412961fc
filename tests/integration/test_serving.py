"""Serve deployments of scripted and hf models on a real Ray head: handle API, OpenAI HTTP API,
fault injection with retries, the circuit breaker, and a tiny local Llama."""

from __future__ import annotations

import os
import pickle
import threading
import time
from typing import Any

import httpx
import pytest
from tests.support.models import limited, openai_model
from tests.support.servers import free_port
from tests.support.tiny_llama import build_tiny_llama

from halluscope.config.schema import HFModel, ModelSpec, ScriptedModel
from halluscope.errors import EndpointDown, HalluscopeError
from halluscope.models.base import GenerationRequest, SamplingParams
from halluscope.models.model import Model
from halluscope.models.registry import Context, provider
from halluscope.models.scripted import ScriptedResponder, fault_draw, judge_parts
from halluscope.serving.app import ServedEndpoint, app_name_for, deploy, deploy_over_http, shutdown

pytestmark = pytest.mark.slow

# Small CPU shares, so these replicas fit beside whatever else the shared head runs.
SMALL = {"num_cpus": 0.25, "max_batch_prompts": 4}

SCRIPTED = ScriptedModel.model_validate({
    "id": "judge/scripted v1", "backend": "scripted",
    "params": {
        "rules": [{"pattern": r"capital of France", "response": "Paris"},
                  {"pattern": r"(?i)hello", "response": "Hello to you too"}],
        "abstain_patterns": [r"(?i)secret"],
        "support_on_overlap": 0.6,
        "default": "I don't know.",
        "serve": SMALL,
    },
})
FLAKY = ScriptedModel.model_validate({
    "id": "flaky", "backend": "scripted",
    "params": {"rules": [{"pattern": "^q", "response": "ok"}], "error_rate": 0.3, "timeout_rate": 0.05,
               "latency_s": 0.05, "seed": 7, "serve": SMALL},
})
DOOMED = ScriptedModel.model_validate({
    "id": "doomed", "backend": "scripted",
    "params": {"default": "still here", "latency_s": 0.3, "serve": {**SMALL, "max_batch_prompts": 2}},
})

# prompt -> expected answer, covering every rule of SCRIPTED in order of precedence
CASES = {
    "What is the capital of France? Hello!": "Paris",          # first rule wins over the second
    "hello, who are you?": "Hello to you too",
    "Tell me a secret about the capital of Spain": "I'm sorry, I cannot answer that.",
    "Evidence: The moon orbits the Earth every 27 days.\nClaim: The moon orbits the Earth.\nYes or No?": "Yes",
    "Claim: Mars has two moons called Phobos and Deimos.\nEvidence: Mars is a red planet.": "No",
    "Premise: a cat sat on the mat\nHypothesis: the cat sat": "Yes",
    "Claim: a claim without any evidence": "I don't know.",
    "What is the boiling point of water?": "I don't know.",
}


def _requests(prompts: list[str]) -> list[GenerationRequest]:
    return [GenerationRequest(task="t", item_id=str(i), prompt=p) for i, p in enumerate(prompts)]


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory):
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def hf_spec(tiny_llama_dir) -> HFModel:
    return HFModel.model_validate({
        "id": "tiny-llama", "backend": "hf",
        "params": {"model_source": str(tiny_llama_dir), "sampling": {"max_tokens": 8},
                   "serve": {"num_cpus": 0.5, "max_batch_prompts": 4}},
    })


@pytest.fixture(scope="module")
def endpoints(ray_head, hf_spec):
    """All apps of this module, deployed at once (Serve starts them in parallel)."""
    import ray
    from ray import serve

    if not ray.is_initialized():
        ray.init(address=os.environ["RAY_ADDRESS"])
    serve.shutdown()  # a Serve an earlier test's run started has no HTTP proxy
    started = time.perf_counter()
    eps = deploy_over_http([SCRIPTED, FLAKY, DOOMED, hf_spec], http_port=free_port())
    print(f"deployed {len(eps)} apps in {time.perf_counter() - started:.1f} s")
    try:
        yield eps
    finally:
        shutdown(eps)
        serve.shutdown()



def handle_backend(spec: ModelSpec, ep: ServedEndpoint, **limits: Any) -> Model:
    """The client a run makes of a deployed model (its registered provider), with these limits."""
    return limited(provider(spec, Context(ep)), **limits)  # type: ignore[arg-type]

def test_scripted_rules_offline():
    responder = ScriptedResponder(SCRIPTED.params)
    assert {p: responder.answer(p) for p in CASES} == CASES
    assert judge_parts("Claim: x y\nEvidence: y z\nAnswer:") == ("x y", " y z\nAnswer:")
    # faults are per attempt: the same prompt gets fresh draws on later attempts, reproducibly
    draws = [fault_draw(7, "q", a) for a in range(20)]
    assert draws == [fault_draw(7, "q", a) for a in range(20)] and len(set(draws)) == 20
    assert all(0 <= d < 1 for d in draws)


def test_a_runs_apps_are_named_under_its_run_id():
    """Two runs on one Ray cluster serving the same model id deploy, and delete, apps of their own."""
    assert app_name_for("judge/scripted v1") == "judge-scripted-v1"  # `halluscope serve`: the model alone
    assert app_name_for("judge/scripted v1", "run-1") == "run-1--judge-scripted-v1"
    assert app_name_for("judge/scripted v1", "run 2") != app_name_for("judge/scripted v1", "run-1")


def test_a_serve_a_run_starts_has_no_proxy_and_refuses_to_serve_over_http(ray_head):
    """A run calls its models by handle: the Serve it starts runs no HTTP proxy (one per node by
    Serve's default), its apps have no route, and serving over HTTP on that Serve says why not."""
    import ray
    from ray import serve

    if not ray.is_initialized():
        ray.init(address=os.environ["RAY_ADDRESS"])
    serve.shutdown()
    eps = deploy([SCRIPTED], scope="run-1")
    try:
        assert eps[SCRIPTED.id].base_url is None and serve.status().proxies == {}
        out = handle_backend(SCRIPTED, eps[SCRIPTED.id]).generate_batch(_requests(["What is the capital of France?"]))
        assert [c.text for c in out] == ["Paris"]
        with pytest.raises(HalluscopeError, match=r"Serve already runs on this Ray cluster without HTTP proxies"):
            deploy_over_http([FLAKY], http_port=free_port())
    finally:
        shutdown(eps)
        serve.shutdown()


def test_endpoints_are_loopback_apps(endpoints):
    scripted = endpoints[SCRIPTED.id]
    assert isinstance(scripted, ServedEndpoint)
    assert scripted.app_name == "judge-scripted-v1" and scripted.deployment_name == "scripted"
    assert scripted.base_url.startswith("http://127.0.0.1:") and scripted.base_url.endswith("/judge-scripted-v1/v1")
    assert endpoints["tiny-llama"].deployment_name == "hf"


def test_the_states_the_schedule_reads_are_what_serve_reports(endpoints):
    """``states`` reads the controller's statuses, not ``serve.status()``: the same status and
    messages for each app, and GONE for an app Serve does not have."""
    from ray import serve

    from halluscope.serving.app import states

    apps = serve.status().applications
    gone = ServedEndpoint("gone", "no-such-app", "scripted", "http://127.0.0.1:1/no-such-app/v1")
    read = states([*endpoints.values(), gone])
    assert read.pop("gone") == ("GONE", "")
    assert read == {m: (apps[e.app_name].status, apps[e.app_name].message) for m, e in endpoints.items()}
    assert {status for status, _ in read.values()} == {"RUNNING"}


def test_scripted_answers_via_handle_and_http(endpoints):
    ep = endpoints[SCRIPTED.id]
    prompts = list(CASES) * 3  # 24 asks of 8 prompts: each sent once (in chunks of 4), its repeats share it
    backend = handle_backend(SCRIPTED, ep, timeout_s=10)
    out = backend.generate_batch(_requests(prompts))
    assert [c.text for c in out] == [CASES[p] for p in prompts]
    assert all(c.error is None for c in out)
    assert [c.attempts for c in out] == [1] * len(CASES) + [0] * (2 * len(CASES))
    assert [(c.input_tokens, c.output_tokens) for c in out] == [(len(p.split()), len(CASES[p].split()))
                                                                for p in prompts]

    # picklable once used, and usable from a Ray worker that looks up its own handle
    import ray

    clone = pickle.loads(pickle.dumps(backend))
    assert clone.provider._handle is None
    in_worker = ray.remote(num_cpus=0.1)(lambda b, reqs: b.generate_batch(reqs))  # a lambda pickles by value
    remote_out = ray.get(in_worker.remote(clone, _requests(prompts[:5])))
    assert [c.text for c in remote_out] == [CASES[p] for p in prompts[:5]]

    http = openai_model(model_id=SCRIPTED.id, base_url=ep.base_url, timeout_s=10, max_retries=0)
    via_http = http.generate_batch(_requests(list(CASES)))
    assert [c.text for c in via_http] == list(CASES.values())
    assert [(c.input_tokens, c.output_tokens) for c in via_http] == [(len(p.split()), len(a.split()))
                                                                     for p, a in CASES.items()]
    with httpx.Client(base_url=ep.base_url, timeout=10) as client:
        models = client.get("/models").json()
        assert [m["id"] for m in models["data"]] == [SCRIPTED.id]
        body = client.post("/completions", json={"model": SCRIPTED.id, "prompt": ["hello", "unknown"]}).json()
        assert [c["text"] for c in body["choices"]] == ["Hello to you too", "I don't know."]
        assert body["usage"] == {"prompt_tokens": 2, "completion_tokens": 7, "total_tokens": 9}
        bad = client.post("/chat/completions", json={"messages": [{"role": "system", "content": "x"}]})
        assert bad.status_code == 400 and "no user message" in bad.json()["error"]["message"]


def test_injected_faults_are_retried_to_success(endpoints):
    ep = endpoints[FLAKY.id]
    prompts = [f"q{i}" for i in range(60)]
    # a drawn hang costs one timeout; 2 s was too short once the machine stalled beside an engine's
    # start: every call in flight timed out together and the breaker (10 in a row) tripped
    timeout_s = 5
    backend = handle_backend(FLAKY, ep, timeout_s=timeout_s, max_retries=8, backoff_base_s=0.05)
    started = time.perf_counter()
    out = backend.generate_batch(_requests(prompts))
    elapsed = time.perf_counter() - started
    assert [c.text for c in out] == ["ok"] * 60, [c.error for c in out if c.error]
    assert max(c.attempts for c in out) > 1  # some prompts did fail first
    print(f"60 prompts with 30% errors and 5% hangs: {elapsed:.1f} s, "
          f"{sum(c.attempts for c in out)} prompt attempts")

    # over HTTP a failed call is a 503, which the OpenAI client retries
    codes = set()
    with httpx.Client(base_url=ep.base_url, timeout=timeout_s) as client:
        for i in range(12):
            try:
                codes.add(client.post("/chat/completions",
                                      json={"messages": [{"role": "user", "content": f"r{i}"}]}).status_code)
            except httpx.TimeoutException:
                codes.add("timeout")
    assert 503 in codes and 200 in codes
    http = openai_model(model_id=FLAKY.id, base_url=ep.base_url, timeout_s=timeout_s, max_retries=8,
                        backoff_base_s=0.05, backoff_max_s=0.5)
    via_http = http.generate_batch(_requests(prompts[:20]))
    assert [c.text for c in via_http] == ["ok"] * 20, [c.error for c in via_http if c.error]


def test_breaker_trips_when_app_is_deleted_mid_run(endpoints):
    from ray import serve

    ep = endpoints[DOOMED.id]
    # 100 calls of 0.3 s, 4 at once: the run would take ~8 s undisturbed
    backend = handle_backend(DOOMED, ep, timeout_s=3, max_retries=2, backoff_base_s=0.05, calls_in_flight=4)
    assert [c.text for c in backend.generate_batch(_requests(["a", "b", "c"]))] == ["still here"] * 3

    outcome: dict = {}

    def run() -> None:
        try:
            outcome["result"] = backend.generate_batch(_requests([f"p{i}" for i in range(200)]))
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            outcome["error"] = exc

    worker = threading.Thread(target=run)
    started = time.perf_counter()
    worker.start()
    time.sleep(1.0)
    serve.delete(ep.app_name)
    worker.join(timeout=90)
    assert not worker.is_alive()
    err = outcome.get("error")
    assert isinstance(err, RuntimeError) and isinstance(err, EndpointDown), outcome
    assert "is down" in str(err) and "'doomed'" in str(err) and ep.app_name in str(err)
    print(f"breaker tripped {time.perf_counter() - started:.1f} s after the run started: {err}")
    # a new client of the deleted app, in a worker (a process caches its handles), fails at once
    import ray

    in_worker = ray.remote(num_cpus=0.1)(lambda b, reqs: b.generate_batch(reqs))
    with pytest.raises(EndpointDown, match=r"model 'doomed' .* is down: no such deployment"):
        ray.get(in_worker.remote(handle_backend(DOOMED, ep), _requests(["a"])))


def test_tiny_llama_answers_both_apis(endpoints, hf_spec):
    ep = endpoints[hf_spec.id]
    prompts = ["What is the capital of France?", "List three rivers.", "hello there", "Claim: x\nEvidence: y",
               "Who wrote Hamlet?"]
    backend = handle_backend(hf_spec, ep, timeout_s=60)
    out = backend.generate_batch(_requests(prompts))
    assert all(c.error is None and isinstance(c.text, str) for c in out), [c.error for c in out]
    assert all(c.input_tokens > 0 and 0 < c.output_tokens <= 8 for c in out)
    # greedy decoding is deterministic and padding does not change an answer
    assert [c.text for c in backend.generate_batch(_requests(prompts[:1]))] == [out[0].text]

    # retries as a run's client makes them: on a loaded 2-core machine the proxy may drop a call
    http = openai_model(model_id=hf_spec.id, base_url=ep.base_url, timeout_s=60, max_retries=2,
                        sampling=SamplingParams(max_tokens=8))
    via_http = http.generate_batch(_requests(prompts))
    assert [c.error for c in via_http] == [None] * len(prompts)
    assert [c.text for c in via_http] == [c.text for c in out]
    assert [(c.input_tokens, c.output_tokens) for c in via_http] == [(c.input_tokens, c.output_tokens)
                                                                     for c in out]
    with httpx.Client(base_url=ep.base_url, timeout=60) as client:
        body = client.post("/completions", json={"prompt": "The quick brown fox", "max_tokens": 5,
                                                 "temperature": 0.7, "top_p": 0.9}).json()
    assert isinstance(body["choices"][0]["text"], str)
    assert body["usage"]["prompt_tokens"] > 0 and 0 < body["usage"]["completion_tokens"] <= 5


def test_serve_down_deletes_the_apps_a_killed_driver_left(endpoints, tmp_path, capsys):
    """`halluscope serve CONFIG --down` deletes the config's served models and nothing else."""
    import yaml
    from ray import serve

    from halluscope.cli import main

    leftover = {"id": "left/over", "backend": "scripted", "params": {"default": "hi", "serve": SMALL}}
    deploy([ScriptedModel.model_validate(leftover)])
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({"tasks": ["halogen/code"], "models": [
        leftover, {"id": "gpt_4_0125_turbo", "backend": "replay"}]}))
    assert main(["serve", str(cfg), "--down"]) == 0
    assert "deleted Serve app(s): left-over" in capsys.readouterr().out
    apps = set(serve.status().applications)
    assert "left-over" not in apps and endpoints[SCRIPTED.id].app_name in apps
    assert main(["serve", str(cfg), "--down"]) == 0
    assert "none of its models was being served" in capsys.readouterr().out


def test_a_deployment_that_never_runs_fails_at_its_deadline_and_is_removed(endpoints):
    """What a run serves for its whole length (judge, extractor) waits for its deployment no longer
    than its deploy_timeout_s, then fails naming the model, and leaves no app behind."""
    from ray import serve

    stuck = ScriptedModel.model_validate({"id": "stuck/judge", "backend": "scripted", "params": {
        "default": "x", "load_s": 600, "serve": {**SMALL, "deploy_timeout_s": 3}}})
    started = time.perf_counter()
    with pytest.raises(RuntimeError, match=r"model 'stuck/judge': deployment not running within 3 s "
                                           r"\(serve.deploy_timeout_s\)"):
        deploy([stuck])
    assert time.perf_counter() - started < 30
    assert "stuck-judge" not in serve.status().applications
