"""Strict validation of every Kubernetes object in k8s/ with kubernetes-validate: core objects
as they are, and the pod templates inside RayJob/RayService/RayCluster as PodTemplates (the
CRDs embed core PodTemplateSpecs, so the same schema applies). Strict schemas forbid fields
Kubernetes does not define, so a misspelled field fails here instead of being dropped by the
API server (or by KubeRay's decoder) at deploy time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.unit.test_deploy_files import (
    RAY_KINDS,
    ROOT,
    base_manifests,
    cluster_spec,
    kubectl_kustomize,
    kustomize_with_components,
    load_all,
    overlay_manifests,
)

kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed (it is in the dev extra)")

# The Kubernetes API the pinned `kubernetes` client (37.x) speaks.
K8S_VERSION = "1.37"
# KubeRay's AutoscalerOptions fields that are core Container fields (the rest are KubeRay's own).
AUTOSCALER_CONTAINER_FIELDS = ("image", "imagePullPolicy", "resources", "securityContext", "env", "envFrom",
                               "volumeMounts")


def pod_templates(obj: dict) -> Iterator[tuple[str, dict]]:
    """(where, PodTemplateSpec) for each pod a Ray custom resource declares."""
    spec = obj["spec"]
    if obj["kind"] == "RayJob" and "submitterPodTemplate" in spec:
        yield "spec.submitterPodTemplate", spec["submitterPodTemplate"]
    prefix = {"RayCluster": "spec", "RayJob": "spec.rayClusterSpec", "RayService": "spec.rayClusterConfig"}[obj["kind"]]
    cluster = cluster_spec(obj)
    yield f"{prefix}.headGroupSpec.template", cluster["headGroupSpec"]["template"]
    for i, group in enumerate(cluster.get("workerGroupSpecs", [])):
        yield f"{prefix}.workerGroupSpecs.{i}.template", group["template"]
    auto = cluster.get("autoscalerOptions")
    if auto is not None:
        container = {"name": "autoscaler", "image": "placeholder",
                     **{k: auto[k] for k in AUTOSCALER_CONTAINER_FIELDS if k in auto}}
        yield f"{prefix}.autoscalerOptions", {"spec": {"containers": [container]}}


def as_pod_template(template: dict) -> dict:
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "check"}, "template": template}


def strict_errors(docs: list[dict]) -> tuple[list[str], int]:
    """Every strict-validation failure, named by object and path, and how many objects and
    pod templates were checked."""
    errors, checked = [], 0
    for obj in docs:
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        wrapped = obj["kind"] in RAY_KINDS
        targets = [(where, as_pod_template(t)) for where, t in pod_templates(obj)] if wrapped else [("", obj)]
        for where, target in targets:
            checked += 1
            try:
                kv.validate(target, K8S_VERSION, strict=True)
            except kv.ValidationError as err:
                # Inside a wrapper the path starts at the PodTemplate's `template` key.
                path = ".".join(str(p) for p in list(err.path)[wrapped:])
                errors.append(f"{name} {where}{' > ' if wrapped else ''}{path}: {err.message}")
            except kv.SchemaNotFoundError as err:
                errors.append(f"{name}: {err.message}")
    return errors, checked


def _rendered(overlay: str) -> Callable[[], list[dict]]:
    return lambda: kubectl_kustomize(overlay)


# (source, documents, objects + pod templates checked). The runs' base: ConfigMap 1; RBAC and
# accounts (ServiceAccounts submitter and run, Role, RoleBinding) 4; RayCluster head + 2 workers
# + autoscaler = 4; RayJob submitter + head + 2 workers + autoscaler = 5: 14. The service's
# (k8s/service): ConfigMap, NetworkPolicy, ServiceAccount 3; RayService head + 1 worker +
# autoscaler = 3: 6. 20 in all. Dev files: PVC, Deployment, Service, Job = 4. Dev rendered: the
# runs' side only, one GPU group fewer in RayJob and RayCluster (14 - 2 = 12), plus the 4 MinIO
# objects = 16. Prod rendered (prod and prod-service): 20. With the shared model cache: + its PVC.
SOURCES = [
    ("base", base_manifests, 20),
    ("policy", lambda: load_all(ROOT / "k8s" / "policy" / "admission.yaml"), 2),
    ("overlay-files", overlay_manifests, 4),
    ("rendered-dev", _rendered("dev"), 16),
    ("rendered-prod", _rendered("prod"), 20),
    ("rendered-prod-shared-cache", lambda: kustomize_with_components("prod", ["shared-model-cache"]), 21),
]


@pytest.mark.parametrize("load, expected", [(s[1], s[2]) for s in SOURCES], ids=[s[0] for s in SOURCES])
def test_every_object_and_pod_template_is_strictly_valid(load: Callable[[], list[dict]], expected: int) -> None:
    errors, checked = strict_errors(load())
    assert errors == []
    assert checked == expected


def _first(kind: str, docs: Callable[[], list[dict]] = base_manifests) -> dict:
    return next(d for d in docs() if d["kind"] == kind)


def _rename(node: dict, old: str, new: str) -> None:
    node[new] = node.pop(old)


# (object, edit, the misspelled key the error must name)
MISSPELLINGS: list[tuple[str, Callable[[], dict], Callable[[dict], Any], str]] = [
    ("RayJob submitter container", lambda: _first("RayJob"),
     lambda o: o["spec"]["submitterPodTemplate"]["spec"]["containers"][0].update(imagePullPolicyy="IfNotPresent"),
     "imagePullPolicyy"),
    ("RayCluster head pod", lambda: _first("RayCluster"),
     lambda o: _rename(o["spec"]["headGroupSpec"]["template"]["spec"], "securityContext", "securityContex"),
     "securityContex"),
    ("RayService worker container security", lambda: _first("RayService"),
     lambda o: _rename(o["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
                       ["securityContext"], "allowPrivilegeEscalation", "allowPrivilegeEscalaton"),
     "allowPrivilegeEscalaton"),
    ("RayJob autoscaler security", lambda: _first("RayJob"),
     lambda o: o["spec"]["rayClusterSpec"].update(autoscalerOptions={
         **o["spec"]["rayClusterSpec"]["autoscalerOptions"], "securityContext": {"runAsNonRot": True}}),
     "runAsNonRot"),
    ("ConfigMap", lambda: _first("ConfigMap"), lambda o: _rename(o, "data", "dta"), "dta"),
    ("MinIO Deployment container", lambda: _first("Deployment", overlay_manifests),
     lambda o: _rename(o["spec"]["template"]["spec"]["containers"][0], "readinessProbe", "readinesProbe"),
     "readinesProbe"),
]


@pytest.mark.parametrize("make, edit, key", [m[1:] for m in MISSPELLINGS], ids=[m[0] for m in MISSPELLINGS])
def test_a_misspelled_field_fails(make: Callable[[], dict], edit: Callable[[dict], Any], key: str) -> None:
    obj = make()
    assert strict_errors([obj])[0] == []
    # base_manifests() parses the YAML afresh, but YAML aliases share one object between pods:
    # the edit may reach several templates, and each must report it.
    edit(obj)
    errors, _ = strict_errors([obj])
    assert errors and all(f"'{key}' was unexpected" in e for e in errors), errors


def test_strictness_is_what_catches_it() -> None:
    """The non-strict schemas accept unknown fields: the tests above depend on strict=True."""
    obj = as_pod_template(_first("RayJob")["spec"]["submitterPodTemplate"])
    obj["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "IfNotPresent"
    kv.validate(obj, K8S_VERSION, strict=False)
    with pytest.raises(kv.ValidationError, match="'imagePullPolicyy' was unexpected"):
        kv.validate(obj, K8S_VERSION, strict=True)


def test_pinned_version_is_supported() -> None:
    assert kv.validate(_first("ConfigMap"), K8S_VERSION, strict=True) == K8S_VERSION
    assert Path(kv.__file__).parent.joinpath("kubernetes-json-schema", f"v{K8S_VERSION}.0-local-strict").is_dir()
