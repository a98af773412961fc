"""k8s/policy's ValidatingAdmissionPolicy, its CEL evaluated here (cel-python) as the API server
evaluates it: variables first, then each validation, against the RayJob `halluscope submit`
builds (admitted) and against RayJobs that reach for the shared RayService's Secret, cloud role or
NetworkPolicy label (each refused with its own message)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import celpy
import pytest
import yaml
from tests.unit.test_deploy_files import load_all

from halluscope.kuberay import build_rayjob, load_template

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "k8s" / "policy" / "admission.yaml"


def policy() -> dict:
    (found,) = [d for d in load_all(POLICY) if d["kind"] == "ValidatingAdmissionPolicy"]
    return found


def refusals(job: dict) -> list[str]:
    """The messages of the validations ``job`` fails, in order; [] when it is admitted."""
    spec = policy()["spec"]
    env = celpy.Environment()
    activation: dict = {"object": celpy.json_to_cel(job)}
    variables: dict = {}
    for v in spec["variables"]:
        activation["variables"] = celpy.celtypes.MapType(variables)
        variables[celpy.celtypes.StringType(v["name"])] = env.program(env.compile(v["expression"])).evaluate(activation)
    activation["variables"] = celpy.celtypes.MapType(variables)
    out = []
    for rule in spec["validations"]:
        verdict = env.program(env.compile(rule["expression"])).evaluate(activation)
        assert isinstance(verdict, celpy.celtypes.BoolType), (rule["expression"], verdict)
        if not verdict:
            out.append(rule["message"])
    return out


def submitted() -> dict:
    return build_rayjob(load_template(None, ROOT), name="halluscope-a", config_uri="s3://b/c.yaml",
                        fingerprint="0" * 16)


def _gpu_pod(job: dict) -> dict:
    (gpu,) = [g for g in job["spec"]["rayClusterSpec"]["workerGroupSpecs"] if g["groupName"] == "gpu-worker"]
    return gpu["template"]


def test_the_rayjob_submit_builds_is_admitted_and_the_policy_matches_rayjobs() -> None:
    assert refusals(submitted()) == []
    rules = policy()["spec"]["matchConstraints"]["resourceRules"]
    assert rules == [{"apiGroups": ["ray.io"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
                      "resources": ["rayjobs"]}]
    (binding,) = [d for d in load_all(POLICY) if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert binding["spec"] == {"policyName": policy()["metadata"]["name"], "validationActions": ["Deny"]}


SECRET = "a run's RayJob may not read Secret halluscope-service"
ACCOUNT = "a run's RayJob may not run as ServiceAccount halluscope-service"
LABEL = "a run's RayJob may not label its pods halluscope.io/component=service"


def _env(job: dict) -> None:
    _gpu_pod(job)["spec"]["containers"][0].setdefault("env", []).append(
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "halluscope-service", "key": "auth_token"}}})


def _env_from(job: dict) -> None:
    job["spec"]["submitterPodTemplate"]["spec"]["containers"][0]["envFrom"] = [
        {"secretRef": {"name": "halluscope-service"}}]


def _volume(job: dict) -> None:
    _gpu_pod(job)["spec"].setdefault("volumes", []).append(
        {"name": "keys", "projected": {"sources": [{"secret": {"name": "halluscope-service"}}]}})


def _init_container(job: dict) -> None:
    _gpu_pod(job)["spec"]["initContainers"] = [{"name": "peek", "image": "busybox", "env": [
        {"name": "HF", "valueFrom": {"secretKeyRef": {"name": "halluscope-service", "key": "hf_token"}}}]}]


def _ray_token(job: dict) -> None:
    job["spec"]["rayClusterSpec"]["authOptions"]["secretName"] = "halluscope-service"


def _account(job: dict) -> None:
    job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["serviceAccountName"] = "halluscope-service"


def _label(job: dict) -> None:
    _gpu_pod(job).setdefault("metadata", {}).setdefault("labels", {})["halluscope.io/component"] = "service"


@pytest.mark.parametrize("edit, refused", [
    (_env, SECRET), (_env_from, SECRET), (_volume, SECRET), (_init_container, SECRET), (_ray_token, SECRET),
    (_account, ACCOUNT), (_label, LABEL)],
    ids=["env", "envFrom", "projected-volume", "init-container", "ray-token", "service-account", "label"])
def test_a_rayjob_reaching_for_the_service_is_refused(edit: Callable[[dict], None], refused: str) -> None:
    job = copy.deepcopy(submitted())
    edit(job)
    (message,) = refusals(job)
    assert message.startswith(refused)


def test_a_rayjob_with_its_own_secret_and_label_is_admitted() -> None:
    job = copy.deepcopy(submitted())
    _gpu_pod(job)["spec"]["containers"][0].setdefault("env", []).append(
        {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "halluscope-run", "key": "aws_access_key_id"}}})
    _gpu_pod(job).setdefault("metadata", {}).setdefault("labels", {})["halluscope.io/component"] = "run"
    assert refusals(job) == []


def test_the_policy_is_what_kubernetes_accepts() -> None:
    kv = pytest.importorskip("kubernetes_validate")
    for doc in yaml.safe_load_all(POLICY.read_text()):
        kv.validate(doc, "1.37", strict=True)
