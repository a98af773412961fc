"""The calls a run keeps in flight to an endpoint stay within what it was sized for, however many
actors call it: generation actors share a served model's capacity, and every model on a shared
service's engine (every Evaluate actor of every stage) stays within what the engine takes at its
maximum replicas, which `halluscope plan` and `submit` check against the service's Serve config."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from tests.support.openai_server import FailPlan, OpenAIStubServer

from halluscope import records
from halluscope.config.load import parse_config
from halluscope.contract.roles import RoleCall
from halluscope.errors import ConfigError
from halluscope.pipeline.roles import RoleModels
from halluscope.pipeline.stages import Generate
from halluscope.resolve.service_engines import check_service_load

ACTORS = 4


def at_once(work) -> None:
    """``work(k)`` for every actor k, all at once (threads stand in for the actors' processes)."""
    threads = [threading.Thread(target=work, args=(k,)) for k in range(ACTORS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_generation_actors_together_keep_no_more_than_the_endpoints_capacity_in_flight() -> None:
    """Four Generate actors of one pool, each with a batch of 24 prompts for the same endpoint of
    capacity 8 (``max_concurrency``): each keeps its share, 2, so the endpoint sees at most 8."""
    with OpenAIStubServer(fail_plan=FailPlan(delay_s=0.05)) as server:
        spec = parse_config({"tasks": ["halogen/code"], "models": [{"id": "m", "backend": "openai", "params": {
            "base_url": server.base_url, "model": "m", "max_concurrency": 8}}]}).models[0]
        actors = [Generate([spec], {}, None, clients=ACTORS) for _ in range(ACTORS)]
        batches = [pa.Table.from_pylist([{"gen_id": f"g{k}-{i}", "model": "m", "task": "halogen/code",
                                          "item_id": str(i), "sample_idx": 0, "prompt": f"actor {k} prompt {i}"}
                                         for i in range(24)], schema=records.WORK) for k in range(ACTORS)]
        out: dict[int, pa.Table] = {}
        at_once(lambda k: out.__setitem__(k, actors[k](batches[k])))
    assert all(out[k].column("error").null_count == 24 for k in range(ACTORS))
    assert server.calls == ACTORS * 24
    assert 2 < server.max_concurrent <= 8


def _service(tmp_path: Path, target: int, replicas: int) -> str:
    """A Serve config of one engine that serves model "svc", as serve/*.yaml do."""
    path = tmp_path / "svc.yaml"
    path.write_text(yaml.safe_dump({"applications": [{"name": "svc", "route_prefix": "/svc", "import_path":
                                                      "ray.serve.llm:build_openai_app", "args": {"llm_configs": [{
        "model_loading_config": {"model_id": "svc", "model_source": "org/Svc-8B"}, "accelerator_type": "H100",
        "deployment_config": {"autoscaling_config": {"min_replicas": 1, "max_replicas": replicas,
                                                     "target_ongoing_requests": target}},
        "engine_kwargs": {"tensor_parallel_size": 4}}]}}]}))
    return str(path)


def _config(base_url: str, serve_file: str, judge: int, extractor: int):
    roles = [{"id": role, "role": role, "backend": "openai", "params": {
        "base_url": base_url, "model": "svc", "max_concurrency": n, "max_retries": 0}}
        for role, n in (("judge", judge), ("extractor", extractor))]
    return parse_config({
        "tasks": ["halogen/code"], "models": [{"id": "m", "backend": "scripted", "params": {"in_process": True}},
                                              *roles],
        "cluster": {"nodes": [{"name": "p5", "count": 2, "gpus": 8, "accelerator": "H100"}], "pod_gpus": 8,
                    "service": [serve_file]},
        "costs": {"shared_services": [{"name": "serve", "gpus": 8, "resource": "H100",
                                       "models": ["judge", "extractor"]}]}})


def test_every_model_on_a_shared_engine_together_stays_within_what_it_takes_at_its_maximum(tmp_path) -> None:
    """The judge and the extractor on one engine (2 replicas at most, autoscaling at 8 in flight
    each: 16): four Evaluate actors, each asking both (one stage after the other, as a batch goes
    through abstain, decompose and verify), keep at most 16 in flight; a config that would keep
    more is refused before anything runs, naming the models and the engine's bounds."""
    serve_file = _service(tmp_path, target=8, replicas=2)
    with OpenAIStubServer(responder=lambda p: "yes", fail_plan=FailPlan(delay_s=0.05)) as server:
        cfg = _config(server.base_url, serve_file, judge=8, extractor=8)
        check_service_load(cfg)
        actors = [RoleModels(cfg.models, {}, None, clients=ACTORS) for _ in range(ACTORS)]

        def evaluate(k: int) -> None:
            for role in (["judge", "extractor"] if k % 2 else ["extractor", "judge"]):
                calls = {f"g{k}-{i}": [RoleCall(role, (f"actor {k} row {i} {role}",), "t-v1")] for i in range(20)}
                actors[k].answer(calls, "verify", {key: [] for key in calls})

        at_once(evaluate)
    assert server.calls == ACTORS * 2 * 20
    assert 4 < server.max_concurrent <= 16
    with pytest.raises(ConfigError, match=r"the run keeps 24 calls in flight to svc \(judge 16 \+ extractor 8: "
                                          r"params.max_concurrency\) and the service's engine takes 16 at most "
                                          r"\(2 replica\(s\) x target_ongoing_requests 8\)"):
        check_service_load(_config("http://127.0.0.1:9/v1", serve_file, judge=16, extractor=8))
