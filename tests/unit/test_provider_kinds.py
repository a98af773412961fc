"""The provider kinds the package registers, and what they build from a model's config."""

from __future__ import annotations

import subprocess
import sys

import pytest

from halluscope.config.load import parse_config
from halluscope.config.schema import HFModel, VLLMModel
from halluscope.errors import ConfigError
from halluscope.models.provider import Context
from halluscope.models.registry import predicted, provider
from halluscope.provider_registry import registered
from halluscope.serving.app import ServedEndpoint

ENDPOINT = ServedEndpoint("m", "run--m", "LLMServer:m")  # a run reaches its models by handle only


def _vllm(**params) -> VLLMModel:
    return VLLMModel.model_validate({"id": "m", "backend": "vllm", "params": {"model_source": "x", **params}})


def test_the_built_in_backends_are_registered_kinds():
    assert {"openai", "recorded", "scripted", "hf", "vllm"} <= set(registered())


def test_reading_the_installed_kinds_loads_no_http_client_library():
    """Every driver and Ray Data worker of a run reads them; the openai SDK and httpx (0.6 and
    0.3 s to import) load where a client opens or weights are fetched."""
    code = ("import sys; from halluscope.provider_registry import registered; registered(); "
            "print(sorted(m for m in ('openai', 'httpx') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"


def test_a_vllm_requests_time_grows_with_its_answer_unless_configured():
    short, long = _vllm(sampling={"max_tokens": 100}), _vllm(sampling={"max_tokens": 2000})
    assert provider(short, Context(ENDPOINT)).limits.timeout_s == 80.0  # type: ignore[attr-defined]
    assert provider(long, Context(ENDPOINT)).limits.timeout_s == 460.0  # type: ignore[attr-defined]
    fixed = _vllm(sampling={"max_tokens": 2000}, request_timeout_s=30)
    assert provider(fixed, Context(ENDPOINT)).limits.timeout_s == 30.0  # type: ignore[attr-defined]


def test_an_hf_calls_time_covers_its_batch_and_the_one_ahead_of_it_unless_configured():
    def hf(**params) -> HFModel:
        return HFModel.model_validate({"id": "m", "backend": "hf", "params": {"model_source": "x", **params}})

    # 128 tokens at 5 tokens/s, twice (the call ahead of it on the replica), beside a fixed minute
    assert provider(hf(sampling={"max_tokens": 128}), Context(ENDPOINT)).limits.timeout_s == 111.2  # type: ignore[attr-defined]
    configured = hf(sampling={"max_tokens": 128}, request_timeout_s=900)
    assert provider(configured, Context(ENDPOINT)).limits.timeout_s == 900.0  # type: ignore[attr-defined]


def test_how_long_a_call_may_take_is_not_part_of_the_fingerprint():
    def cfg(backend: str, **params):
        return parse_config({"tasks": ["halogen/code"], "models": [
            {"id": "m", "backend": backend, "params": {"model_source": "x", **params}}]})

    for backend in ("vllm", "hf"):
        assert cfg(backend).fingerprint() == cfg(backend, request_timeout_s=30).fingerprint()


def test_only_a_stand_in_predicts_its_answers():
    scripted = parse_config({"tasks": ["halogen/code"], "models": [
        {"id": "s", "backend": "scripted", "params": {"default": "no idea", "in_process": True}}]}).models[0]
    answer = predicted(scripted)
    assert answer is not None and answer("anything") == "no idea"
    assert predicted(_vllm()) is None


def test_a_served_kind_needs_its_deployment():
    with pytest.raises(ValueError, match="model 'm': backend 'vllm' is served, but no endpoint was deployed"):
        provider(_vllm(), Context())


def test_an_unknown_backend_is_named_with_the_installed_ones():
    with pytest.raises(ConfigError, match=r"models.0.installed: .*no provider for backend 'tgi' is installed "
                                          r"\(registered: .*openai.*\)"):
        parse_config({"tasks": ["halogen/code"], "models": [{"id": "m", "backend": "tgi"}]})


def test_which_row_errors_a_resubmitted_run_does_again():
    from halluscope.records import NOT_STAGED, gave_up, transient_error

    assert transient_error(gave_up("HTTP 503", 5)) and transient_error(gave_up("no answer within 60 s", 1))
    assert transient_error(NOT_STAGED)
    for final in (None, "HTTP 400: prompt too long", "decompose failed: ValueError: x", "no recorded response",
                  "malformed response: KeyError"):
        assert not transient_error(final), final


def test_the_largest_gpu_groups_are_submitted_first(monkeypatch):
    """A TP8 group needs a whole free node: submitted after a TP4 group, it can find that group on
    the only node it would have fitted (seen in bench/cluster_layouts.py's resumed 2 x 8 run)."""
    from types import SimpleNamespace

    from halluscope.config.schema import ScriptedModel
    from halluscope.serving import app

    submitted: list[str] = []

    def run_many(targets, wait_for_applications_running):
        submitted.extend(t.name for t in targets)
        return [SimpleNamespace(deployment_name="scripted") for _ in targets]

    monkeypatch.setattr(app, "start_serve", lambda port, over_http: None)
    monkeypatch.setattr(app.serve, "run_many", run_many)
    monkeypatch.setattr(app, "build_application", lambda spec, over_http: spec.id)
    specs = [ScriptedModel.model_validate({"id": i, "backend": "scripted", "params": {"serve": serve}})
             for i, serve in (("judge", {"num_gpus": 4}), ("cpu", {"num_cpus": 1}), ("extractor", {"num_gpus": 8}))]
    endpoints = app.deploy(specs, wait=False, scope="r")
    assert submitted == ["r--extractor", "r--judge", "r--cpu"] and set(endpoints) == {"judge", "cpu", "extractor"}


def test_each_generation_actor_keeps_its_share_of_an_endpoints_capacity():
    """A pool of 4 Generate actors sends each model's calls from all four at once: each keeps a
    quarter of what its endpoint takes, so together they send what it was sized for."""
    from halluscope.config.schema import OpenAIModel
    from halluscope.pipeline.stages import Generate

    api = OpenAIModel.model_validate({"id": "api", "backend": "openai", "params": {
        "base_url": "http://127.0.0.1:9/v1", "model": "gpt-test", "max_concurrency": 64}})
    served = VLLMModel.model_validate({"id": "m", "backend": "vllm", "params": {
        "model_source": "x", "serve": {"num_replicas": 2, "max_ongoing_requests": 32}}})

    def in_flight(clients: int) -> dict[str, int]:
        actor = Generate([api, served], {"m": ENDPOINT}, None, clients=clients)
        return {m: b.provider.limits.calls_in_flight for m, b in actor.backends.items()}  # type: ignore[attr-defined]

    assert in_flight(4) == {"api": 16, "m": 16}
    assert in_flight(1) == {"api": 64, "m": 64}
