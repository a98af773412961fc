"""The physical cluster as one budget: the shared RayService's engines placed on the described
nodes first, then the run's, every replica on one node (in one pod on Kubernetes), and a layout
that can never run refused by plan, run and submit before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from halluscope.config.load import parse_config
from halluscope.config.schema import ClusterSpec
from halluscope.errors import ConfigError
from halluscope.pipeline.schedule import simulate
from halluscope.resolve.cluster import Job, check_layout, job_of
from halluscope.resolve.cluster import budget as schedule_budget
from halluscope.resolve.cluster import layout as run_layout
from halluscope.resolve.nodes import Demand, Layout, serve_config_holds

REPO = Path(__file__).resolve().parents[2]
SERVICE = [str(REPO / "serve" / "judge-llama-3.1-70b.yaml"), str(REPO / "serve" / "extractor-llama-3.1-405b-fp8.yaml")]


def _nodes(count: int, pod_gpus: int | None = 8, service: list | None = None) -> dict:
    return {"nodes": [{"name": "gpu-worker", "count": count, "gpus": 8, "accelerator": "H100"}],
            "service": SERVICE if service is None else service, **({"pod_gpus": pod_gpus} if pod_gpus else {})}


def _config(cluster: dict, tps: list[int], roles: bool = False) -> dict:
    """Served models under test of these tensor-parallel sizes (scripted stand-ins holding GPUs);
    with ``roles`` a judge the run serves on 4 GPUs of its own."""
    models = [{"id": f"m{i}-tp{tp}", "backend": "scripted", "params": {"default": "import numpy",
               "serve": {"num_gpus": tp, "num_cpus": 0}}} for i, tp in enumerate(tps)]
    if roles:
        models.append({"id": "judge", "role": "judge", "backend": "scripted", "params": {
            "default": "no", "serve": {"num_gpus": 4, "num_cpus": 0}}})
    return {"tasks": ["halogen/code"], "models": models, "cluster": cluster}


def test_the_shipped_serve_configs_hold_a_tp4_judge_and_a_tp8_extractor():
    holds = [h for p in SERVICE for h in serve_config_holds(Path(p))]
    assert [(h.name, h.gpus, h.replicas, h.accelerator) for h in holds] == [
        ("llama-3.1-70b-instruct", 4, 1, "H100"), ("llama-3.1-405b-instruct-fp8", 8, 1, "H100")]


def test_two_p5_nodes_under_the_rayservice_leave_no_pod_for_a_run():
    """The shipped layout: the RayService's two pods of 8 take both nodes (12 GPUs in use, 4
    idle in the judge's pod), so the RayJob's pod of 8 has nowhere to go."""
    cfg = parse_config(_config(_nodes(2), [4]))
    with pytest.raises(ConfigError) as err:
        check_layout(cfg)
    message = str(err.value)
    assert message == (
        "refused before any deployment: model 'm0-tp4' needs 1 x 4 GPUs, each replica on one node in a pod of 8. "
        "The nodes: 2 nodes, 12 of 16 GPUs in use, 16 asked for by pods: "
        "gpu-worker-0 [service pod: llama-3.1-405b-instruct-fp8 (service) 8; 0 idle; 0 GPUs unclaimed], "
        "gpu-worker-1 [service pod: llama-3.1-70b-instruct (service) 4; 4 idle; 0 GPUs unclaimed]. "
        "Add a node, serve the shared roles in the run, or give them fewer GPUs")


def test_a_third_node_takes_the_runs_pod_and_its_models_in_waves():
    cfg = parse_config(_config(_nodes(3), [4, 4, 8]))
    check_layout(cfg)
    nodes = run_layout(cfg)
    assert nodes is not None and nodes.free_for("run") == 8
    jobs = [job_of(m, 1.0, 100.0 * (i + 1)) for i, m in enumerate(cfg.models)]
    sched = simulate(jobs, schedule_budget(cfg, None, None), run_layout(cfg))
    # the TP8 model alone fills the run's one pod; the two TP4 models share it after
    by_model = {w.model: w for w in sched.windows}
    assert by_model["m2-tp8"].wave == 0 and by_model["m0-tp4"].wave == by_model["m1-tp4"].wave == 1
    assert {n for w in sched.windows for n in w.nodes} == {"gpu-worker-2/run-pod-0"}
    assert sched.peak() == 8


def test_roles_the_run_serves_share_its_pods_and_are_placed_first():
    """Judge and extractor served in the run instead of the RayService: two nodes hold the run's
    two pods, the judge's 4 GPUs beside a TP4 model, a TP8 model in the other pod."""
    cfg = parse_config(_config(_nodes(2, service=[]), [4, 8], roles=True))
    check_layout(cfg)
    sched = simulate([job_of(m, 1.0, 10.0) for m in cfg.models if m.role == "test"],
                     schedule_budget(cfg, None, None), run_layout(cfg))
    assert len({w.wave for w in sched.windows}) == 1 and len({w.nodes for w in sched.windows}) == 2


def test_without_pods_one_ray_cluster_packs_the_machines():
    """A VM cluster (ray_cluster.yaml): one Ray over both nodes, so a TP4 model fits beside the judge."""
    cfg = parse_config(_config(_nodes(2, pod_gpus=None), [4]))
    check_layout(cfg)
    nodes = run_layout(cfg)
    assert nodes is not None and nodes.free_for("run") == 4
    with pytest.raises(ConfigError, match=r"model 'm0-tp8' needs 1 x 8 GPUs, each replica on one node. "
                                          r"The nodes: 2 nodes, 12 of 16 GPUs in use: "):
        check_layout(parse_config(_config(_nodes(2, pod_gpus=None), [8])))


def test_a_model_larger_than_any_node_says_so():
    with pytest.raises(ConfigError, match=r"needs 16 GPUs on one node and a pod holds 8 \(cluster.pod_gpus\)"):
        check_layout(parse_config(_config(_nodes(4), [16])))


def test_a_pool_is_not_enough_two_half_free_nodes_do_not_hold_a_tp4_engine():
    """4 GPUs free in all, 2 on each node: a pooled count admits a TP4 model, the nodes do not;
    best fit keeps small replicas together, leaving a whole node for a large one."""
    layout = Layout.of(ClusterSpec.model_validate(_nodes(2, pod_gpus=None, service=[
        {"name": "svc", "gpus": 6, "replicas": 2}])))
    assert layout is not None and layout.free_for("run") == 4
    assert not layout.take(Demand("tp4", "GPU", 4, 1))
    assert layout.take(Demand("tp2x2", "GPU", 2, 2)) and layout.nodes_of("tp2x2") == ["gpu-worker-0",
                                                                                      "gpu-worker-1"]
    layout.release("tp2x2")
    assert layout.free_for("run") == 4
    packed = Layout.of(ClusterSpec.model_validate(_nodes(2, pod_gpus=None, service=[
        {"name": "a", "gpus": 4}, {"name": "b", "gpus": 4}])))
    assert packed is not None and packed.take(Demand("tp8", "GPU", 8, 1))


def test_a_failed_placement_leaves_nothing_behind():
    layout = Layout.of(ClusterSpec.model_validate(_nodes(1, service=[])))
    assert layout is not None
    assert not layout.take(Demand("two-tp8", "GPU", 8, 2))
    assert layout.describe() == "1 nodes, 0 of 8 GPUs in use, 0 asked for by pods: gpu-worker-0 [8 GPUs unclaimed]"


def test_a_service_that_does_not_fit_its_nodes_is_refused():
    with pytest.raises(ConfigError, match=r"cluster.service: llama-3.1-405b-instruct-fp8 \(at least 1 x 8 H100 GPUs"):
        Layout.of(ClusterSpec.model_validate({"nodes": [{"name": "small", "count": 2, "gpus": 4}],
                                              "service": SERVICE}))
    with pytest.raises(ValueError, match="cluster.service places holds on cluster.nodes"):
        ClusterSpec.model_validate({"service": SERVICE})


def test_a_quota_below_the_nodes_still_caps_the_pool():
    cfg = parse_config(_config({**_nodes(3), "gpus": 4}, [8]))
    with pytest.raises(ConfigError, match=r"model 'm0-tp8' needs 8 GPUs, the budget has 4 GPUs \(cluster.gpus\)"):
        check_layout(cfg)


def test_a_quota_beyond_what_the_service_leaves_of_the_nodes_is_refused():
    """3 nodes of 8, two held by the RayService's pods: a quota of 16 would have Kueue wait for
    GPUs that are never free; the third node's 8 pass, and a type the nodes lack has none."""
    with pytest.raises(ConfigError) as err:
        check_layout(parse_config(_config({**_nodes(3), "gpus": {"H100": 16}}, [8])))
    assert str(err.value) == (
        "cluster.gpus asks for 16 H100 GPUs and the nodes cluster.nodes describes leave the run 8 after "
        "cluster.service's holds: 3 nodes, 12 of 24 GPUs in use, 16 asked for by pods: "
        "gpu-worker-0 [service pod: llama-3.1-405b-instruct-fp8 (service) 8; 0 idle; 0 GPUs unclaimed], "
        "gpu-worker-1 [service pod: llama-3.1-70b-instruct (service) 4; 4 idle; 0 GPUs unclaimed], "
        "gpu-worker-2 [8 GPUs unclaimed]. Add a node, or lower cluster.gpus to what the nodes leave")
    with pytest.raises(ConfigError, match=r"cluster.gpus asks for 16 GPUs and .* leave the run 8 "):
        check_layout(parse_config(_config({**_nodes(3), "gpus": 16}, [8])))
    with pytest.raises(ConfigError, match=r"cluster.gpus asks for 4 A100 GPUs and .* leave the run 0 "):
        check_layout(parse_config(_config({**_nodes(3), "gpus": {"A100": 4}}, [4])))
    check_layout(parse_config(_config({**_nodes(3), "gpus": {"H100": 8}}, [8])))


def test_jobs_know_their_replicas():
    assert Job("m", "GPU", 8.0, replicas=2).demand == Demand("m", "GPU", 4.0, 2)
