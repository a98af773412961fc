"""The Kueue objects in k8s/kueue (ResourceFlavors, ClusterQueue) and k8s/components/kueue
(LocalQueue), checked against Kueue's own v1beta2 CRD schemas, made strict as
kubernetes-validate's are (an unknown field fails), plus what the schemas' CEL rules and Kueue's
admission would say: and that a RayJob `halluscope submit --queue` creates is admitted under the
quota for exactly the GPUs its config budgets.

The schemas (tests/unit/kueue_crds/*.json) are the openAPIV3Schema of each CRD's v1beta2
version from kubernetes-sigs/kueue config/components/crd/bases, descriptions and status
removed; each file's $comment names the commit.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from tests.unit.test_deploy_files import by_kind, cluster_spec, kubectl_kustomize, load_all, node_types

from halluscope.kuberay import GPU_TOLERATION, apply_queue, build_rayjob, load_template

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = Path(__file__).parent / "kueue_crds"
API = "kueue.x-k8s.io/v1beta2"
KINDS = {"ResourceFlavor": "Cluster", "ClusterQueue": "Cluster", "LocalQueue": "Namespaced"}
CLUSTER_FILES = sorted(p for p in (ROOT / "k8s" / "kueue").glob("*.yaml") if p.name != "kustomization.yaml")
COMPONENT_FILES = sorted(p for p in (ROOT / "k8s" / "components" / "kueue").glob("*.yaml")
                         if p.name != "kustomization.yaml")
PINNED = "ghcr.io/halluscope/halluscope@sha256:" + "3c" * 32


def strict(node: Any) -> Any:
    """Unknown fields forbidden wherever the schema lists the known ones (the API server would
    prune them silently; `kubectl apply --validate=strict` refuses them)."""
    if isinstance(node, dict):
        node = {k: strict(v) for k, v in node.items()}
        if "properties" in node and "additionalProperties" not in node \
                and not node.get("x-kubernetes-preserve-unknown-fields"):
            node["additionalProperties"] = False
        return node
    if isinstance(node, list):
        return [strict(v) for v in node]
    return node


def schema(kind: str) -> dict:
    return json.loads((SCHEMAS / f"{kind.lower()}.json").read_text())


def errors(obj: dict) -> list[str]:
    kind = obj.get("kind")
    if kind not in KINDS or obj.get("apiVersion") != API:
        return [f"not a Kueue {API} object: {obj.get('apiVersion')} {kind}"]
    found = [f"{kind}/{obj.get('metadata', {}).get('name')} {'.'.join(map(str, e.path))}: {e.message}"
             for e in jsonschema.Draft7Validator(strict(schema(kind))).iter_errors(obj)]
    meta = obj.get("metadata") or {}
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", meta.get("name", "")):
        found.append(f"{kind}: metadata.name {meta.get('name')!r} is not a DNS label")
    found += [f"{kind}: metadata.{k} is not a manifest field" for k in meta
              if k not in ("name", "namespace", "labels", "annotations")]
    if KINDS[kind] == "Cluster" and "namespace" in meta:
        found.append(f"{kind}/{meta['name']} is cluster-scoped but names namespace {meta['namespace']}")
    return found


def shipped() -> list[dict]:
    return [d for p in CLUSTER_FILES + COMPONENT_FILES for d in load_all(p)]


def _render(kustomization: dict) -> list[dict]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl not installed")
    with tempfile.TemporaryDirectory(dir=ROOT / "k8s", prefix=".render-") as tmp:
        (Path(tmp) / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
        out = subprocess.run(["kubectl", "kustomize", tmp], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def prod_namespace() -> str:
    return yaml.safe_load((ROOT / "k8s" / "overlays" / "prod" / "kustomization.yaml").read_text())["namespace"]


def rendered_cluster_objects() -> list[dict]:
    return _render({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                    "resources": ["../kueue"]})


def rendered_prod_with_queue() -> list[dict]:
    """An operator's overlay: prod plus the component, in prod's namespace."""
    return _render({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                    "namespace": prod_namespace(), "resources": ["../overlays/prod"],
                    "components": ["../components/kueue"]})


def one(docs: list[dict], kind: str) -> dict:
    (obj,) = by_kind(docs, kind)
    return obj


# ---------------------------------------------------------------- schemas


def test_the_stored_schemas_are_kueues_v1beta2() -> None:
    for kind, scope in KINDS.items():
        doc = schema(kind)
        assert f"{kind} kueue.x-k8s.io/v1beta2" in doc["$comment"] and "kubernetes-sigs/kueue" in doc["$comment"]
        assert doc["scope"] == scope
        assert {"apiVersion", "kind", "metadata", "spec"} <= set(doc["properties"])
        jsonschema.Draft7Validator.check_schema(strict(doc))


@pytest.mark.parametrize("path", CLUSTER_FILES + COMPONENT_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_each_shipped_kueue_object_is_strictly_valid(path: Path) -> None:
    docs = load_all(path)
    assert docs
    for obj in docs:
        assert errors(obj) == []


def test_the_rendered_objects_are_valid_and_scoped() -> None:
    cluster = rendered_cluster_objects()
    assert Counter(d["kind"] for d in cluster) == {"ResourceFlavor": 2, "ClusterQueue": 1}
    namespaced = [d for d in rendered_prod_with_queue() if d["kind"] in KINDS]
    assert [d["kind"] for d in namespaced] == ["LocalQueue"]
    assert namespaced[0]["metadata"]["namespace"] == prod_namespace()
    for obj in cluster + namespaced:
        assert errors(obj) == [], obj


@pytest.mark.parametrize("kind, edit, key", [
    ("ClusterQueue", lambda o: o["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0].update(
        nominalQouta=1), "nominalQouta"),
    ("ClusterQueue", lambda o: o["spec"].update(queueingStrategey="StrictFIFO"), "queueingStrategey"),
    ("ResourceFlavor", lambda o: o["spec"].update(nodeLabel={"a": "b"}), "nodeLabel"),
    ("LocalQueue", lambda o: o["spec"].update(clusterQueu="x"), "clusterQueu"),
], ids=["quota", "strategy", "flavor-labels", "local-queue"])
def test_a_misspelled_field_fails(kind: str, edit: Any, key: str) -> None:
    obj = json.loads(json.dumps(by_kind(shipped(), kind)[0]))
    edit(obj)
    found = errors(obj)
    assert found and any(f"'{key}' was unexpected" in e for e in found), found


def test_a_bad_value_fails() -> None:
    queue = json.loads(json.dumps(one(shipped(), "ClusterQueue")))
    queue["spec"]["queueingStrategy"] = "Random"
    queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"] = "lots"
    found = errors(queue)
    assert any("queueingStrategy" in e for e in found) and any("nominalQuota" in e for e in found), found


# ---------------------------------------------------------------- what the CEL rules and Kueue check


def test_queues_and_flavors_refer_to_each_other() -> None:
    docs = shipped()
    flavors = {f["metadata"]["name"]: f for f in by_kind(docs, "ResourceFlavor")}
    queue = one(docs, "ClusterQueue")
    assert one(docs, "LocalQueue")["spec"]["clusterQueue"] == queue["metadata"]["name"]
    # LocalQueue names a label value `halluscope submit --queue` can set
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", one(docs, "LocalQueue")["metadata"]["name"])
    used = []
    for group in queue["spec"]["resourceGroups"]:
        for flavor in group["flavors"]:
            # CEL: every flavor covers exactly the group's resources (Kueue wants the same order)
            assert [r["name"] for r in flavor["resources"]] == group["coveredResources"], flavor["name"]
            used.append(flavor["name"])
    assert sorted(used) == sorted(flavors)
    # the prod overlay's namespace may use the quota
    assert queue["spec"]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": prod_namespace()}}


def test_the_gpu_flavor_follows_the_prod_overlay() -> None:
    """Its node label is the one prod's GPU pods select, and only a pod with the GPU toleration
    `halluscope submit` (and prod) gives GPU groups may take it."""
    flavors = {f["metadata"]["name"]: f["spec"] for f in by_kind(shipped(), "ResourceFlavor")}
    gpu = flavors["h100"]
    prod_selectors = [s["nodeSelector"] for obj in kubectl_kustomize("prod") if obj["kind"] == "RayJob"
                      for s in _pod_specs(obj) if s.get("nodeSelector")]
    assert prod_selectors == [gpu["nodeLabels"]]
    assert gpu["nodeLabels"] == {"node.kubernetes.io/instance-type": node_types()["gpu-worker"]["aws_instance_type"]}
    assert all(_tolerates([GPU_TOLERATION], taint) for taint in gpu["nodeTaints"])
    assert not any(_tolerates([], taint) for taint in gpu["nodeTaints"])
    assert not flavors["cpu-nodes"]


# ---------------------------------------------------------------- admission of a queued RayJob


def _pod_specs(obj: dict) -> Iterator[dict]:
    from tests.unit.test_deploy_files import pod_specs

    for _, spec in pod_specs(obj):
        yield spec


def _tolerates(tolerations: list[dict], taint: dict) -> bool:
    return any((not t.get("key") and t.get("operator") == "Exists")
               or (t.get("key") == taint["key"] and t.get("effect") in (None, "", taint["effect"])
                   and (t.get("operator") == "Exists" or t.get("value") == taint.get("value")))
               for t in tolerations)


def _quantity(value: Any) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(m|Mi|Gi|Ti)?", str(value))
    assert m, value
    return float(m.group(1)) * {None: 1, "m": 1e-3, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}[m.group(2)]


def pod_sets(job: dict) -> list[tuple[str, int, dict]]:
    """(name, count, pod spec) as Kueue's RayJob integration builds them: the head, each worker
    group at its replicas, and the submitter Job's pod (K8sJobMode)."""
    cluster = cluster_spec(job)
    sets = [("head", 1, cluster["headGroupSpec"]["template"]["spec"])]
    sets += [(g["groupName"], g["replicas"], g["template"]["spec"]) for g in cluster["workerGroupSpecs"]]
    if job["spec"].get("submissionMode") == "K8sJobMode":
        sets.append(("submitter", 1, job["spec"]["submitterPodTemplate"]["spec"]))
    return sets


def admit(job: dict, queue: dict, flavors: dict[str, dict]) -> dict[str, Counter]:
    """Each pod set's requests under the first flavor whose taints it tolerates (Kueue's flavor
    assignment, quota permitting); every requested resource must be covered."""
    (group,) = queue["spec"]["resourceGroups"]
    usage: dict[str, Counter] = {f["name"]: Counter() for f in group["flavors"]}
    for name, count, spec in pod_sets(job):
        requests: Counter = Counter()
        for c in spec["containers"]:
            for resource, value in (c.get("resources", {}).get("requests") or {}).items():
                requests[resource] += _quantity(value) * count
        assert set(requests) <= set(group["coveredResources"]), (name, set(requests) - set(group["coveredResources"]))
        flavor = next(f["name"] for f in group["flavors"]
                      if all(_tolerates(spec.get("tolerations", []), t) for t in flavors[f["name"]].get("nodeTaints", [])))
        usage[flavor] += requests
    return usage


def quotas(queue: dict) -> dict[str, dict[str, float]]:
    (group,) = queue["spec"]["resourceGroups"]
    return {f["name"]: {r["name"]: _quantity(r["nominalQuota"]) for r in f["resources"]} for f in group["flavors"]}


def queued(gpus: int | None) -> dict:
    job = build_rayjob(load_template(None, ROOT), name="halluscope-a", config_uri="s3://b/c.yaml",
                       fingerprint="0" * 16, image=PINNED)
    apply_queue(job, "halluscope", gpus, None)
    return job


def fits(usage: dict[str, Counter], quota: dict[str, dict[str, float]], runs: int = 1) -> bool:
    return all(used * runs <= quota[flavor][resource] + 1e-9
               for flavor, counter in usage.items() for resource, used in counter.items())


def test_a_queued_run_is_admitted_for_exactly_its_gpu_budget() -> None:
    docs = shipped()
    queue = one(docs, "ClusterQueue")
    flavors = {f["metadata"]["name"]: f["spec"] for f in by_kind(docs, "ResourceFlavor")}
    quota = quotas(queue)
    gpu_quota = quota["h100"]["nvidia.com/gpu"]
    for gpus in (0, 8, int(gpu_quota)):
        usage = admit(queued(gpus), queue, flavors)
        assert usage["h100"]["nvidia.com/gpu"] == gpus  # the run's cluster.gpus = what it holds of the quota
        assert usage["cpu-nodes"]["nvidia.com/gpu"] == 0
        assert fits(usage, quota), (gpus, usage)
    # A budget beyond the queue's GPU quota is never admitted.
    assert not fits(admit(queued(int(gpu_quota) + 8), queue, flavors), quota)


def test_the_quota_arithmetic_in_the_comments() -> None:
    """GPU flavor: the one gpu-worker pod of cluster/node_types.yaml that 3 x p5 leave beside the
    RayService at its maximum; CPU flavor: one run at the CPU group's full size with its head and
    submitter."""
    docs = shipped()
    queue = one(docs, "ClusterQueue")
    flavors = {f["metadata"]["name"]: f["spec"] for f in by_kind(docs, "ResourceFlavor")}
    quota = quotas(queue)
    gpu = node_types()["gpu-worker"]
    assert quota["h100"] == {"nvidia.com/gpu": gpu["gpus"], "cpu": gpu["cpus"], "memory": gpu["memory_gib"] * 2**30,
                             "ephemeral-storage": gpu["ephemeral_gib"] * 2**30}
    cpu_run = admit(queued(0), queue, flavors)["cpu-nodes"]
    assert cpu_run["cpu"] == 136.5 and cpu_run["memory"] == 544.5 * 2**30
    assert quota["cpu-nodes"]["cpu"] == math.ceil(cpu_run["cpu"])
    assert quota["cpu-nodes"]["memory"] == math.ceil(cpu_run["memory"] / 2**30) * 2**30
    assert fits({"cpu-nodes": cpu_run}, quota, runs=1) and not fits({"cpu-nodes": cpu_run}, quota, runs=2)


# ---------------------------------------------------------------- one picture: `halluscope kueue`


def described(nodes: int):
    from halluscope.config.load import load_config

    cluster = load_config(str(ROOT / "jobs" / "configs" / "halogen-all-domains.yaml")).cluster
    return cluster.model_copy(update={"nodes": [g.model_copy(update={"count": nodes}) for g in cluster.nodes]})


@pytest.mark.parametrize("nodes, service_pods, run_gpus", [(3, (2, 2), 8), (4, (2, 2), 16)])
def test_the_rendered_quota_admits_only_runs_whose_pods_fit_beside_the_service_at_its_maximum(
        nodes: int, service_pods: tuple[int, int], run_gpus: int) -> None:
    """The shipped RayService (serve/*.yaml: the judge 1-2 x TP4, the extractor 1 x TP8) on 3 and
    4 p5 nodes: the objects are valid v1beta2 ones, and as many runs as the quota admits at once
    (each 8 GPUs: one pod) place their pods on the nodes the service leaves at its maximum, by the
    project's own placement rules; one run more is not admitted."""
    from halluscope.kueue import picture
    from halluscope.resolve.nodes import Demand, Layout

    drawn = picture(described(nodes), ROOT)
    assert (drawn.service_pods, drawn.run_gpus) == (service_pods, run_gpus)
    for obj in drawn.objects:
        assert errors(obj) == [], obj
    queue = one(drawn.objects, "ClusterQueue")
    flavors = {f["metadata"]["name"]: f["spec"] for f in by_kind(drawn.objects, "ResourceFlavor")}
    usage = admit(queued(8), queue, flavors)
    admitted = max(n for n in range(1, 10) if fits(usage, quotas(queue), runs=n))
    assert admitted == drawn.runs == run_gpus // 8
    nodes_left = Layout.of(described(nodes), service_at_most=True)
    assert nodes_left is not None
    assert nodes_left.take(Demand("runs", "H100", 8.0, admitted))  # each run's pod of 8 on a node of its own
    assert not nodes_left.take(Demand("one more", "H100", 8.0, 1))


def test_two_nodes_are_refused_with_what_holds_them() -> None:
    from halluscope.errors import ConfigError
    from halluscope.kueue import picture

    with pytest.raises(ConfigError, match=r"at its maximum replicas leaves the runs no pod of 8 GPUs: 2 nodes"):
        picture(described(2), ROOT)


def test_the_checkout_is_what_the_manifests_default_config_renders(capsys) -> None:
    """k8s/kueue and the RayService's GPU group bounds are `halluscope kueue`'s rendering of the
    config the manifests run by default; a checkout that differs is named, difference by difference."""
    from halluscope.cli import main
    from halluscope.kueue import differences, picture, rayservice_bounds

    config = str(ROOT / "jobs" / "configs" / "halogen-all-domains.yaml")
    assert main(["kueue", config, "--check"]) == 0
    assert "the RayService: 2 to 2 GPU pods; the runs: 8 GPUs, 1 run(s) at once; the checkout agrees" in \
        capsys.readouterr().out
    four = picture(described(4), ROOT)
    found = differences(one(four.objects, "ClusterQueue"), one(shipped(), "ClusterQueue"), "ClusterQueue halluscope")
    assert found == [
        "ClusterQueue halluscope.spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: 8, the description "
        "gives 16",
        "ClusterQueue halluscope.spec.resourceGroups[0].flavors[0].resources[1].nominalQuota: 176, the description "
        "gives 352",
        "ClusterQueue halluscope.spec.resourceGroups[0].flavors[0].resources[2].nominalQuota: '1800Gi', the "
        "description gives '3600Gi'",
        "ClusterQueue halluscope.spec.resourceGroups[0].flavors[0].resources[3].nominalQuota: '500Gi', the "
        "description gives '1000Gi'",
        "ClusterQueue halluscope.spec.resourceGroups[0].flavors[1].resources[1].nominalQuota: 137, the description "
        "gives 273",
        "ClusterQueue halluscope.spec.resourceGroups[0].flavors[1].resources[2].nominalQuota: '545Gi', the "
        "description gives '1089Gi'"]
    service = yaml.safe_load((ROOT / "k8s" / "service" / "rayservice.yaml").read_text())
    assert rayservice_bounds(service, (2, 2)) == []
    assert rayservice_bounds(service, (2, 3)) == [
        "its gpu-worker group has minReplicas/replicas/maxReplicas 2/2/2; the description gives 2/2/3"]


