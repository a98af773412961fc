"""`halluscope submit --kuberay`: the RayJob it creates and how it follows it, against a fake
Kubernetes API server on 127.0.0.1 that answers the two paths the client uses."""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shlex
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import fsspec
import pytest
import yaml
from tests.unit.test_deploy_files import _check_pod_security, _check_ray_auth, env_of, pod_specs

from halluscope.errors import ConfigError, RunError
from halluscope.kuberay import MAX_NAME, build_rayjob, default_name, load_template, place_gpu_pods, submit
from halluscope.kuberay_cli import add_parser, main

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "jobs" / "configs" / "halogen-programs-14-models.yaml"
CONFIG_REL = "jobs/configs/halogen-programs-14-models.yaml"
TOKEN = "kube-test-token-8f3a1c9e5b7d"
CONTEXT_NS = "halluscope-dev"
COLLECTION = re.compile(r"^/apis/ray\.io/v1/namespaces/([^/]+)/rayjobs$")
ITEM = re.compile(r"^/apis/ray\.io/v1/namespaces/([^/]+)/rayjobs/([^/]+)$")
CRD = re.compile(r"^/apis/apiextensions\.k8s\.io/v1/customresourcedefinitions/([^/]+)$")
ACCOUNT = re.compile(r"^/api/v1/namespaces/([^/]+)/serviceaccounts/([^/]+)$")
OBJECTS = Path(__file__).parent / "k8s_objects"


def recorded(name: str) -> dict:
    return json.loads((OBJECTS / name).read_text())


def account(name: str, role: bool = True) -> dict:
    annotations = {"eks.amazonaws.com/role-arn": f"arn:aws:iam::111122223333:role/{name}"} if role else {}
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "annotations": annotations}}

INIT = {"jobDeploymentStatus": "Initializing"}
PENDING = {"jobDeploymentStatus": "Running", "jobStatus": "PENDING", "jobId": "raysubmit_1"}
RUNNING = {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING", "jobId": "raysubmit_1"}
COMPLETE = {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED", "jobId": "raysubmit_1"}
FAILED = {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED", "reason": "AppFailed",
          "message": "Job entrypoint command failed with exit code 2"}


@dataclass
class FakeKube:
    """In-memory RayJob store. Each GET of a RayJob answers the next status of `script` (the
    last one repeats); `get_errors` answers the first GETs with these HTTP codes instead, and
    `post_error` answers every POST with that code."""

    script: list[dict] = field(default_factory=lambda: [INIT, INIT, PENDING, RUNNING, COMPLETE])
    get_errors: list[int] = field(default_factory=list)
    post_error: int | None = None
    store: dict[tuple[str, str], dict] = field(default_factory=dict)
    requests: list[dict] = field(default_factory=list)
    reads: int = 0
    url: str = ""
    # what the preflight reads: a cluster with what the RayJob needs (KubeRay 1.7, Kueue, a p5 whose
    # NVMe disks back the kubelet's storage, the pods' ServiceAccount with an IAM role)
    crds: dict[str, dict] = field(default_factory=lambda: {
        "rayjobs.ray.io": recorded("crd-rayjobs-kuberay-v1.7.0.json"),
        "localqueues.kueue.x-k8s.io": recorded("crd-localqueues-kueue.json")})
    nodes: list[dict] = field(default_factory=lambda: [recorded("nodes-eks-p5.json")["raid0"]])
    accounts: dict[str, dict] = field(default_factory=lambda: {"halluscope-run": account("halluscope-run")})


def _status_body(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


def _handler(kube: FakeKube) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep pytest output clean
            pass

        def _answer(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _record(self, body: Any = None) -> tuple[str, dict]:
            parts = urlsplit(self.path)
            kube.requests.append({"method": self.command, "path": parts.path, "query": parse_qs(parts.query),
                                  "authorization": self.headers.get("Authorization"), "body": body})
            return parts.path, parse_qs(parts.query)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            path, _ = self._record(body)
            m = COLLECTION.match(path)
            if not m:
                return self._answer(404, _status_body(404, "NotFound", "the server could not find the requested resource"))
            if kube.post_error:
                return self._answer(kube.post_error, _status_body(kube.post_error, "Refused", f"refused with {kube.post_error}"))
            key = (m.group(1), body["metadata"]["name"])
            if key in kube.store:
                return self._answer(409, _status_body(409, "AlreadyExists", f'rayjobs.ray.io "{key[1]}" already exists'))
            obj = json.loads(json.dumps(body))
            obj["metadata"].update({"uid": "0b5c", "resourceVersion": "1", "creationTimestamp": "2025-01-01T00:00:00Z"})
            kube.store[key] = obj
            self._answer(201, obj)

        def do_GET(self) -> None:
            path, _ = self._record()
            found: Any = None
            if (c := CRD.match(path)) is not None:
                found = kube.crds.get(c.group(1))
            elif path == "/api/v1/nodes":
                found = {"apiVersion": "v1", "kind": "NodeList", "items": kube.nodes}
            elif (a := ACCOUNT.match(path)) is not None:
                found = kube.accounts.get(a.group(2))
            if CRD.match(path) or ACCOUNT.match(path) or path == "/api/v1/nodes":
                return self._answer(200, found) if found is not None else self._answer(
                    404, _status_body(404, "NotFound", f"{path} not found"))
            m = ITEM.match(path)
            if not m or (m.group(1), m.group(2)) not in kube.store:
                return self._answer(404, _status_body(404, "NotFound", "rayjobs.ray.io not found"))
            if kube.get_errors:
                code = kube.get_errors.pop(0)
                return self._answer(code, _status_body(code, "ServiceUnavailable", "etcd leader changed"))
            obj = kube.store[(m.group(1), m.group(2))]
            obj["status"] = kube.script[min(kube.reads, len(kube.script) - 1)]
            kube.reads += 1
            self._answer(200, obj)

    return Handler


@pytest.fixture()
def kube() -> Iterator[FakeKube]:
    state = FakeKube()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture()
def kubeconfig(kube: FakeKube, tmp_path: Path) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": kube.url}}],
        "users": [{"name": "tester", "user": {"token": TOKEN}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester", "namespace": CONTEXT_NS}}],
    }))
    return str(path)


def run_submit(kubeconfig: str, config: str = str(CONFIG), **kw: Any) -> tuple[dict, list[str]]:
    logs: list[str] = []
    kw.setdefault("poll_s", 0.01)
    # The base manifest names its images by tag; digests are checked in test_kuberay_operator.py.
    kw.setdefault("allow_tag_image", True)
    result = submit(config, kubeconfig=kubeconfig, log=logs.append, **kw)
    return result, logs


def created(kube: FakeKube) -> dict:
    (post,) = [r for r in kube.requests if r["method"] == "POST"]
    return post["body"]


# ---------------------------------------------------------------- the created object


def test_creates_the_base_rayjob_for_the_config(kube: FakeKube, kubeconfig: str) -> None:
    result, logs = run_submit(kubeconfig, name="halluscope-run-1")
    job = created(kube)
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    assert job["metadata"]["name"] == "halluscope-run-1" and job["metadata"]["namespace"] == CONTEXT_NS
    assert job["metadata"]["labels"]["app.kubernetes.io/part-of"] == "halluscope"
    assert job["metadata"]["annotations"]["halluscope.io/config"] == CONFIG_REL
    # The entrypoint stays the manifest's; the submitter's env now holds the URI literally
    # (relative to the checkout: the image's WORKDIR is a copy of it).
    assert job["spec"]["entrypoint"] == ("python jobs/evaluate.py --config '$(HALLUSCOPE_CONFIG)' "
                                         "--run-id '$(HALLUSCOPE_RUN_ID)'")
    (submitter,) = job["spec"]["submitterPodTemplate"]["spec"]["containers"]
    assert env_of(submitter)["HALLUSCOPE_CONFIG"] == {"name": "HALLUSCOPE_CONFIG", "value": CONFIG_REL}
    # Everything else is the base manifest: token auth, pod security, secrets by reference.
    _check_ray_auth([job])
    assert _check_pod_security([job]) == {"RayJob"}
    base = load_template(None, ROOT)
    place_gpu_pods(base["spec"])  # GPU pods go to GPU nodes (test_kuberay_operator.py)
    for key in ("runtimeEnvYAML", "rayClusterSpec", "submissionMode", "backoffLimit", "shutdownAfterJobFinishes",
                "preRunningDeadlineSeconds", "activeDeadlineSeconds"):
        assert job["spec"][key] == base["spec"][key], key
    assert job["spec"]["rayClusterSpec"]["authOptions"] == {"mode": "token", "secretName": "halluscope-run"}
    assert result == {"name": "halluscope-run-1", "namespace": CONTEXT_NS, "status": COMPLETE}
    # The config writes under ./runs: inside the pods, gone with the cluster.
    assert logs[0].startswith("warning: storage.root file://./runs is local to the run's pods")


def test_bearer_token_is_sent_and_never_shown(kube: FakeKube, kubeconfig: str) -> None:
    result, logs = run_submit(kubeconfig)
    assert kube.requests and all(r["authorization"] == f"Bearer {TOKEN}" for r in kube.requests)
    for shown in (json.dumps(result), "\n".join(logs), json.dumps(created(kube))):
        assert TOKEN not in shown


def test_create_asks_for_strict_field_validation(kube: FakeKube, kubeconfig: str) -> None:
    run_submit(kubeconfig)
    (post,) = [r for r in kube.requests if r["method"] == "POST"]
    assert post["path"] == f"/apis/ray.io/v1/namespaces/{CONTEXT_NS}/rayjobs"
    assert post["query"]["fieldValidation"] == ["Strict"]


def test_default_name_is_a_kuberay_job_name(kube: FakeKube, kubeconfig: str) -> None:
    from halluscope.config.load import load_config

    run_submit(kubeconfig)
    name = created(kube)["metadata"]["name"]
    fingerprint = load_config(str(CONFIG)).fingerprint()
    assert re.fullmatch(rf"halluscope-{fingerprint[:8]}-\d{{6}}-\d{{6}}", name), name
    assert len(name) == 33 <= MAX_NAME  # "halluscope-" 11 + 8 + "-" 1 + "yymmdd-HHMMSS" 13
    assert created(kube)["metadata"]["labels"]["halluscope.io/fingerprint"] == fingerprint
    # 2025-01-02 03:04:05 UTC is 1735787045 s after the epoch.
    assert default_name("0123456789abcdef", 1735787045) == "halluscope-01234567-250102-030405"


def test_remote_uri_image_and_namespace_override(kube: FakeKube, kubeconfig: str) -> None:
    uri = "memory://halluscope-test/configs/run.yaml"
    doc = yaml.safe_load(CONFIG.read_text())
    doc["storage"] = {"root": "s3://halluscope/runs"}
    with fsspec.open(uri, "w") as f:
        f.write(yaml.safe_dump(doc))
    image = "registry.example/halluscope@sha256:" + "5e" * 32
    result, logs = run_submit(kubeconfig, config=uri, image=image, namespace="halluscope")
    assert not any(line.startswith("warning:") for line in logs)
    job = created(kube)
    assert result["namespace"] == job["metadata"]["namespace"] == "halluscope"
    assert [r for r in kube.requests if r["path"].startswith("/apis/ray.io")][0]["path"] == "/apis/ray.io/v1/namespaces/halluscope/rayjobs"
    (submitter,) = job["spec"]["submitterPodTemplate"]["spec"]["containers"]
    assert env_of(submitter)["HALLUSCOPE_CONFIG"]["value"] == uri
    images = {c["image"] for _, spec in pod_specs(job) for c in spec["containers"]}
    assert images == {image}
    # 1 submitter + 1 head + 2 worker groups, each pod spec one container.
    assert sum(len(spec["containers"]) for _, spec in pod_specs(job)) == 4


def test_manifest_namespace_and_rendered_overlay(kube: FakeKube, kubeconfig: str, tmp_path: Path) -> None:
    """A rendered multi-document file (as `kubectl kustomize` prints it): its RayJob and namespace."""
    job = load_template(None, ROOT)
    job["metadata"]["namespace"] = "halluscope-prod"
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(yaml.safe_dump_all([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}, job]))
    result, _ = run_submit(kubeconfig, manifest=str(rendered))
    assert result["namespace"] == created(kube)["metadata"]["namespace"] == "halluscope-prod"


# ---------------------------------------------------------------- the run id across attempts


def _evaluate_module() -> Any:
    spec = importlib.util.spec_from_file_location("halluscope_job_evaluate", ROOT / "jobs" / "evaluate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def attempt_argv(job: dict) -> list[str]:
    """The `halluscope run` arguments one attempt of this RayJob runs. KubeRay (K8sJobMode) names
    the submitter Job after the RayJob and runs `bash -c '... ray job submit -- <entrypoint>'`;
    the Job controller labels the pod with the Job's name; Kubernetes resolves the env (literal
    values and downward-API fields) and substitutes $(VAR) in the command; bash splits words."""
    labels = {"batch.kubernetes.io/job-name": job["metadata"]["name"]}
    (container,) = job["spec"]["submitterPodTemplate"]["spec"]["containers"]
    env = {}
    for e in container["env"]:
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "fieldRef" in e.get("valueFrom", {}):
            m = re.fullmatch(r"metadata\.labels\['([^']+)'\]", e["valueFrom"]["fieldRef"]["fieldPath"])
            assert m, e
            env[e["name"]] = labels[m.group(1)]
    command = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)),
                     job["spec"]["entrypoint"])
    words = shlex.split(command)
    assert words[:2] == ["python", "jobs/evaluate.py"], words
    return _evaluate_module().cli_argv(words[2:])


def test_a_resubmitted_rayjob_resumes_its_run(kube: FakeKube, kubeconfig: str) -> None:
    """The run id is the RayJob's name: a KubeRay retry (same object, new submitter Job) and a
    second submission of the same name both run `halluscope run --run-id <name>`, which
    resumes the run; another name is another run."""
    kube.script = [INIT, RUNNING, FAILED]
    with pytest.raises(RunError):
        run_submit(kubeconfig, name="halluscope-resume")
    first = created(kube)
    expected = ["run", CONFIG_REL, "--quiet", "--run-id", "halluscope-resume"]
    assert attempt_argv(first) == expected
    # KubeRay retries with the same RayJob: the submitter it makes again reads the same name.
    stored = kube.store[(CONTEXT_NS, "halluscope-resume")]
    assert attempt_argv(stored) == expected
    # The RayJob is gone (ttlSecondsAfterFinished) and the same name is submitted again.
    del kube.store[(CONTEXT_NS, "halluscope-resume")]
    kube.requests.clear()
    kube.script, kube.reads = [INIT, RUNNING, COMPLETE], 0
    run_submit(kubeconfig, name="halluscope-resume")
    assert attempt_argv(created(kube)) == expected
    kube.requests.clear()
    run_submit(kubeconfig, name="halluscope-other")
    assert attempt_argv(created(kube))[-1] == "halluscope-other"


def test_the_config_run_id_names_the_rayjob(kube: FakeKube, kubeconfig: str) -> None:
    uri = "memory://halluscope-test/configs/with-run-id.yaml"
    doc = yaml.safe_load(CONFIG.read_text())
    doc.update(run_id="halogen-programs-1", storage={"root": "s3://halluscope/runs"})
    with fsspec.open(uri, "w") as f:
        f.write(yaml.safe_dump(doc))
    result, _ = run_submit(kubeconfig, config=uri)
    assert result["name"] == "halogen-programs-1"
    assert attempt_argv(created(kube)) == ["run", uri, "--quiet", "--run-id", "halogen-programs-1"]
    with pytest.raises(ConfigError, match="differs from the config's run_id halogen-programs-1"):
        run_submit(kubeconfig, config=uri, name="halluscope-x")


def test_the_entrypoint_refuses_an_unsubstituted_value(capsys: pytest.CaptureFixture[str]) -> None:
    """A submitter without HALLUSCOPE_RUN_ID would pass the literal text: one id for every run."""
    with pytest.raises(SystemExit):
        _evaluate_module().cli_argv(["--config", "s3://b/c.yaml", "--run-id", "$(HALLUSCOPE_RUN_ID)"])
    assert "was not substituted" in capsys.readouterr().err


def test_a_manifest_without_the_run_id_is_refused(tmp_path: Path) -> None:
    job = load_template(None, ROOT)
    job["spec"]["entrypoint"] = "python jobs/evaluate.py --config '$(HALLUSCOPE_CONFIG)'"
    with pytest.raises(ConfigError, match="every retry starts the run over"):
        build_rayjob(job, name="halluscope-a", config_uri="s3://b/c.yaml", fingerprint="0" * 16)


# ---------------------------------------------------------------- following the status


@pytest.mark.parametrize("script, get_errors, transitions", [
    # Repeated statuses are logged once: 5 reads, 4 transitions.
    ([INIT, INIT, PENDING, RUNNING, COMPLETE], [],
     ["Initializing", "Running (Ray job PENDING)", "Running (Ray job RUNNING)", "Complete (Ray job SUCCEEDED)"]),
    # backoffLimit: a failed attempt is retried on a fresh cluster; Retrying is not the end.
    ([INIT, {"jobDeploymentStatus": "Retrying", "failed": 1}, {}, INIT, RUNNING, COMPLETE], [],
     ["Initializing", "Retrying", "New", "Initializing", "Running (Ray job RUNNING)", "Complete (Ray job SUCCEEDED)"]),
    # Two failed reads (API server blips) are retried, not fatal.
    ([INIT, COMPLETE], [503, 500], ["Initializing", "Complete (Ray job SUCCEEDED)"]),
], ids=["plain", "retrying", "read-errors"])
def test_follows_transitions_to_complete(kube: FakeKube, kubeconfig: str, script: list[dict],
                                         get_errors: list[int], transitions: list[str]) -> None:
    kube.script, kube.get_errors = script, list(get_errors)
    result, logs = run_submit(kubeconfig, name="halluscope-follow")
    states = [line.split(": ", 1)[1] for line in logs if line.startswith(f"RayJob {CONTEXT_NS}/halluscope-follow: ")
              and "status read failed" not in line]
    assert states == transitions
    assert sum("status read failed" in line for line in logs) == len(get_errors)
    assert result["status"] == COMPLETE
    assert kube.reads == len(script)


@pytest.mark.parametrize("final, expected", [
    (FAILED, r"ended Failed \(Ray job FAILED\): AppFailed: Job entrypoint command failed with exit code 2"),
    ({"jobDeploymentStatus": "Failed", "reason": "DeadlineExceeded", "message": "activeDeadlineSeconds reached"},
     r"ended Failed: DeadlineExceeded: activeDeadlineSeconds reached"),
    # Older operators: the Ray job failed but the deployment reads Complete.
    ({"jobDeploymentStatus": "Complete", "jobStatus": "FAILED"}, r"ended Complete \(Ray job FAILED\); details"),
], ids=["app-failed", "deadline", "complete-but-failed"])
def test_failure_raises_run_error_with_the_status_message(kube: FakeKube, kubeconfig: str, final: dict,
                                                          expected: str) -> None:
    kube.script = [INIT, RUNNING, final]
    logs: list[str] = []
    with pytest.raises(RunError, match=expected) as info:
        submit(str(CONFIG), kubeconfig=kubeconfig, name="halluscope-fail", poll_s=0.01, allow_tag_image=True,
               log=logs.append)
    assert f"kubectl -n {CONTEXT_NS} describe rayjob halluscope-fail" in str(info.value)
    assert TOKEN not in str(info.value) + "\n".join(logs)


def test_no_wait_returns_after_create(kube: FakeKube, kubeconfig: str) -> None:
    result, logs = run_submit(kubeconfig, name="halluscope-nowait", wait=False)
    assert [r["method"] for r in kube.requests if r["path"].startswith("/apis/ray.io")] == ["POST"]
    assert result == {"name": "halluscope-nowait", "namespace": CONTEXT_NS, "status": {}}
    assert "kubectl -n halluscope-dev get rayjob halluscope-nowait -w" in logs[-1]


def test_timeout_stops_following(kube: FakeKube, kubeconfig: str) -> None:
    kube.script = [RUNNING]
    with pytest.raises(RunError, match=r"did not finish within 0\.05 s \(now Running \(Ray job RUNNING\)\); it keeps running"):
        run_submit(kubeconfig, name="halluscope-slow", timeout_s=0.05)


@pytest.mark.parametrize("setup, expected", [
    ({"post_error": 403}, r"HTTP 403: refused with 403\); the credentials may not create rayjobs\.ray\.io"),
    ({"post_error": 404}, r"HTTP 404: .*is the KubeRay operator installed\?"),
    ({"existing": True}, r"HTTP 409: rayjobs\.ray\.io \"halluscope-dup\" already exists\); .*pass another --name"),
    ({"get_errors": [503] * 5}, r"cannot read RayJob halluscope-dev/halluscope-dup after 5 attempts"),
    ({"get_errors": [401]}, r"cannot read RayJob halluscope-dev/halluscope-dup \(HTTP 401"),
], ids=["forbidden", "no-crd", "exists", "api-down", "unauthorized-read"])
def test_api_errors_name_the_cause(kube: FakeKube, kubeconfig: str, setup: dict, expected: str) -> None:
    kube.post_error = setup.get("post_error")
    kube.get_errors = list(setup.get("get_errors", []))
    if setup.get("existing"):
        kube.store[(CONTEXT_NS, "halluscope-dup")] = {"metadata": {"name": "halluscope-dup"}}
    with pytest.raises(RunError, match=expected) as info:
        run_submit(kubeconfig, name="halluscope-dup")
    assert TOKEN not in str(info.value)


def test_unreachable_api_server(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on once this socket closes
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "gone",
        "clusters": [{"name": "gone", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "tester", "user": {"token": TOKEN}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "tester"}}],
    }))
    with pytest.raises(RunError, match=rf"cannot reach the Kubernetes API at http://127\.0\.0\.1:{port}") as info:
        run_submit(str(path), name="halluscope-gone")
    assert TOKEN not in str(info.value)


# ---------------------------------------------------------------- failing before any request


def _no_token_auth(tmp_path: Path) -> dict:
    job = load_template(None, ROOT)
    job["spec"]["rayClusterSpec"]["authOptions"] = {"mode": "disabled"}
    path = tmp_path / "rayjob.yaml"
    path.write_text(yaml.safe_dump(job))
    return {"manifest": str(path)}


def _outside_repo(tmp_path: Path) -> dict:
    path = tmp_path / "run.yaml"
    path.write_text(CONFIG.read_text())
    return {"config": str(path)}


def _misspelled_config(tmp_path: Path) -> dict:
    doc = yaml.safe_load(CONFIG.read_text())
    doc["limitz"] = doc.pop("limits", {})
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    return {"config": str(path)}


def _signed_url(tmp_path: Path) -> dict:
    uri = "memory://halluscope-test/configs/signed.yaml?X-Amz-Signature=abc"
    with fsspec.open(uri.split("?")[0], "w") as f:
        f.write(CONFIG.read_text())
    return {"config": uri}


@pytest.mark.parametrize("make, expected", [
    (_misspelled_config, r"invalid run config .*bad\.yaml:\n  limitz: Extra inputs are not permitted"),
    (_outside_repo, r"outside the repository"),
    (_no_token_auth, r"authOptions\.mode must be 'token'"),
    (lambda _: {"name": "Halluscope_Run"}, r"must be a DNS-1035 label"),
    (lambda _: {"name": "h" * (MAX_NAME + 1)}, r"at most 47 characters"),
    (lambda _: {"config": "memory://halluscope-test/missing.yaml"}, r"run config not found"),
    (lambda _: {"in_cluster": True}, r"in-cluster credentials exclude a kubeconfig"),
    (lambda p: {"kubeconfig": str(p / "absent")}, r"no usable Kubernetes credentials from the kubeconfig .*absent"),
    (lambda _: {"context": "nowhere"}, r"no usable Kubernetes credentials from the kubeconfig .*nowhere"),
], ids=["misspelled-config", "outside-repo", "no-token-auth", "bad-name", "long-name", "missing",
        "in-cluster-and-kubeconfig", "no-kubeconfig", "unknown-context"])
def test_bad_input_fails_before_any_request(kube: FakeKube, kubeconfig: str, tmp_path: Path, make: Any,
                                            expected: str) -> None:
    kw = make(tmp_path)
    config = kw.pop("config", str(CONFIG))
    with pytest.raises(ConfigError, match=expected):
        run_submit(kw.pop("kubeconfig", kubeconfig), config=config, **kw)
    assert kube.requests == []


def test_a_url_with_a_query_is_refused(kube: FakeKube, kubeconfig: str, tmp_path: Path) -> None:
    """A signed URL is a credential: it must not land in the manifest. fsspec's memory store
    cannot read it, so the refusal is checked on the URI rule itself."""
    from halluscope.kuberay import cluster_uri

    with pytest.raises(ConfigError, match="user info, a query or a fragment"):
        cluster_uri(_signed_url(tmp_path)["config"], ROOT)
    with pytest.raises(ConfigError, match="user info"):
        cluster_uri("https://user:secret@example.org/run.yaml", ROOT)
    with pytest.raises(ConfigError, match="a shell would interpret"):
        cluster_uri("s3://bucket/run;rm -rf.yaml", ROOT)
    assert cluster_uri("s3://halluscope/configs/run.yaml", ROOT) == "s3://halluscope/configs/run.yaml"
    assert cluster_uri(f"file://{CONFIG}", ROOT) == CONFIG_REL


def test_yaml_anchors_do_not_leak_edits(tmp_path: Path) -> None:
    """The base repeats env lists with YAML aliases; editing the submitter must not edit the
    shared lists (a JSON copy breaks the aliasing)."""
    job = build_rayjob(load_template(None, ROOT), name="halluscope-a", config_uri="s3://b/c.yaml",
                       fingerprint="0" * 16, image="img:1")
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert "HALLUSCOPE_CONFIG" not in env_of(head)
    head["env"].append({"name": "X", "value": "1"})
    worker = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    assert "X" not in env_of(worker)


def test_created_pod_templates_pass_strict_kubernetes_validation() -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate not installed (dev extra)")
    job = build_rayjob(load_template(None, ROOT), name="halluscope-a", config_uri="s3://b/c.yaml",
                       fingerprint="0" * 16, image="img:1")
    for _where, spec in pod_specs(job):
        template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": {"spec": spec}}
        kv.validate(template, "1.37", strict=True)


# ---------------------------------------------------------------- CLI


def test_cli_submit(kube: FakeKube, kubeconfig: str, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="halluscope")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["submit", "--kuberay", str(CONFIG), "--kubeconfig", kubeconfig,
                              "--name", "halluscope-cli", "--poll", "0.01", "--image", "img:2",
                              "--allow-tag-image"])
    assert args.fn is main and main(args) == 0
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1] == f"RayJob {CONTEXT_NS}/halluscope-cli: Complete (Ray job SUCCEEDED)"
    assert TOKEN not in out
    assert created(kube)["spec"]["submitterPodTemplate"]["spec"]["containers"][0]["image"] == "img:2"
    with pytest.raises(SystemExit):
        parser.parse_args(["submit", "--kuberay", "x.yaml", "--kubeconfig", "k", "--in-cluster"])


def _git_checkout(tmp_path: Path, config: dict) -> Path:
    """A checkout holding jobs/run.yaml committed."""
    import subprocess

    root = tmp_path / "checkout"
    (root / "jobs").mkdir(parents=True)
    (root / "jobs" / "run.yaml").write_text(yaml.safe_dump(config))
    for cmd in (["init", "-q"], ["add", "jobs/run.yaml"],
                ["-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-q", "-m", "config"]):
        subprocess.run(["git", "-C", str(root), *cmd], check=True, capture_output=True)
    return root


def test_an_edited_config_is_uploaded_and_run_by_its_digest(tmp_path: Path, s3_endpoint: str, bucket: str) -> None:
    """The image holds the committed config: that one runs by its path. Edited (or never
    committed), it would run as the image's stale copy: its bytes go to the storage root, named
    by their sha256, and that URL runs; refused where the root is local to the pods, or where the
    file names paths relative to its folder."""
    import hashlib

    import boto3
    from tests.support.servers import s3_storage

    from halluscope.config.load import load_config
    from halluscope.kuberay import config_for_cluster

    base = {"tasks": ["halogen/code"], "models": [{"id": "m", "backend": "replay"}],
            "storage": s3_storage(s3_endpoint, f"s3://{bucket}/runs")}
    root = _git_checkout(tmp_path, base)
    path, said = root / "jobs" / "run.yaml", []
    committed = config_for_cluster(str(path), load_config(str(path)), root)
    assert committed.uri == "jobs/run.yaml" and committed.target is None

    path.write_text(yaml.safe_dump({**base, "limits": {"max_items_per_task": 3}}))  # edited after its commit
    located = config_for_cluster(str(path), load_config(str(path)), root)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert located.uri == f"s3://{bucket}/runs/_configs/{digest}.yaml"
    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket, Prefix="runs/_configs/")  # not before it is asked
    located.upload(said.append)
    body = s3.get_object(Bucket=bucket, Key=f"runs/_configs/{digest}.yaml")
    assert body["Body"].read() == path.read_bytes()
    assert said == [f"config {path} is edited or not committed: the image does not hold it as it is here; "
                    f"uploaded it to {located.uri}, which the RayJob runs"]

    path.write_text(yaml.safe_dump({**base, "storage": {"root": f"file://{tmp_path}/runs"}}))
    with pytest.raises(ConfigError, match="storage.root file://.* is local, so it cannot be uploaded"):
        config_for_cluster(str(path), load_config(str(path)), root)
    replay = tmp_path / "checkout" / "jobs" / "m.jsonl"
    replay.write_text("")
    path.write_text(yaml.safe_dump({**base, "models": [{"id": "m", "backend": "replay", "params": {"path": "m.jsonl"}}]}))
    with pytest.raises(ConfigError, match="paths relative to its folder"):
        config_for_cluster(str(path), load_config(str(path)), root)


# ---------------------------------------------------------------- preflight: submit --check


def test_check_names_what_an_operators_first_try_on_eks_lacks_and_creates_nothing(
        kube: FakeKube, kubeconfig: str, tmp_path: Path, capsys) -> None:
    """An EKS cluster as a first try finds it: KubeRay 1.5 (no authOptions.secretName), a p5 whose
    kubelet storage is its root volume, no ServiceAccount for the run's pods, and a manifest that
    selects GPU nodes by a GPU feature discovery label EKS's AMI does not set. `submit --check`
    names each with its fix, exits 2, and creates nothing; plain submit refuses the same."""
    kube.crds["rayjobs.ray.io"] = recorded("crd-rayjobs-kuberay-v1.5.2.json")
    kube.nodes = [recorded("nodes-eks-p5.json")["root-volume"]]
    kube.accounts = {}
    manifest = load_template(None, ROOT)
    (gpu,) = [g for g in manifest["spec"]["rayClusterSpec"]["workerGroupSpecs"] if g["groupName"] == "gpu-worker"]
    selector = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    gpu["template"]["spec"]["nodeSelector"] = selector
    (tmp_path / "rayjob.yaml").write_text(yaml.safe_dump(manifest))
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["submit", "--kuberay", str(CONFIG), "--kubeconfig", kubeconfig, "--allow-tag-image",
                              "--manifest", str(tmp_path / "rayjob.yaml"), "--check"])
    assert main(args) == 2
    out = capsys.readouterr().out
    assert "spec.rayClusterSpec.authOptions.secretName" in out and "KubeRay to 1.6 or later" in out
    assert f"no GPU node carries the GPU pods' node selector {selector}" in out
    assert "select by node.kubernetes.io/instance-type" in out
    assert f"ServiceAccount {CONTEXT_NS}/halluscope-run, which the RayJob's pods run as, does not exist" in out
    assert "3 thing(s) missing, nothing created" in out
    assert not [r for r in kube.requests if r["method"] != "GET"]
    # the manifest's own selector dropped: the node is found by its GPUs, and its storage is short
    kube.nodes = [recorded("nodes-eks-p5.json")["root-volume"]]
    _, logs = run_submit(kubeconfig, check_only=True)
    assert any("has 89 GiB of ephemeral storage; a GPU pod asks 500 GiB for its model cache" in line
               and "RAID0" in line for line in logs), logs
    with pytest.raises(ConfigError, match=r"the cluster cannot run RayJob .* \(3 missing; nothing was created\)"):
        run_submit(kubeconfig)
    assert not [r for r in kube.requests if r["method"] != "GET"]


def test_check_passes_a_cluster_that_has_what_the_rayjob_needs_and_warns_of_a_role_it_cannot_see(
        kube: FakeKube, kubeconfig: str) -> None:
    result, logs = run_submit(kubeconfig, check_only=True, queue="halluscope")
    assert result["findings"] == [] and not [r for r in kube.requests if r["method"] != "GET"]
    kube.accounts = {"halluscope-run": account("halluscope-run", role=False)}
    kube.crds.pop("localqueues.kueue.x-k8s.io")
    uri = "memory://halluscope-test/configs/s3-run.yaml"
    with fsspec.open(uri, "w") as f:
        f.write(yaml.safe_dump({**yaml.safe_load(CONFIG.read_text()), "storage": {"root": "s3://bucket/runs"}}))
    result, _ = run_submit(kubeconfig, config=uri, check_only=True, queue="halluscope")
    assert [f.split(":")[0] for f in result["findings"]] == ["missing", "warning"]
    assert "Kueue is not installed" in result["findings"][0]
    assert "carries no IAM role (eks.amazonaws.com/role-arn)" in result["findings"][1]


def test_check_and_a_refused_submission_write_nothing_to_storage_either(
        kube: FakeKube, kubeconfig: str, tmp_path: Path, s3_endpoint: str, bucket: str) -> None:
    """A config the image does not hold is uploaded for the RayJob: only once the cluster passed
    its checks, never by `--check` nor by a submission the checks refuse."""
    import boto3
    from tests.support.servers import s3_storage

    config = tmp_path / "edited.yaml"  # outside the checkout: the image cannot hold it
    config.write_text(yaml.safe_dump({**yaml.safe_load(CONFIG.read_text()),
                                      "storage": s3_storage(s3_endpoint, f"s3://{bucket}/runs")}))
    s3 = boto3.client("s3", endpoint_url=s3_endpoint)

    def stored() -> list[str]:
        return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]

    _, logs = run_submit(kubeconfig, config=str(config), check_only=True)
    assert any(f"submit would upload it to s3://{bucket}/runs/_configs/" in line for line in logs), logs
    kube.accounts = {}
    with pytest.raises(ConfigError, match="nothing was created"):
        run_submit(kubeconfig, config=str(config))
    assert stored() == [] and not [r for r in kube.requests if r["method"] != "GET"]
    kube.accounts = {"halluscope-run": account("halluscope-run")}
    run_submit(kubeconfig, config=str(config), wait=False)
    (key,) = stored()
    assert key.startswith("runs/_configs/")
