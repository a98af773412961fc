"""Served models under test on a finite (simulated) GPU cluster: the shared Ray head declares 16
logical GPUs; scripted models hold them per replica, load for ``load_s`` and answer at a modelled
throughput. Models beyond the budget run in waves, a deployment that never becomes healthy fails
that model alone, a model larger than the budget is refused before anything is deployed, a model
whose engine is lost mid-generation is deployed again once. (A driver killed mid-wave: the kill
drill of test_faults.py.)"""

from __future__ import annotations

import pytest
import ray
from ray import serve
from ray.serve.exceptions import RayServeException
from tests.conftest import SHARED_DATA
from tests.support.resolved import planned

from halluscope.config.load import parse_config
from halluscope.cost.prices import load_prices
from halluscope.errors import ConfigError, ModelDown
from halluscope.pipeline.estimate import plan as estimate_cost
from halluscope.pipeline.runner import run
from halluscope.pipeline.spend import held_by_attempts
from halluscope.resolve.run import ResolvedRun
from halluscope.serving.app import app_name_for
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")]

ITEMS = 24


def _model(model_id: str, gpus: int, words: int, **params) -> dict:
    return {"id": model_id, "backend": "scripted", "params": {
        "default": "import numpy " + "x " * (words - 2), "tokens_per_s": 40.0, **params,
        "serve": {"num_gpus": gpus, "num_cpus": 0, "max_ongoing_requests": 4, "max_batch_prompts": 4,
                  **params.pop("serve", {})}}}


def _config(root: str, models: list[dict], gpus: int) -> dict:
    return {"storage": {"root": root}, "tasks": ["halogen/code"], "models": models, "cluster": {"gpus": gpus},
            "limits": {"max_items_per_task": ITEMS}, "cache": {"enabled": False},
            "concurrency": {"batch_size": 8, "generate_batch_size": 8}}


def _deployed(run_id: str, models: tuple[str, ...]) -> list[str]:
    """The apps of these models of this run still deployed."""
    try:
        apps = serve.status().applications
    except RayServeException:  # Serve never started on this cluster: nothing deployed
        return []
    return [a for a in apps if a in {app_name_for(m, run_id) for m in models}]


def _peak(deployments: list[dict]) -> float:
    events = sorted([(d["requested_at"], d["units"]) for d in deployments]
                    + [(d["released_at"], -d["units"]) for d in deployments], key=lambda e: (e[0], e[1]))
    held = peak = 0.0
    for _, delta in events:
        held += delta
        peak = max(peak, held)
    return peak


def test_models_beyond_the_budget_run_in_waves_and_a_deployment_that_never_loads_fails_alone(ray_head, tmp_path,
                                                                                            monkeypatch):
    from halluscope.pipeline import runner
    from halluscope.resolve.run import ResolvedRun

    root = f"file://{tmp_path}"
    models = [_model("big", 4, 20), _model("small", 2, 10),
              # loads for 10 minutes: not healthy within its 4 s deadline
              _model("stuck", 2, 10, load_s=600, serve={"deploy_timeout_s": 4})]
    # a budget far above the run's: the dollar gate holds nothing back, and is estimated with the waves
    prices = tmp_path / "prices.yaml"
    prices.write_text("as_of: '2026-01-01'\nsource: test prices\ngpu_hour_usd: {GPU: 2.0}\n")
    cfg = parse_config({**_config(root, models, gpus=4), "costs": {"budget_usd": 1000.0, "price_table": str(prices)}})
    estimates = []
    monkeypatch.setattr(runner, "estimate_cost", lambda *a, **kw: estimates.append(1) or estimate_cost(*a, **kw))
    result = run(ResolvedRun.of(cfg), run_id="waves", progress=False)
    assert len(estimates) == 1  # the budget gate's and the waves' schedule are one estimate
    store = RunStore(Location.from_url(root), "waves")
    manifest = store.read_json("manifest.json")
    assert manifest["status"] == "failed"
    assert "model 'stuck' failed: deployment not healthy within 4 s" in manifest["reason"]
    deployments = {d["model"]: d for d in manifest["schedule"]["deployments"]}
    assert {m: d["status"] for m, d in deployments.items()} == {"big": "generated", "small": "generated",
                                                                 "stuck": "failed"}
    # never more than the budget at once, and more than one wave to stay within it
    assert _peak(list(deployments.values())) <= 4
    assert len({d["wave"] for d in deployments.values()}) >= 2
    # each model's GPUs went back when its generations were written, not at the end of the run
    for d in deployments.values():
        if d["status"] == "generated":
            assert d["generated"] == ITEMS
            assert d["released_at"] - d["generated_at"] < 30
    assert deployments["stuck"]["released_at"] - deployments["stuck"]["requested_at"] < 60
    # the two others were evaluated; the stuck one left nothing committed, so a resume retries it
    scores = store.read_table("scores", ["model"]).column("model").to_pylist()
    assert sorted(set(scores)) == ["big", "small"] and len(scores) == 2 * ITEMS == result.processed
    # the ledger charges each deployment's held time, pending and loading included
    costs = store.read_table_file("costs.parquet").to_pylist()
    held = {r["model"]: r["resource_seconds"] for r in costs if r["stage"] == "serve"}
    for m, d in deployments.items():
        assert held[m] == pytest.approx(d["units"] * (d["released_at"] - d["requested_at"]))
    assert _deployed("waves", tuple(deployments)) == []  # nothing left deployed


def test_a_model_larger_than_the_budget_is_refused_before_any_deployment(ray_head, tmp_path):
    root = f"file://{tmp_path}"
    cfg = parse_config(_config(root, [_model("fits", 2, 5), _model("huge", 8, 5)], gpus=4))
    with pytest.raises(ConfigError, match=r"model 'huge' needs 8 GPUs, the budget has 4 GPUs \(cluster.gpus\)"):
        run(ResolvedRun.of(cfg), run_id="refused", progress=False)
    assert _deployed("refused", ("fits", "huge")) == []


@ray.remote(num_cpus=0)
def _generation(attempt: int, rows: int) -> int:
    """A model's generation task whose first attempt meets an engine that stopped answering."""
    if attempt == 1:
        raise ModelDown("model lost-engine: 5 calls in a row failed (the circuit breaker is open)")
    return rows


def test_a_model_whose_engine_is_lost_mid_generation_is_deployed_again_once(ray_head):
    """Two models of 2 GPUs each on 4: the first's generation ends on a lost engine, its GPUs go
    back and the model is queued again; its second deployment generates. The other loses its
    engine twice and fails, alone."""
    from halluscope.config.schema import ScriptedModel
    from halluscope.pipeline.waves import Waves
    from halluscope.resolve.cluster import job_of
    from halluscope.serving.app import start_serve

    specs = {m: ScriptedModel.model_validate(_model(m, 2, 5)) for m in ("lost-engine", "lost-twice")}
    attempts = {m: 0 for m in specs}

    def generate(spec, endpoint):
        attempts[spec.id] += 1
        return _generation.remote(attempts[spec.id] if spec.id == "lost-engine" else 1, ITEMS)

    finished: list[tuple[str, bool]] = []
    start_serve()
    waves = Waves([job_of(s) for s in specs.values()], {"GPU": 4.0}, specs, generate,
                  lambda m, ok: finished.append((m, ok)), scope="lost")
    records = [(d.model, d.status, d.generated, d.reason is not None) for d in waves.run()]
    assert sorted(records) == [("lost-engine", "generated", ITEMS, False), ("lost-engine", "requeued", 0, True),
                               ("lost-twice", "failed", 0, True), ("lost-twice", "requeued", 0, True)]
    assert sorted(finished) == [("lost-engine", True), ("lost-twice", False)]
    assert attempts == {"lost-engine": 2, "lost-twice": 2}
    assert _peak([d.as_dict() for d in waves.deployments]) <= 4  # each deployment after the last was given back
    assert _deployed("lost", tuple(specs)) == []


@pytest.mark.clock  # 30 s of held GPUs to cross the budget
def test_a_deployment_that_holds_its_gpus_past_the_budget_before_any_commit_is_stopped(ray_head, tmp_path):
    """A model whose node takes a minute longer to come up than the plan knows (an injected cold
    start the plan's overheads do not state) holds 2 GPUs at $1 a second each with nothing
    committed: the budget is checked as its held time accrues, not at its first commit, so the run
    stops over budget within a look (5 s) of crossing it, its model given back while it loads."""
    from halluscope.errors import OverBudget

    root = f"file://{tmp_path}"
    prices = tmp_path / "prices.yaml"
    prices.write_text("as_of: '2026-01-01'\nsource: test prices\ngpu_hour_usd: {GPU: 3600.0}\n")
    model = _model("slow-node", 2, 10, load_s=1, cold_start_s=90, serve={"deploy_timeout_s": 300})
    cfg = parse_config({**_config(root, [model], gpus=2), "limits": {"max_items_per_task": 2},
                        "costs": {"budget_usd": 60.0, "price_table": str(prices)}})
    assert planned(cfg, load_prices(str(prices))).total_usd < 60.0  # the plan knows no cold start
    with pytest.raises(OverBudget, match=r"costs.budget_usd \$60.00 crossed"):
        run(ResolvedRun.of(cfg), run_id="held", progress=False)
    store = RunStore(Location.from_url(root), "held")
    assert store.read_json("manifest.json")["status"] == "over_budget"
    assert _deployed("held", ("slow-node",)) == []
    (interval,) = [i for i in held_by_attempts(store) if i.model == "slow-node"]
    # stopped within a look of crossing $60 (30 s of 2 GPUs), its node still coming up (90 s)
    assert 30 <= interval.end - interval.start < 60


def test_the_logs_of_the_nodes_its_models_ran_on_outlive_their_pods(ray_head, tmp_path, monkeypatch):
    """A served model's replica logs stay on its GPU pod, which the autoscaler removes once idle:
    each time a model is given back, and when the pipeline ends, a task on every other node copies
    that node's Ray and Serve logs of the attempt under logs/ray-<attempt>/node-<id>/. (One node
    here: the driver is made to look elsewhere, so the head is "another" node.)"""
    from halluscope.pipeline import run_log

    monkeypatch.setattr(run_log, "this_node", lambda: "the-driver-is-elsewhere")
    root = f"file://{tmp_path}"
    cfg = parse_config({**_config(root, [_model("logged", 2, 10)], gpus=2), "limits": {"max_items_per_task": 4}})
    run(ResolvedRun.of(cfg), run_id="logs", progress=False)
    store = RunStore(Location.from_url(root), "logs")
    attempt = store.read_json("attempt.json")["attempt"]
    (node,) = (tmp_path / "logs" / "logs" / f"ray-{attempt}").glob("node-*")
    replicas = [p.name for p in node.rglob("replica_*logged*.log")]
    assert replicas, sorted(p.name for p in node.rglob("*"))[:20]
