"""A scripted stand-in answered in process (``params.in_process``): the same rules as its Serve
deployment, nothing deployed, nothing billed, and no server behaviour that would go unmodelled."""

from __future__ import annotations

import pytest

from halluscope.config.load import parse_config
from halluscope.config.schema import ScriptedModel
from halluscope.errors import ConfigError
from halluscope.models.base import GenerationRequest
from halluscope.models.model import Model
from halluscope.models.registry import Context, client
from halluscope.models.scripted import ScriptedProvider, ScriptedResponder
from halluscope.pipeline.execute import in_process
from halluscope.resolve.cluster import cpu_demand, scheduled
from halluscope.resolve.run import ResolvedRun

PARAMS = {"rules": [{"pattern": "capital", "response": "Paris is the capital"}], "support_on_overlap": 0.5}


def _spec(**params) -> ScriptedModel:
    return ScriptedModel.model_validate({"id": "m", "backend": "scripted", "params": {**PARAMS, **params}})


def test_it_answers_by_the_rules_the_deployment_follows():
    spec = _spec(in_process=True)
    backend = client(spec, Context(), None, "t")  # no endpoint: nothing was deployed
    assert isinstance(backend, Model) and isinstance(backend.provider, ScriptedProvider) and not spec.served
    prompts = ["What is the capital?", "Claim: a b\nEvidence: a c", "Claim: x y\nEvidence: z"]
    got = backend.generate_batch([GenerationRequest(task="t", item_id=str(i), prompt=p) for i, p in enumerate(prompts)])
    responder = ScriptedResponder(spec.params)
    assert [c.text for c in got] == [responder.answer(p) for p in prompts] == ["Paris is the capital", "Yes", "No"]
    assert (got[0].input_tokens, got[0].output_tokens, got[0].error) == (4, 4, None)  # words, as served


@pytest.mark.parametrize("server", [{"latency_s": 0.1}, {"tokens_per_s": 10.0}, {"prefill_tokens_per_s": 100.0},
                                    {"load_s": 1.0}, {"cold_start_s": 5.0}, {"capacity": 2},
                                    {"error_rate": 0.1}, {"timeout_rate": 0.1}, {"faults_until": 1.0},
                                    {"request_timeout_s": 1.0}])
def test_server_behaviour_is_refused_in_process(server):
    (key,) = server
    with pytest.raises(ConfigError, match=f"in_process: true answers without a server, so {key} cannot be set"):
        parse_config({"tasks": ["halogen/code"], "models": [
            {"id": "m", "backend": "scripted", "params": {"in_process": True, **server}}]})


def test_a_run_with_only_in_process_stand_ins_goes_in_the_driver(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    models = [{"id": "tested", "backend": "scripted", "params": {"in_process": True}},
              {"id": "judge", "role": "judge", "backend": "scripted", "params": {"in_process": True}}]
    cfg = parse_config({"tasks": ["halogen/code"], "models": models})
    assert in_process(ResolvedRun.of(cfg), 10) and not any(scheduled(m) for m in cfg.models)
    assert not any("model" in holder for holder in cpu_demand(cfg))  # nothing served holds a CPU
    served = parse_config({"tasks": ["halogen/code"], "models": [{**models[0], "params": {}}, models[1]]})
    assert not in_process(ResolvedRun.of(served), 10) and scheduled(served.models[0])


def test_an_outage_ends_at_faults_until_and_when_changes_no_fingerprint():
    """Faults are drawn until ``faults_until`` and never after, so a drill's resubmission meets a
    healthy stand-in; the two configs are one run (what fails is redone, no answer changes)."""
    import time

    def faults(until: float) -> list:
        responder = ScriptedResponder(_spec(error_rate=0.5, timeout_rate=0.5, faults_until=until).params)
        return [responder.fault(f"prompt {i}", 0) for i in range(20)]

    assert set(faults(time.time() + 3600)) == {"error", "timeout"}
    assert set(faults(time.time())) == {None}

    def fingerprint(**params) -> str:
        return parse_config({"tasks": ["halogen/code"], "models": [
            {"id": "m", "backend": "scripted", "params": {"error_rate": 0.5, **params}}]}).fingerprint()

    assert fingerprint(faults_until=1.0) == fingerprint(faults_until=2.0) == fingerprint()
    assert fingerprint(request_timeout_s=1.0) == fingerprint()
    assert fingerprint(error_rate=0.4) != fingerprint()


def test_a_served_stand_in_is_called_with_its_request_timeout():
    from halluscope.serving.app import ServedEndpoint

    endpoint = ServedEndpoint("m", "app", "scripted", "http://127.0.0.1:1/app/v1")
    for params, timeout in (({}, 60.0), ({"request_timeout_s": 1.5}, 1.5)):
        backend = client(_spec(**params), Context(endpoint), None, "t")
        assert isinstance(backend, Model) and backend.provider.limits.timeout_s == timeout  # type: ignore[attr-defined]
