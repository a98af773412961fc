"""The Kueue objects of a cluster description (``cluster.nodes``, ``cluster.pod_gpus``,
``cluster.service``): one picture of the cluster for the runs' quota, the RayService's bounds and
the plan alike, so that no GPU is counted two ways.

The shared RayService is not queued: it holds its GPU pods for as long as it lives, and its
autoscaler may grow them to what its Serve configs allow (each engine's ``max_replicas``). So the
runs' quota is what the nodes leave once the service holds its maximum, in whole run pods of
``cluster.pod_gpus``: no admitted run's pod then waits for a node the service took, and the
service never scales into a run's node or past the nodes described. The RayService's GPU worker
group is bounded the same way (its minimum: the pods its engines' minimum replicas take; its
maximum: their maximum's). Each GPU pod asks what k8s/base's GPU group asks (CPUs, memory, its
ephemeral model cache), and each admitted run's CPU pods (head, CPU workers at their fixed size,
submitter) are covered by a flavor of their own, for as many runs as the GPU quota admits at once.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from halluscope.config.schema import ClusterSpec
from halluscope.errors import ConfigError
from halluscope.kuberay import GPU_RESOURCE, apply_queue, build_rayjob, load_template
from halluscope.preflight import pod_requests
from halluscope.quantity import parse_quantity
from halluscope.resolve.nodes import SERVICE, Layout

API = "kueue.x-k8s.io/v1beta2"
QUEUE = "halluscope"
CPU_FLAVOR = "cpu-nodes"
INSTANCE_LABEL = "node.kubernetes.io/instance-type"  # set on every node by the kubelet, EKS's included
COVERED = ("nvidia.com/gpu", "cpu", "memory", "ephemeral-storage")
GIB = 2.0**30


@dataclass(frozen=True)
class Picture:
    """What the description gives each party: the RayService's GPU pods (least, most), the runs'
    GPU quota and how many runs it admits at once, and the Kueue objects that say so."""

    service_pods: tuple[int, int]
    run_gpus: int
    runs: int
    objects: list[dict]


def picture(cluster: ClusterSpec, checkout: Path, namespace: str = QUEUE) -> Picture:
    """The picture of ``cluster`` with the pods k8s/base's RayJob asks (``checkout``), or a
    ConfigError naming what does not fit."""
    if not cluster.nodes or cluster.pod_gpus is None:
        raise ConfigError("halluscope kueue needs the physical cluster: cluster.nodes and cluster.pod_gpus")
    kinds = {(g.accelerator, g.instance_type) for g in cluster.nodes if g.gpus}
    if len(kinds) != 1 or None in next(iter(kinds)):
        raise ConfigError("halluscope kueue renders one GPU flavor: cluster.nodes needs one kind of GPU node, its "
                          f"accelerator and instance_type set (found {sorted(map(str, kinds))})")
    ((accelerator, instance_type),) = kinds
    described = cluster.model_copy(update={"gpus": None})  # the runs' quota is what this renders
    least, most = Layout.of(described), Layout.of(described, service_at_most=True)
    assert least is not None and most is not None, "checked above: nodes are described"
    pod = int(cluster.pod_gpus)
    run_gpus = pod * sum(int(m.unclaimed) // pod for m in most.machines if m.accelerator == accelerator)
    if run_gpus == 0:
        raise ConfigError(f"cluster.service at its maximum replicas leaves the runs no pod of {pod} GPUs: "
                          f"{most.describe()}. Add a node, or lower the engines' max_replicas in their Serve configs")
    gpu_pod, run_cpu = _requests(checkout, pod)
    runs = run_gpus // pod
    gpu_flavor = str(accelerator).lower()
    quota = {gpu_flavor: {r: gpu_pod[r] * runs for r in COVERED} | {"nvidia.com/gpu": run_gpus},
             CPU_FLAVOR: {r: run_cpu[r] * runs for r in COVERED} | {"nvidia.com/gpu": 0}}
    objects = [
        {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": gpu_flavor},
         "spec": {"nodeLabels": {INSTANCE_LABEL: instance_type},
                  "nodeTaints": [{"key": GPU_RESOURCE, "effect": "NoSchedule"}]}},
        {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": CPU_FLAVOR}, "spec": {}},
        {"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": QUEUE}, "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [{"coveredResources": list(COVERED), "flavors": [
                {"name": name, "resources": [{"name": r, "nominalQuota": _quantity(r, q[r])} for r in COVERED]}
                for name, q in quota.items()]}]}}]
    return Picture((least.pods_of(SERVICE), most.pods_of(SERVICE)), run_gpus, runs, objects)


def _requests(checkout: Path, pod_gpus: int) -> tuple[dict[str, float], dict[str, float]]:
    """What one GPU pod of k8s/base's RayJob requests, and what one queued run's CPU pods do."""
    template = load_template(None, checkout)
    job = build_rayjob(template, name="halluscope-quota", config_uri="s3://quota/run.yaml", fingerprint="0" * 16)
    apply_queue(job, QUEUE, pod_gpus, None)
    gpu_pod: dict[str, float] = defaultdict(float)
    run_cpu: dict[str, float] = defaultdict(float)
    for _, count, spec in pod_sets(job):
        requests = defaultdict(float, pod_requests(spec))
        if requests[GPU_RESOURCE]:
            if requests[GPU_RESOURCE] != pod_gpus:
                raise ConfigError(f"cluster.pod_gpus is {pod_gpus}; k8s/base's GPU group asks "
                                  f"{requests[GPU_RESOURCE]:g}")
            gpu_pod = requests
        else:
            for r, v in requests.items():
                run_cpu[r] += v * count
    return gpu_pod, run_cpu


def pod_sets(job: dict) -> list[tuple[str, int, dict]]:
    """(name, count, pod spec) as Kueue's RayJob integration asks for them: the head, each worker
    group at its replicas, and the submitter Job's pod (K8sJobMode)."""
    cluster = job["spec"]["rayClusterSpec"]
    sets = [("head", 1, cluster["headGroupSpec"]["template"]["spec"])]
    sets += [(g["groupName"], int(g["replicas"]), g["template"]["spec"]) for g in cluster.get("workerGroupSpecs", [])]
    if job["spec"].get("submissionMode") == "K8sJobMode":
        sets.append(("submitter", 1, job["spec"]["submitterPodTemplate"]["spec"]))
    return sets


def _quantity(resource: str, value: float) -> int | str:
    """A quota, rounded up: memory and storage in whole GiB, CPUs and GPUs whole."""
    if resource in ("memory", "ephemeral-storage"):
        return f"{math.ceil(value / GIB - 1e-9)}Gi"
    return math.ceil(value - 1e-9)


def rayservice_bounds(rayservice: dict, pods: tuple[int, int]) -> list[str]:
    """How the RayService manifest's GPU worker group differs from ``pods`` (least, most)."""
    groups = [g for g in rayservice["spec"]["rayClusterConfig"].get("workerGroupSpecs", [])
              if any(((c.get("resources") or {}).get("requests") or {}).get(GPU_RESOURCE)
                     for c in g["template"]["spec"]["containers"])]
    if len(groups) != 1:
        return [f"the RayService has {len(groups)} GPU worker groups; one is described"]
    (group,) = groups
    least, most = pods
    found = (group.get("minReplicas"), group.get("replicas"), group.get("maxReplicas"))
    if found != (least, least, most):
        return [f"its {group['groupName']} group has minReplicas/replicas/maxReplicas {'/'.join(map(str, found))}; "
                f"the description gives {least}/{least}/{most}"]
    return []



def differences(rendered: object, shipped: object, where: str = "") -> list[str]:
    """Where ``shipped`` (objects read from files) says other than ``rendered``, one line each;
    quotas compared as quantities (``1800Gi`` is 1800 GiB however written)."""
    if isinstance(rendered, dict) and isinstance(shipped, dict):
        return [d for k in sorted(set(rendered) | set(shipped), key=str)
                for d in differences(rendered.get(k), shipped.get(k), f"{where}.{k}" if where else str(k))]
    if isinstance(rendered, list) and isinstance(shipped, list) and len(rendered) == len(shipped):
        return [d for i, (a, b) in enumerate(zip(rendered, shipped)) for d in differences(a, b, f"{where}[{i}]")]
    if where.endswith("nominalQuota") and rendered is not None and shipped is not None:
        same = math.isclose(parse_quantity(rendered), parse_quantity(shipped))
    else:
        same = rendered == shipped
    return [] if same else [f"{where}: {shipped!r}, the description gives {rendered!r}"]
