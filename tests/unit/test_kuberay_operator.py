"""`halluscope submit` for clusters billed by the hour: a run id submitted again while its
finished RayJob still exists, images pinned by digest, GPU pods on GPU nodes, and Kueue queues.
The fake API server is the one of test_kuberay_submit.py with DELETE added: a deleted RayJob
lingers (foreground deletion waits for its cluster) for a few reads before it is gone."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import fsspec
import pytest
import yaml
from tests.unit.test_deploy_files import by_kind, cluster_spec, kubectl_kustomize, pod_specs
from tests.unit.test_kuberay_submit import (
    COMPLETE,
    CONFIG,
    CONTEXT_NS,
    FAILED,
    INIT,
    ITEM,
    RUNNING,
    TOKEN,
    FakeKube,
    _handler,
    _status_body,
)

from halluscope.errors import ConfigError, RunError
from halluscope.kuberay import (
    GPU_TOLERATION,
    QUEUE_LABEL,
    apply_queue,
    build_rayjob,
    check_images,
    finished,
    load_template,
    place_gpu_pods,
    submit,
)
from halluscope.kuberay_cli import add_parser, main

ROOT = Path(__file__).resolve().parents[2]
PINNED = "ghcr.io/halluscope/halluscope@sha256:" + "3c" * 32
NAME = "halluscope-again"
FINGERPRINT_LABEL = "halluscope.io/fingerprint"


@dataclass
class DeletingKube(FakeKube):
    """FakeKube whose DELETE marks the object and removes it after `linger` further reads of it;
    `delete_error` answers DELETE with that code instead."""

    linger: int = 2
    delete_error: int | None = None
    lingering: dict[tuple[str, str], int] = field(default_factory=dict)


def _deleting_handler(kube: DeletingKube) -> type:
    base = _handler(kube)

    class Handler(base):  # type: ignore[valid-type, misc]
        def do_DELETE(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            path, _ = self._record(body)
            m = ITEM.match(path)
            key = (m.group(1), m.group(2)) if m else None
            if key not in kube.store:
                return self._answer(404, _status_body(404, "NotFound", "rayjobs.ray.io not found"))
            if kube.delete_error:
                return self._answer(kube.delete_error, _status_body(kube.delete_error, "Forbidden", "no delete"))
            obj = kube.store[key]
            uid = ((body or {}).get("preconditions") or {}).get("uid")
            if uid and uid != obj["metadata"].get("uid"):
                return self._answer(409, _status_body(409, "Conflict", "Precondition failed: UID mismatch"))
            obj["metadata"]["deletionTimestamp"] = "2025-01-01T01:00:00Z"
            kube.lingering[key] = kube.linger
            self._answer(200, obj)

        def do_GET(self) -> None:
            m = ITEM.match(self.path.split("?")[0])
            key = (m.group(1), m.group(2)) if m else None
            if key in kube.lingering:
                # the old object, unchanged, until the garbage collector has removed its cluster
                self._record()
                if kube.lingering[key] == 0:
                    del kube.lingering[key], kube.store[key]
                    return self._answer(404, _status_body(404, "NotFound", "rayjobs.ray.io not found"))
                kube.lingering[key] -= 1
                return self._answer(200, kube.store[key])
            if key in kube.store and "status" in kube.store[key] and kube.store[key].get("frozen"):
                self._record()
                return self._answer(200, kube.store[key])  # an old object keeps its status
            super().do_GET()

    return Handler


@pytest.fixture()
def kube() -> Iterator[DeletingKube]:
    import threading

    state = DeletingKube()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _deleting_handler(state))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture()
def kubeconfig(kube: DeletingKube, tmp_path: Path) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": kube.url}}],
        "users": [{"name": "tester", "user": {"token": TOKEN}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester", "namespace": CONTEXT_NS}}],
    }))
    return str(path)


def run(kubeconfig: str, config: str = str(CONFIG), **kw: Any) -> tuple[dict, list[str]]:
    logs: list[str] = []
    kw.setdefault("poll_s", 0.01)
    kw.setdefault("image", PINNED)
    return submit(config, kubeconfig=kubeconfig, log=logs.append, **kw), logs


def fingerprint() -> str:
    from halluscope.config.load import load_config

    return load_config(str(CONFIG)).fingerprint()


def old_rayjob(kube: DeletingKube, status: dict, **labels: str) -> None:
    """A RayJob of NAME left from an earlier submission, with a status that no longer changes."""
    kube.store[(CONTEXT_NS, NAME)] = {
        "apiVersion": "ray.io/v1", "kind": "RayJob", "frozen": True, "status": status,
        "metadata": {"name": NAME, "namespace": CONTEXT_NS, "uid": "old-uid-1",
                     "labels": {FINGERPRINT_LABEL: fingerprint(), **labels}}}


def methods(kube: DeletingKube) -> list[str]:
    """The RayJob requests (the preflight's reads of CRDs, nodes and accounts come first)."""
    return [r["method"] for r in kube.requests if r["path"].startswith("/apis/ray.io")]


# ---------------------------------------------------------------- resubmission by name


@pytest.mark.parametrize("status", [
    COMPLETE,
    FAILED,
    {"jobDeploymentStatus": "Failed", "reason": "DeadlineExceeded"},
    {"jobDeploymentStatus": "ValidationFailed", "message": "bad spec"},
    {"jobStatus": "STOPPED"},  # an operator that records no deployment status
], ids=["complete", "app-failed", "deadline", "validation-failed", "stopped-old-operator"])
def test_a_finished_rayjob_is_deleted_and_created_again(kube: DeletingKube, kubeconfig: str, status: dict) -> None:
    old_rayjob(kube, status)
    kube.script = [INIT, RUNNING, COMPLETE]
    result, logs = run(kubeconfig, name=NAME)
    assert result["status"] == COMPLETE
    # POST (409), GET (the old one), DELETE, GETs until it is gone, POST again, then following.
    assert methods(kube)[:3] == ["POST", "GET", "DELETE"]
    posts = [r for r in kube.requests if r["method"] == "POST"]
    assert len(posts) == 2 and posts[1]["body"]["metadata"]["name"] == NAME
    (delete,) = [r for r in kube.requests if r["method"] == "DELETE"]
    assert delete["path"] == f"/apis/ray.io/v1/namespaces/{CONTEXT_NS}/rayjobs/{NAME}"
    assert delete["query"]["propagationPolicy"] == ["Foreground"]
    assert delete["body"]["preconditions"] == {"uid": "old-uid-1"}
    at = {id(r): i for i, r in enumerate(kube.requests)}  # the two POSTs are equal: find them by identity
    between = kube.requests[at[id(delete)] + 1:at[id(posts[1])]]
    assert [r["method"] for r in between] == ["GET"] * (kube.linger + 1)  # until the 404
    assert any("exists and has finished" in line and "deleting it to submit again" in line for line in logs)
    assert TOKEN not in "\n".join(logs)


@pytest.mark.parametrize("status, shown", [
    (RUNNING, "Running (Ray job RUNNING)"),
    (INIT, "Initializing"),
    ({}, "New"),
    # backoffLimit: the Ray job failed and KubeRay is about to start the next attempt
    ({"jobDeploymentStatus": "Retrying", "jobStatus": "FAILED"}, "Retrying (Ray job FAILED)"),
    # queued or preempted by Kueue: it resumes once admitted
    ({"jobDeploymentStatus": "Suspended", "jobStatus": "STOPPED"}, "Suspended (Ray job STOPPED)"),
    # the Ray job ended but KubeRay has not recorded it yet
    ({"jobDeploymentStatus": "Running", "jobStatus": "SUCCEEDED"}, "Running (Ray job SUCCEEDED)"),
], ids=["running", "initializing", "new", "retrying", "suspended", "ending"])
def test_a_rayjob_that_has_not_finished_is_left_alone(kube: DeletingKube, kubeconfig: str, status: dict,
                                                     shown: str) -> None:
    old_rayjob(kube, status)
    with pytest.raises(RunError, match=r"HTTP 409: .*already exists\); it has not finished") as info:
        run(kubeconfig, name=NAME)
    message = str(info.value)
    assert f"(now {shown})" in message and "\n" not in message
    assert f"kubectl -n {CONTEXT_NS} get rayjob {NAME} -w" in message and "pass another --name" in message
    assert methods(kube) == ["POST", "GET"]
    assert (CONTEXT_NS, NAME) in kube.store


def test_a_finished_rayjob_of_another_config_is_kept(kube: DeletingKube, kubeconfig: str) -> None:
    old_rayjob(kube, COMPLETE, **{FINGERPRINT_LABEL: "0123456789abcdef"})
    with pytest.raises(RunError, match=r"ran another config \(fingerprint 0123456789abcdef, this one "):
        run(kubeconfig, name=NAME)
    assert "DELETE" not in methods(kube)


def test_a_rayjob_being_deleted_is_waited_for(kube: DeletingKube, kubeconfig: str) -> None:
    old_rayjob(kube, COMPLETE)
    kube.store[(CONTEXT_NS, NAME)]["metadata"]["deletionTimestamp"] = "2025-01-01T01:00:00Z"
    kube.lingering[(CONTEXT_NS, NAME)] = 3
    result, _ = run(kubeconfig, name=NAME)
    assert result["status"] == COMPLETE
    assert "DELETE" not in methods(kube) and methods(kube).count("POST") == 2


def test_deletion_that_does_not_end_stops_with_a_clear_error(kube: DeletingKube, kubeconfig: str) -> None:
    old_rayjob(kube, COMPLETE)
    kube.linger = 10_000
    with pytest.raises(RunError, match=rf"RayJob {CONTEXT_NS}/{NAME} is still being deleted after 0\.05 s"):
        run(kubeconfig, name=NAME, delete_timeout_s=0.05)
    assert methods(kube).count("POST") == 1


def test_a_refused_delete_names_the_missing_permission(kube: DeletingKube, kubeconfig: str) -> None:
    old_rayjob(kube, FAILED)
    kube.delete_error = 403
    with pytest.raises(RunError, match=r"may not delete rayjobs\.ray\.io in namespace halluscope-dev "
                                       r"\(k8s/base/rbac\.yaml grants it\)"):
        run(kubeconfig, name=NAME)


@pytest.mark.parametrize("status, expected", [
    (COMPLETE, True), (FAILED, True), ({"jobDeploymentStatus": "ValidationFailed"}, True),
    ({"jobStatus": "SUCCEEDED"}, True), ({"jobStatus": "FAILED"}, True), ({"jobStatus": "STOPPED"}, True),
    ({}, False), (INIT, False), (RUNNING, False), ({"jobStatus": "PENDING"}, False),
    ({"jobDeploymentStatus": "Retrying", "jobStatus": "FAILED"}, False),
    ({"jobDeploymentStatus": "Suspended", "jobStatus": "STOPPED"}, False),
    ({"jobDeploymentStatus": "Suspending", "jobStatus": "STOPPED"}, False),
    ({"jobDeploymentStatus": "Waiting"}, False),
])
def test_what_counts_as_finished(status: dict, expected: bool) -> None:
    assert finished(status) is expected


def test_rbac_grants_exactly_the_calls_submit_makes() -> None:
    """create (POST), get (GET of one object) and delete; no list or watch."""
    (role,) = by_kind(kubectl_kustomize("base"), "Role")
    (rule,) = role["rules"]
    assert rule["resources"] == ["rayjobs"] and rule["apiGroups"] == ["ray.io"]
    assert sorted(rule["verbs"]) == ["create", "delete", "get"]


# ---------------------------------------------------------------- images by digest


def test_a_tag_is_refused_before_any_request(kube: DeletingKube, kubeconfig: str) -> None:
    for image in (None, "ghcr.io/halluscope/halluscope:0.1.0-gpu"):
        with pytest.raises(ConfigError, match=r"is not pinned by digest .*--allow-tag-image") as info:
            run(kubeconfig, image=image)
        assert "\n" not in str(info.value)
    assert kube.requests == []


def test_a_digest_passes_and_a_tag_only_when_allowed(kube: DeletingKube, kubeconfig: str) -> None:
    _, logs = run(kubeconfig, name="halluscope-digest")
    assert not any("is a tag" in line for line in logs)
    images = {c["image"] for _, s in pod_specs(kube.store[(CONTEXT_NS, "halluscope-digest")]) for c in s["containers"]}
    assert images == {PINNED}
    _, logs = run(kubeconfig, name="halluscope-tagged", image="registry.example/halluscope:1", allow_tag_image=True)
    assert any(line.startswith("warning: image registry.example/halluscope:1 is a tag") for line in logs)


def test_the_placeholder_digest_is_refused_even_when_tags_are_allowed(kube: DeletingKube, kubeconfig: str) -> None:
    zero = "ghcr.io/halluscope/halluscope@sha256:" + "0" * 64
    with pytest.raises(ConfigError, match="all-zero placeholder digest: no build is pinned"):
        run(kubeconfig, image=zero, allow_tag_image=True)
    assert kube.requests == []


def _rendered_prod(tmp_path: Path, digest: str | None) -> str:
    docs = kubectl_kustomize("prod")
    text = yaml.safe_dump_all(docs)
    if digest:
        text = text.replace("sha256:" + "0" * 64, "sha256:" + digest)
    path = tmp_path / "prod.yaml"
    path.write_text(text)
    return str(path)


def test_a_rendered_prod_overlay_is_used_as_it_is(kube: DeletingKube, kubeconfig: str, tmp_path: Path) -> None:
    """As committed (no build pinned) it is refused; with a digest set, its images and its own GPU
    placement (the product label) stay, and no second toleration is added."""
    with pytest.raises(ConfigError, match="all-zero placeholder digest"):
        run(kubeconfig, image=None, manifest=_rendered_prod(tmp_path, None))
    result, _ = run(kubeconfig, image=None, manifest=_rendered_prod(tmp_path, "ab" * 32), name="halluscope-prod")
    job = kube.store[(result["namespace"], "halluscope-prod")]
    assert result["namespace"] == "halluscope"
    images = {c["image"] for _, s in pod_specs(job) for c in s["containers"]}
    assert images == {"ghcr.io/halluscope/halluscope@sha256:" + "ab" * 32}
    (gpu,) = [g for g in job["spec"]["rayClusterSpec"]["workerGroupSpecs"] if g["groupName"] == "gpu-worker"]
    assert gpu["template"]["spec"]["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    assert gpu["template"]["spec"]["tolerations"] == [GPU_TOLERATION]


def test_check_images_covers_every_container() -> None:
    job = build_rayjob(load_template(None, ROOT), name="halluscope-a", config_uri="s3://b/c.yaml",
                       fingerprint="0" * 16, image=PINNED)
    check_images(job, False, print)
    job["spec"]["rayClusterSpec"]["autoscalerOptions"]["image"] = "rayproject/ray:2.60.0"
    with pytest.raises(ConfigError, match=r"image rayproject/ray:2\.60\.0 is not pinned"):
        check_images(job, False, print)


# ---------------------------------------------------------------- GPU pods on GPU nodes


def test_gpu_groups_get_gpu_nodes_and_the_rest_do_not() -> None:
    job = build_rayjob(load_template(None, ROOT), name="halluscope-a", config_uri="s3://b/c.yaml",
                       fingerprint="0" * 16, image=PINNED)
    placed = {}
    for path, spec in pod_specs(job):
        gpus = any("nvidia.com/gpu" in c.get("resources", {}).get("limits", {}) for c in spec["containers"])
        placed[path] = (gpus, spec.get("nodeSelector"), spec.get("tolerations"))
    gpu_pods = [v for v in placed.values() if v[0]]
    assert gpu_pods == [(True, None, [GPU_TOLERATION])]  # its GPU request is its node selector
    assert all(v[1:] == (None, None) for v in placed.values() if not v[0])  # head, CPU workers, submitter
    # The toleration is the prod overlay's.
    prod_gpu = [s for obj in by_kind(kubectl_kustomize("prod"), "RayJob") for _, s in pod_specs(obj)
                if s.get("tolerations")]
    assert [s["tolerations"] for s in prod_gpu] == [[GPU_TOLERATION]]


def test_placement_is_strictly_valid_and_idempotent() -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate not installed (dev extra)")
    job = build_rayjob(load_template(None, ROOT), name="halluscope-a", config_uri="s3://b/c.yaml",
                       fingerprint="0" * 16, image=PINNED)
    again = json.loads(json.dumps(job))
    place_gpu_pods(again["spec"])
    assert again == job
    for _where, spec in pod_specs(job):
        template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": {"spec": spec}}
        kv.validate(template, "1.37", strict=True)


def test_a_wildcard_toleration_or_node_affinity_is_respected() -> None:
    job = load_template(None, ROOT)
    (gpu,) = [g for g in job["spec"]["rayClusterSpec"]["workerGroupSpecs"] if g["groupName"] == "gpu-worker"]
    pod = gpu["template"]["spec"]
    pod["tolerations"] = [{"operator": "Exists"}]
    pod["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                               "values": ["p5.48xlarge"]}]}]}}}
    place_gpu_pods(job["spec"])
    assert "nodeSelector" not in pod and pod["tolerations"] == [{"operator": "Exists"}]


# ---------------------------------------------------------------- Kueue


def config_with(cluster: dict | None, name: str) -> str:
    uri = f"memory://halluscope-test/kueue/{name}.yaml"
    doc = yaml.safe_load(CONFIG.read_text())
    doc["storage"] = {"root": "s3://halluscope/runs"}
    if cluster is not None:
        doc["cluster"] = cluster
    with fsspec.open(uri, "w") as f:
        f.write(yaml.safe_dump(doc))
    return uri


def groups_by_name(job: dict) -> dict[str, dict]:
    return {g["groupName"]: g for g in job["spec"]["rayClusterSpec"]["workerGroupSpecs"]}


def test_queue_label_suspend_and_fixed_sizes(kube: DeletingKube, kubeconfig: str) -> None:
    kube.script = [{"jobDeploymentStatus": "Suspended"}, INIT, RUNNING, COMPLETE]
    config = config_with({"gpus": 16, "cpus": 40}, "sized")
    result, logs = run(kubeconfig, config=config, name="halluscope-queued", queue="halluscope")
    job = kube.store[(CONTEXT_NS, "halluscope-queued")]
    assert job["metadata"]["labels"][QUEUE_LABEL] == "halluscope"
    assert job["spec"]["suspend"] is True
    cluster = job["spec"]["rayClusterSpec"]
    assert cluster["enableInTreeAutoscaling"] is False and "autoscalerOptions" not in cluster
    assert job["spec"]["ttlSecondsAfterFinished"] == 0  # its nodes go when Kueue gives its quota to the next run
    sizes = {n: (g["replicas"], g["minReplicas"], g["maxReplicas"]) for n, g in groups_by_name(job).items()}
    assert sizes == {"gpu-worker": (2, 2, 2), "cpu-worker": (3, 3, 3)}  # 16 / 8 GPUs; ceil(40 / 16) pods
    assert any(f"queued in Kueue LocalQueue {CONTEXT_NS}/halluscope: it starts once the ClusterQueue admits head + "
               "3 x cpu-worker (48 CPUs) + 2 x gpu-worker (16 GPUs)" in line for line in logs), logs
    states = [line.split(": ", 1)[1] for line in logs if line.startswith(f"RayJob {CONTEXT_NS}/halluscope-queued: ")]
    assert states[0] == "Suspended" and result["status"] == COMPLETE


def test_a_rayjob_kuberay_refuses_ends_the_follow_with_its_reason(kube: DeletingKube, kubeconfig: str) -> None:
    kube.script = [INIT, {"jobDeploymentStatus": "ValidationFailed", "reason": "ValidationFailed",
                          "message": "RayJob.spec.entrypoint is empty"}, RUNNING]
    with pytest.raises(RunError, match=r"ended ValidationFailed: ValidationFailed: RayJob.spec.entrypoint is empty"):
        run(kubeconfig, name="halluscope-refused", timeout_s=5)


def test_a_rayjob_suspended_with_no_queue_ends_the_follow_saying_how_to_resume(kube: DeletingKube,
                                                                                kubeconfig: str) -> None:
    # e.g. a manifest rendered for Kueue (spec.suspend) submitted without --queue: nothing admits it
    kube.script = [{"jobDeploymentStatus": "Suspended"}, INIT, COMPLETE]
    with pytest.raises(RunError, match=r"is Suspended and no Kueue queue names it .* patch rayjob halluscope-held "
                                       r"--type merge -p '\{\"spec\":\{\"suspend\":false\}\}', or submit with --queue"):
        run(kubeconfig, name="halluscope-held", timeout_s=5)


def test_queue_without_a_gpu_budget_asks_for_no_gpu_pods() -> None:
    job = build_rayjob(load_template(None, ROOT), name="halluscope-a", config_uri="s3://b/c.yaml",
                       fingerprint="0" * 16, image=PINNED)
    admitted = apply_queue(job, "halluscope", None, None)
    sizes = {n: g["replicas"] for n, g in groups_by_name(job).items()}
    assert sizes == {"gpu-worker": 0, "cpu-worker": 8}  # the CPU group's maxReplicas
    assert admitted == "head + 8 x cpu-worker (128 CPUs) + 0 x gpu-worker (0 GPUs)"


@pytest.mark.parametrize("gpus, cpus, queue, expected", [
    (12, None, "halluscope", r"cluster\.gpus 12 is not a whole number of gpu-worker pods of 8 GPUs"),
    ({"A100-80G": 8}, None, "halluscope", r"cluster\.gpus names A100-80G; the manifest's GPU groups offer H100"),
    (None, None, "Halluscope_Queue", r"queue name 'Halluscope_Queue' must be a LocalQueue name"),
], ids=["partial-node", "other-accelerator", "bad-name"])
def test_queue_refusals(gpus: Any, cpus: Any, queue: str, expected: str) -> None:
    job = build_rayjob(load_template(None, ROOT), name="halluscope-a", config_uri="s3://b/c.yaml",
                       fingerprint="0" * 16, image=PINNED)
    with pytest.raises(ConfigError, match=expected):
        apply_queue(job, queue, gpus, cpus)


def test_queue_accepts_a_budget_by_accelerator_type() -> None:
    job = build_rayjob(load_template(None, ROOT), name="halluscope-a", config_uri="s3://b/c.yaml",
                       fingerprint="0" * 16, image=PINNED)
    apply_queue(job, "halluscope", {"H100": 8}, None)
    assert groups_by_name(job)["gpu-worker"]["replicas"] == 1


def test_kueue_needs_the_cluster_deleted_after_the_run() -> None:
    job = build_rayjob(load_template(None, ROOT), name="halluscope-a", config_uri="s3://b/c.yaml",
                       fingerprint="0" * 16, image=PINNED)
    job["spec"]["shutdownAfterJobFinishes"] = False
    with pytest.raises(ConfigError, match="shutdownAfterJobFinishes: true"):
        apply_queue(job, "halluscope", None, None)


def test_queue_refusals_come_before_any_request(kube: DeletingKube, kubeconfig: str) -> None:
    with pytest.raises(ConfigError, match="not a whole number"):
        run(kubeconfig, config=config_with({"gpus": 4}, "partial"), queue="halluscope")
    assert kube.requests == []


def test_a_layout_no_node_can_hold_is_refused_before_any_request(kube: DeletingKube, kubeconfig: str) -> None:
    """The shipped open-models config on the two p5 nodes its RayService fills: refused, naming the
    nodes; its quota of 8 GPUs first (none is left), and without one its model that has no node."""
    doc = yaml.safe_load((CONFIG.parents[0] / "open-models-served.yaml").read_text())
    doc["cluster"]["nodes"][0]["count"] = 2
    uri = "memory://halluscope-test/kueue/two-nodes.yaml"
    with fsspec.open(uri, "w") as f:
        f.write(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"cluster.gpus asks for 8 H100 GPUs and .* leave the run 0 .*: "
                                          r"2 nodes, 12 of 16 GPUs in use, 16 asked for by pods.* Add a node"):
        run(kubeconfig, config=uri)
    del doc["cluster"]["gpus"]
    with fsspec.open(uri, "w") as f:
        f.write(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"needs 1 x 4 H100 GPUs, each replica on one node in a pod of 8.* "
                                          r"The nodes: 2 nodes, 12 of 16 GPUs in use, 16 asked for by pods.* Add a node"):
        run(kubeconfig, config=uri)
    assert kube.requests == []


def test_cli_queue_and_allow_tag(kube: DeletingKube, kubeconfig: str, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="halluscope")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["submit", "--kuberay", config_with({"gpus": 8}, "cli"), "--kubeconfig", kubeconfig,
                              "--name", "halluscope-cli-q", "--poll", "0.01", "--queue", "halluscope",
                              "--image", "img:3", "--allow-tag-image"])
    assert main(args) == 0
    job = kube.store[(CONTEXT_NS, "halluscope-cli-q")]
    assert job["metadata"]["labels"][QUEUE_LABEL] == "halluscope" and job["spec"]["suspend"] is True
    assert groups_by_name(job)["gpu-worker"]["replicas"] == 1
    assert "queued in Kueue LocalQueue" in capsys.readouterr().out
    args = parser.parse_args(["submit", "--kuberay", str(CONFIG), "--kubeconfig", kubeconfig, "--image", "img:3"])
    with pytest.raises(ConfigError, match="--allow-tag-image"):
        main(args)


def queued_job(gpus: int | None, cpus: float | None = None, manifest: Callable[[], dict] | None = None) -> dict:
    job = build_rayjob((manifest or (lambda: load_template(None, ROOT)))(), name="halluscope-a",
                       config_uri="s3://b/c.yaml", fingerprint="0" * 16, image=PINNED)
    apply_queue(job, "halluscope", gpus, cpus)
    return job


def test_a_queued_rayjob_keeps_kueues_other_rules() -> None:
    """Kueue's RayJob webhook: a cluster of its own (no clusterSelector), deleted after the run,
    no in-tree autoscaling, no worker group named `head`."""
    job = queued_job(16)
    spec = job["spec"]
    assert "clusterSelector" not in spec and spec["shutdownAfterJobFinishes"] is True
    assert cluster_spec(job)["enableInTreeAutoscaling"] is False
    assert all(g["groupName"] != "head" for g in cluster_spec(job)["workerGroupSpecs"])
