"""Run a config on Kubernetes as a KubeRay RayJob and follow it to the end.

The RayJob is the repository's own k8s/base/rayjob.yaml (or a rendered overlay passed as
`manifest`), so `halluscope submit` creates the object that `kubectl apply -k` would: the same
token auth, pod security and secret references. What changes: the name, the run config URI,
optionally the image, GPU node placement where the manifest has none (as overlays/prod adds
it), and with a Kueue queue the label, `suspend` and fixed group sizes. Every image must be
pinned by digest unless the caller allows a tag. The RayJob's name is the run id (the submitter
reads it through the downward API), so KubeRay's retries and a resubmission under the same name
resume one run; a finished RayJob of that name is deleted first (KubeRay keeps the object after
the run; only its cluster goes). The template is read from the checkout, not embedded in the
package: a second copy would drift from the kustomize base that the tests check, and the
checkout is where submissions come from (a laptop, CI, or the image's WORKDIR, which holds the
repository).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from halluscope.errors import ConfigError, RunError
from halluscope.preflight import Finding, check, pod_specs, read_view
from halluscope.quantity import parse_quantity
from halluscope.retry import GaveUp, RetryPolicy, Transient
from halluscope.sources import url_scheme
from halluscope.storage.fs import Location
from halluscope.storage.names import SUBMITTED_CONFIGS

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from halluscope.config.schema import RunConfig


GROUP, VERSION, PLURAL = "ray.io", "v1", "rayjobs"
TEMPLATE = Path("k8s") / "base" / "rayjob.yaml"
CONFIG_ENV = "HALLUSCOPE_CONFIG"
RUN_ID_ENV = "HALLUSCOPE_RUN_ID"
# KubeRay appends 6 characters to a RayJob's name for its RayCluster, whose limit is 53.
MAX_NAME = 47
_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
# Kubernetes substitutes $(HALLUSCOPE_CONFIG) into the submitter's command before a shell
# sees it: only characters no shell interprets may pass.
_SAFE_URI = re.compile(r"[A-Za-z0-9._~:/%+=,@-]+")
_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
FINGERPRINT_LABEL = "halluscope.io/fingerprint"
# Kueue: the label that puts a job in a LocalQueue of its namespace.
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
_LABEL_VALUE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
GPU_RESOURCE = "nvidia.com/gpu"
# Placement of GPU pods when the manifest has none: the label NVIDIA GPU feature discovery puts on
# every GPU node, and the taint GPU node pools carry (overlays/prod selects the product instead).
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
_DIGEST = re.compile(r"@sha256:([0-9a-f]{64})$")
# KubeRay's terminal deployment states; the Ray job states that end a job (STOPPED included).
_FINAL_DEPLOYMENT = ("Complete", "Failed", "ValidationFailed")
_FINAL_JOB = ("SUCCEEDED", "FAILED", "STOPPED")
# Consecutive failed status reads tolerated while following (API server restarts, blips):
# the RayJob runs on regardless, so giving up early would only lose the outcome.
_READ_RETRIES = 5


def find_checkout() -> Path | None:
    """The repository holding k8s/base/rayjob.yaml: the one this module runs from (editable
    install, `pythonpath = lib`), else the working directory (the image's WORKDIR)."""
    for root in (Path(__file__).resolve().parents[2], Path.cwd()):
        if (root / TEMPLATE).is_file():
            return root
    return None


def load_template(manifest: str | None, root: Path | None) -> dict:
    """The one RayJob in `manifest` (a file, e.g. `kubectl kustomize k8s/overlays/prod` output)
    or in the checkout's base."""
    if manifest is None:
        if root is None:
            raise ConfigError(f"no {TEMPLATE} here or beside the installed halluscope: run from the "
                              "repository or pass a RayJob manifest (--manifest)")
        path = root / TEMPLATE
    else:
        path = Path(manifest)
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    except OSError as err:
        raise ConfigError(f"cannot read RayJob manifest {path}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"RayJob manifest {path} is not valid YAML: {err}") from None
    jobs = [d for d in docs if isinstance(d, dict) and d.get("kind") == "RayJob"]
    if len(jobs) != 1:
        raise ConfigError(f"{path} holds {len(jobs)} RayJob documents; expected exactly one")
    (job,) = jobs
    if job.get("apiVersion") != f"{GROUP}/{VERSION}":
        raise ConfigError(f"{path}: RayJob apiVersion is {job.get('apiVersion')!r}; expected {GROUP}/{VERSION}")
    auth = (job.get("spec", {}).get("rayClusterSpec") or {}).get("authOptions") or {}
    if auth.get("mode") != "token":
        raise ConfigError(f"{path}: spec.rayClusterSpec.authOptions.mode must be 'token' (Ray token "
                          "authentication stays on for every cluster)")
    # A JSON round trip turns YAML aliases (&env/*env) into independent copies, so editing one
    # container's env cannot silently edit the others.
    return json.loads(json.dumps(job))


def cluster_uri(uri: str, root: Path) -> str:
    """The config URI as the submitter pod sees it. Remote URLs pass unchanged; a local file
    must lie in the checkout and becomes relative to it (the image's WORKDIR is a copy)."""
    if "://" in uri and not uri.startswith("file://"):
        rest = uri.partition("://")[2]
        authority = rest.split("/", 1)[0]
        if "@" in authority or "?" in rest or "#" in rest:
            raise ConfigError(f"config URI {uri!r} carries user info, a query or a fragment; a manifest "
                              "holds no credentials: pass a plain URL and give the cluster access by Secret")
        located = uri
    else:
        local = Path(uri.removeprefix("file://")).expanduser().resolve()
        try:
            located = local.relative_to(root.resolve()).as_posix()
        except ValueError:
            raise ConfigError(f"config {uri} is outside the repository {root}: the cluster cannot read it; "
                              "upload it (s3://...) or put it in the repository (e.g. jobs/configs/)") from None
    if not _SAFE_URI.fullmatch(located):
        raise ConfigError(f"config URI {located!r} has characters a shell would interpret; "
                          f"allowed: letters, digits and {'._~:/%+=,@-'}")
    return located


@dataclass(frozen=True)
class ClusterConfig:
    """Where the RayJob reads its config, and the upload that puts it there if one is needed: done
    by ``upload`` only once the cluster passed its checks, so a refused or ``--check`` submission
    writes nothing to storage either."""

    uri: str
    why: str = ""
    target: Location | None = None
    data: bytes = b""

    def upload(self, log: Callable[[str], None]) -> None:
        if self.target is not None:
            self.target.write_bytes_atomic(self.data)
            log(f"{self.why}; uploaded it to {self.target.url}, which the RayJob runs")


def config_for_cluster(uri: str, cfg: RunConfig, root: Path) -> ClusterConfig:
    """The config URI the RayJob runs. A URL: as it is. A local file the image holds as it is here
    (committed and unedited in the checkout, or a checkout without git, such as the image's own):
    its path in the checkout. Any other local file - edited since its commit, never committed, or
    outside the checkout - would run as the image's stale copy or not at all, so its bytes are
    uploaded to ``<storage.root>/_configs/<sha256>.yaml`` and that URL runs: the name is the
    digest of what ran. Refused where the root is local to the pods, or where the file names
    paths relative to its folder (those resolve against the image's working directory once the
    config is read from storage)."""
    if "://" in uri and not uri.startswith("file://"):
        return ClusterConfig(cluster_uri(uri, root))
    local = Path(uri.removeprefix("file://")).expanduser().resolve()
    inside = local.is_relative_to(root.resolve())
    if inside and _as_committed(local.relative_to(root.resolve()), root):
        return ClusterConfig(cluster_uri(uri, root))
    where = "edited or not committed" if inside else f"outside the repository {root}"
    why = f"config {uri} is {where}: the image does not hold it as it is here"
    if url_scheme(cfg.storage.root) in (None, "file"):
        raise ConfigError(f"{why}, and storage.root {cfg.storage.root} is local, so it cannot be uploaded for the "
                          "cluster: commit it and rebuild the image, or set an s3:// storage.root")
    from halluscope.config.load import parse_config
    from halluscope.config.reader import read_yaml_file

    doc, data = read_yaml_file(str(local))  # the bytes uploaded are the bytes checked
    if parse_config(doc, uri).model_dump() != cfg.model_dump():
        raise ConfigError(f"{why}, and it names files by paths relative to its folder, which the cluster would "
                          "read relative to the image's working directory: give them as absolute paths or URLs, "
                          "or commit the config and rebuild the image")
    target = Location.from_url(cfg.storage.root, cfg.storage).child(
        SUBMITTED_CONFIGS, f"{hashlib.sha256(data).hexdigest()}.yaml")
    return ClusterConfig(cluster_uri(target.url, root), why, target, data)


def _as_committed(rel: Path, root: Path) -> bool:
    """Whether the checkout's commit holds the file ``rel`` (relative to it) as it is now; a
    checkout without git (the image's WORKDIR) holds what it holds."""
    if not (root / ".git").exists():
        return True
    try:
        tracked = subprocess.run(["git", "-C", str(root), "ls-files", "--error-unmatch", "--", str(rel)],
                                 capture_output=True, timeout=30).returncode == 0
        unedited = subprocess.run(["git", "-C", str(root), "diff", "--quiet", "HEAD", "--", str(rel)],
                                  capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False  # cannot tell: upload, which runs exactly this file
    return tracked and unedited


def check_name(name: str) -> str:
    if len(name) > MAX_NAME or not _DNS1035.fullmatch(name):
        raise ConfigError(f"RayJob name {name!r} must be a DNS-1035 label (lower-case letters, digits, '-', "
                          f"starting with a letter) of at most {MAX_NAME} characters")
    return name


def default_name(fingerprint: str, now: float | None = None) -> str:
    """One name per submission (a RayJob runs once): config fingerprint plus UTC time."""
    return f"halluscope-{fingerprint[:8]}-{time.strftime('%y%m%d-%H%M%S', time.gmtime(now))}"


def rayjob_name(name: str | None, run_id: str | None, fingerprint: str) -> str:
    """The RayJob's name, which is also the run id: `name`, else the config's run_id, else a
    new one. A name that differs from the config's run_id is refused: the run would go under
    the name, not where the config says."""
    if run_id is not None and name is not None and name != run_id:
        raise ConfigError(f"the RayJob's name is the run id: --name {name} differs from the config's "
                          f"run_id {run_id}; pass one of them")
    return check_name(name or run_id or default_name(fingerprint))


def build_rayjob(template: dict, *, name: str, config_uri: str, fingerprint: str,
                 image: str | None = None) -> dict:
    """The RayJob to create: the template with its name, config URI and image set."""
    job = json.loads(json.dumps(template))
    spec = job["spec"]
    if f"$({CONFIG_ENV})" not in spec.get("entrypoint", ""):
        raise ConfigError(f"the RayJob's entrypoint does not read $({CONFIG_ENV}): {spec.get('entrypoint')!r}")
    submitters = (spec.get("submitterPodTemplate") or {}).get("spec", {}).get("containers", [])
    entries = [e for c in submitters for e in c.get("env", []) if e.get("name") == CONFIG_ENV]
    if not entries:
        raise ConfigError(f"the RayJob's submitterPodTemplate sets no {CONFIG_ENV}: the entrypoint would not "
                          "see the run config")
    for entry in entries:
        # A literal value, not the shared ConfigMap: concurrent runs must not race on it.
        entry.pop("valueFrom", None)
        entry["value"] = config_uri
    run_ids = [e for c in submitters for e in c.get("env", []) if e.get("name") == RUN_ID_ENV]
    if f"$({RUN_ID_ENV})" not in spec["entrypoint"] or not run_ids:
        raise ConfigError(f"the RayJob's entrypoint must pass --run-id $({RUN_ID_ENV}) and its submitter set "
                          f"{RUN_ID_ENV}: without them every retry starts the run over")
    if image:
        for pod in pod_specs(spec):
            for c in pod["containers"] + pod.get("initContainers", []):
                c["image"] = image
    place_gpu_pods(spec)
    meta = job.setdefault("metadata", {})
    for key in ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"):
        meta.pop(key, None)
    meta["name"] = check_name(name)
    meta.setdefault("labels", {}).update({"app.kubernetes.io/part-of": "halluscope",
                                          FINGERPRINT_LABEL: fingerprint})
    meta.setdefault("annotations", {})["halluscope.io/config"] = config_uri
    job.pop("status", None)
    return job


def _gpus_per_pod(pod: dict) -> int:
    total = 0
    for c in pod.get("containers", []):
        res = c.get("resources") or {}
        total += int((res.get("limits") or {}).get(GPU_RESOURCE) or (res.get("requests") or {}).get(GPU_RESOURCE) or 0)
    return total


def _groups(spec: dict) -> list[dict]:
    cluster = spec.get("rayClusterSpec") or {}
    return [g for g in [cluster.get("headGroupSpec"), *cluster.get("workerGroupSpecs", [])] if g]


def place_gpu_pods(spec: dict) -> None:
    """Let GPU pods onto tainted GPU nodes, as overlays/prod does: a group that requests GPUs
    gets the `nvidia.com/gpu` NoSchedule toleration unless it already tolerates that taint. Its
    GPU request keeps it on GPU nodes; no node label is added, as the labels NVIDIA's feature
    discovery sets are missing on EKS's GPU AMI. A manifest's own selector (e.g. the prod
    overlay's instance type) is kept."""
    for group in _groups(spec):
        pod = (group.get("template") or {}).get("spec") or {}
        if not _gpus_per_pod(pod):
            continue
        tolerations = pod.setdefault("tolerations", [])
        if not any(t.get("key") == GPU_RESOURCE or (not t.get("key") and t.get("operator") == "Exists")
                   for t in tolerations):
            tolerations.append(dict(GPU_TOLERATION))


def _images(job: dict) -> list[tuple[str, str]]:
    """(where, image) for every container the RayJob declares, the autoscaler's included."""
    found = []
    for pod in pod_specs(job.get("spec", {})):
        for c in pod["containers"] + pod.get("initContainers", []):
            found.append((c.get("name", "?"), c.get("image", "")))
    auto = ((job.get("spec", {}).get("rayClusterSpec") or {}).get("autoscalerOptions") or {})
    if auto.get("image"):
        found.append(("autoscaler", auto["image"]))
    return found


def check_images(job: dict, allow_tag: bool, log: Callable[[str], None]) -> None:
    """Every image by digest: a tag can point at another build between a submission and a
    KubeRay retry, and the run's results would come from two builds. A tag passes only with
    `allow_tag` (a warning); the all-zero digest the overlays commit means no build is pinned
    and is refused always (the pods could not pull it)."""
    images = sorted({image for _, image in _images(job)})
    placeholders = [i for i in images if (m := _DIGEST.search(i)) and set(m.group(1)) == {"0"}]
    if placeholders:
        raise ConfigError(f"image {placeholders[0]} carries the all-zero placeholder digest: no build is pinned; "
                          "set the digest `docker push` printed (kustomize edit set image ...) or pass --image")
    tags = [i for i in images if not _DIGEST.search(i)]
    if not tags:
        return
    if not allow_tag:
        raise ConfigError(f"image {', '.join(tags)} is not pinned by digest (a tag can move between attempts); "
                          "pass --image REPOSITORY@sha256:<digest>, or --manifest with a rendered overlay that pins "
                          "one, or --allow-tag-image to run whatever the tag points at")
    log(f"warning: image {', '.join(tags)} is a tag, not a digest: a retry may run another build")


def _accelerators(group: dict) -> set[str]:
    """The accelerator types a group advertises in rayStartParams.resources (KubeRay's reading)."""
    value = str((group.get("rayStartParams") or {}).get("resources") or "").strip("'\"` ")
    try:
        resources = json.loads(value) if value else {}
    except ValueError:
        return set()
    return {k.split(":", 1)[1] for k in resources if isinstance(k, str) and k.startswith("accelerator_type:")}


def _fix_size(group: dict, count: int) -> None:
    group.update(replicas=count, minReplicas=count, maxReplicas=count)


def apply_queue(job: dict, queue: str, gpus: int | dict[str, int] | None, cpus: float | None) -> str:
    """Put the RayJob in a Kueue LocalQueue; returns what Kueue will be asked to admit.

    Kueue admits a RayJob created suspended, for the pods its groups declare, and refuses one
    that autoscales (unless elastic workload slices are on) or keeps its cluster after the run.
    So the groups get fixed sizes: the GPU group `cluster.gpus` GPUs' worth of pods (a whole
    number of pods: the quota admitted then equals the run's GPU budget), a CPU group
    `cluster.cpus` worth of CPUs rounded up, or its maxReplicas when the config sets none; and
    the cluster goes as the run ends (ttlSecondsAfterFinished 0), when Kueue frees its quota."""
    if len(queue) > 63 or not _LABEL_VALUE.fullmatch(queue):
        raise ConfigError(f"queue name {queue!r} must be a LocalQueue name usable as a label value "
                          "(lower-case letters, digits and '-', at most 63 characters)")
    spec = job["spec"]
    if spec.get("shutdownAfterJobFinishes") is not True:
        raise ConfigError("Kueue admits a RayJob only with spec.shutdownAfterJobFinishes: true (its cluster must "
                          "give the quota back when the run ends)")
    if spec.get("clusterSelector"):
        raise ConfigError("a RayJob on an existing cluster (clusterSelector) is not admitted by Kueue; drop --queue")
    cluster = spec["rayClusterSpec"]
    groups = cluster.get("workerGroupSpecs", [])
    gpu_groups = [g for g in groups if _gpus_per_pod(g["template"]["spec"])]
    cpu_groups = [g for g in groups if not _gpus_per_pod(g["template"]["spec"])]
    offered = set().union(*(_accelerators(g) for g in gpu_groups)) if gpu_groups else set()
    if isinstance(gpus, dict):
        unknown = sorted(set(gpus) - offered - {"GPU"})
        if unknown:
            raise ConfigError(f"cluster.gpus names {', '.join(unknown)}; the manifest's GPU groups offer "
                              f"{', '.join(sorted(offered)) or 'none'}")
        total_gpus = sum(gpus.values())
    else:
        total_gpus = gpus or 0
    if total_gpus and len(gpu_groups) != 1:
        raise ConfigError(f"cluster.gpus {total_gpus} with --queue needs exactly one GPU worker group in the manifest; "
                          f"it has {len(gpu_groups)}")
    parts: dict[str, str] = {}
    for group in gpu_groups:
        per_pod = _gpus_per_pod(group["template"]["spec"])
        if total_gpus % per_pod:
            raise ConfigError(f"cluster.gpus {total_gpus} is not a whole number of {group['groupName']} pods of "
                              f"{per_pod} GPUs: Kueue admits whole pods, so its quota and the run's budget would "
                              "differ")
        _fix_size(group, total_gpus // per_pod)
        parts[group["groupName"]] = f"{total_gpus // per_pod} x {group['groupName']} ({total_gpus} GPUs)"
    if cpus is not None and len(cpu_groups) != 1:
        raise ConfigError(f"cluster.cpus with --queue needs exactly one CPU worker group in the manifest; "
                          f"it has {len(cpu_groups)}")
    for group in cpu_groups:
        container = group["template"]["spec"]["containers"][0]
        res = container.get("resources") or {}
        cpu_each = parse_quantity((res.get("limits") or {}).get("cpu") or (res.get("requests") or {}).get("cpu") or 1)
        count = int(group.get("maxReplicas", group.get("replicas", 0))) if cpus is None else math.ceil(cpus / cpu_each)
        _fix_size(group, count)
        parts[group["groupName"]] = f"{count} x {group['groupName']} ({count * cpu_each:g} CPUs)"
    # Kueue refuses in-tree autoscaling on a job it admits (without workload slices).
    cluster["enableInTreeAutoscaling"] = False
    # Kueue gives the run's quota to the next run the moment this one finishes: its pods go then
    # too, or the next run's GPU pod waits for a node this one still holds (its logs are in storage)
    spec["ttlSecondsAfterFinished"] = 0
    cluster.pop("autoscalerOptions", None)
    spec["suspend"] = True
    job["metadata"].setdefault("labels", {})[QUEUE_LABEL] = queue
    return " + ".join(["head", *(parts[g["groupName"]] for g in groups)])


def _api_client(kubeconfig: str | None, context: str | None, in_cluster: bool) -> tuple[ApiClient, str | None]:
    """A client with its own configuration (no process-wide default is changed) and the
    namespace the credentials point at. Tokens stay inside the configuration object."""
    from kubernetes import client, config

    cfg = client.Configuration()
    try:
        if in_cluster:
            config.load_incluster_config(client_configuration=cfg)
            namespace = _NAMESPACE_FILE.read_text().strip() if _NAMESPACE_FILE.is_file() else None
        else:
            config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg,
                                    persist_config=False)
            contexts, active = config.list_kube_config_contexts(kubeconfig)
            chosen = next((c for c in contexts if c["name"] == context), None) if context else active
            namespace = (chosen or {}).get("context", {}).get("namespace")
    except config.ConfigException as err:
        where = "in-cluster service account" if in_cluster else f"kubeconfig {kubeconfig or '(default)'}"
        raise ConfigError(f"no usable Kubernetes credentials from the {where}: {err}") from None
    return client.ApiClient(cfg), namespace


def _server_message(err: Exception) -> str:
    """The API server's own explanation (a Status object's message), else the HTTP reason."""
    try:
        return str(json.loads(err.body)["message"])  # type: ignore[attr-defined]
    except (TypeError, ValueError, KeyError):
        return str(getattr(err, "reason", err))


def _post(api: ApiClient, job: dict) -> dict | None:
    """Create the RayJob; None when one of that name exists (HTTP 409)."""
    from kubernetes.client import CustomObjectsApi
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    try:
        # Strict: the API server rejects fields the RayJob CRD does not define instead of
        # dropping them, so a misspelled field fails here and not silently.
        return CustomObjectsApi(api).create_namespaced_custom_object(
            group=GROUP, version=VERSION, namespace=ns, plural=PLURAL, body=job, field_validation="Strict")
    except ApiException as err:
        if err.status == 409:
            return None
        why = _server_message(err)
        hint = {
            401: "the credentials were refused",
            403: f"the credentials may not create rayjobs.{GROUP} in namespace {ns}",
            404: f"namespace {ns} or the RayJob resource does not exist (is the KubeRay operator installed?)",
        }.get(err.status, "the API server refused it")
        raise RunError(f"cannot create RayJob {ns}/{name} (HTTP {err.status}: {why}); {hint}") from None
    except HTTPError as err:
        raise RunError(f"cannot reach the Kubernetes API at {api.configuration.host}: {err}") from None


def _get_object(api: ApiClient, ns: str, name: str) -> dict | None:
    """The RayJob as stored, or None when there is none."""
    from kubernetes.client import CustomObjectsApi
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        return CustomObjectsApi(api).get_namespaced_custom_object(
            group=GROUP, version=VERSION, namespace=ns, plural=PLURAL, name=name)
    except ApiException as err:
        if err.status == 404:
            return None
        raise RunError(f"cannot read RayJob {ns}/{name} (HTTP {err.status}: {_server_message(err)})") from None
    except HTTPError as err:
        raise RunError(f"cannot reach the Kubernetes API at {api.configuration.host}: {err}") from None


def finished(status: dict) -> bool:
    """Whether a RayJob is over for good, so deleting it loses only its record. KubeRay's final
    deployment states (Complete, Failed, ValidationFailed) are; a Ray job that ended (SUCCEEDED,
    FAILED, STOPPED) is only while no deployment state says otherwise (operators that predate
    it): under Retrying the next attempt is coming (backoffLimit), under Suspended a Kueue
    queue will resume it, under Running KubeRay has yet to record the end."""
    deployment = status.get("jobDeploymentStatus") or ""
    return deployment in _FINAL_DEPLOYMENT or (not deployment and status.get("jobStatus") in _FINAL_JOB)


def _delete(api: ApiClient, ns: str, name: str, uid: str | None) -> None:
    from kubernetes.client import CustomObjectsApi
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    # Foreground: the RayJob goes only after what it owns (RayCluster, pods, submitter Job), so
    # the new RayJob never meets the old one's cluster. The uid precondition deletes only the
    # object read, never one that someone created meanwhile under the same name.
    body = {"apiVersion": "v1", "kind": "DeleteOptions", **({"preconditions": {"uid": uid}} if uid else {})}
    try:
        CustomObjectsApi(api).delete_namespaced_custom_object(
            group=GROUP, version=VERSION, namespace=ns, plural=PLURAL, name=name,
            propagation_policy="Foreground", body=body)
    except ApiException as err:
        if err.status == 404:
            return
        hint = {403: f"the credentials may not delete rayjobs.{GROUP} in namespace {ns} (k8s/base/rbac.yaml grants it)",
                409: "it was replaced meanwhile"}.get(err.status, "the API server refused it")
        raise RunError(f"cannot delete the finished RayJob {ns}/{name} (HTTP {err.status}: "
                       f"{_server_message(err)}); {hint}") from None
    except HTTPError as err:
        raise RunError(f"cannot reach the Kubernetes API at {api.configuration.host}: {err}") from None


def _clear_finished(api: ApiClient, ns: str, name: str, fingerprint: str, *, poll_s: float, timeout_s: float,
                    log: Callable[[str], None]) -> None:
    """Make way for a new RayJob of this name: delete the old one if it has finished and ran
    this config, and wait until it is gone; refuse while it is queued, running or retrying."""
    old = _get_object(api, ns, name)
    if old is None:
        return  # it went between the create and this read
    meta, status = old.get("metadata") or {}, old.get("status") or {}
    if not meta.get("deletionTimestamp"):
        if not finished(status):
            raise RunError(f"cannot create RayJob {ns}/{name} (HTTP 409: rayjobs.{GROUP} \"{name}\" already exists); "
                           f"it has not finished (now {_describe(status)}): follow it with kubectl -n {ns} get rayjob "
                           f"{name} -w, stop it with kubectl -n {ns} delete rayjob {name}, or pass another --name")
        theirs = (meta.get("labels") or {}).get(FINGERPRINT_LABEL)
        if theirs and theirs != fingerprint:
            raise RunError(f"RayJob {ns}/{name} ran another config (fingerprint {theirs}, this one {fingerprint}); "
                           "a run id keeps one config, so the run would refuse it: pass another --name")
        log(f"RayJob {ns}/{name} exists and has finished ({_describe(status)}); deleting it to submit again")
        _delete(api, ns, name, meta.get("uid"))
    deadline = time.monotonic() + timeout_s
    while _get_object(api, ns, name) is not None:
        if time.monotonic() > deadline:
            raise RunError(f"RayJob {ns}/{name} is still being deleted after {timeout_s:g} s (its cluster's pods are "
                           f"stopping); submit again once kubectl -n {ns} get rayjob {name} finds none")
        time.sleep(poll_s)


def _create(api: ApiClient, job: dict, fingerprint: str, *, poll_s: float, delete_timeout_s: float,
            log: Callable[[str], None]) -> dict:
    """Create the RayJob; a finished one of the same name is deleted first (KubeRay keeps the
    object after the run, so resubmitting a run id would otherwise always meet HTTP 409)."""
    created = _post(api, job)
    if created is not None:
        return created
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    _clear_finished(api, ns, name, fingerprint, poll_s=poll_s, timeout_s=delete_timeout_s, log=log)
    created = _post(api, job)
    if created is None:
        raise RunError(f"cannot create RayJob {ns}/{name}: one of that name was created again meanwhile; "
                       f"pass another --name")
    return created


def _read_status(api: ApiClient, ns: str, name: str, retry_s: float, log: Callable[[str], None]) -> dict:
    from kubernetes.client import CustomObjectsApi
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    def attempt(number: int) -> dict:
        try:
            obj = CustomObjectsApi(api).get_namespaced_custom_object(
                group=GROUP, version=VERSION, namespace=ns, plural=PLURAL, name=name)
            return obj.get("status") or {}
        except ApiException as err:
            if err.status == 404:
                raise RunError(f"RayJob {ns}/{name} was deleted while being followed") from None
            if err.status is not None and err.status < 500 and err.status != 429:
                raise RunError(f"cannot read RayJob {ns}/{name} (HTTP {err.status}: {_server_message(err)})") from None
            problem = f"HTTP {err.status}: {_server_message(err)}"
        except HTTPError as err:
            problem = str(err)
        log(f"RayJob {ns}/{name}: status read failed ({problem}); attempt {number} of {_READ_RETRIES}")
        raise Transient(problem)

    try:
        return RetryPolicy(_READ_RETRIES - 1, retry_s, retry_s).run(attempt)
    except GaveUp:
        raise RunError(f"cannot read RayJob {ns}/{name} after {_READ_RETRIES} attempts; it keeps running: "
                       f"kubectl -n {ns} get rayjob {name}") from None


def _describe(status: dict) -> str:
    text = status.get("jobDeploymentStatus") or "New"
    if status.get("jobStatus"):
        text += f" (Ray job {status['jobStatus']})"
    return text


def follow(api: ApiClient, ns: str, name: str, *, poll_s: float, timeout_s: float | None,
           log: Callable[[str], None], queued: bool = False) -> dict:
    """Poll the RayJob until KubeRay marks it Complete, Failed or ValidationFailed (KubeRay
    refused its spec), logging each change. Retrying (backoffLimit) is not final: KubeRay moves
    on from it itself; nor is Suspended under a Kueue queue (``queued``), which admits it in time.
    Suspended without one, nothing will resume it: that ends the follow with what to do."""
    start = time.monotonic()
    last: tuple[str, str] | None = None
    try:
        while True:
            status = _read_status(api, ns, name, poll_s, log)
            state = (status.get("jobDeploymentStatus", ""), status.get("jobStatus", ""))
            if state != last:
                log(f"RayJob {ns}/{name}: {_describe(status)}")
                last = state
            if state[0] in _FINAL_DEPLOYMENT:
                return status
            if state[0] == "Suspended" and not queued:
                raise RunError(f"RayJob {ns}/{name} is Suspended and no Kueue queue names it ({QUEUE_LABEL}), so "
                               f"nothing will resume it; it stays: resume it with kubectl -n {ns} patch rayjob "
                               f"{name} --type merge -p '{{\"spec\":{{\"suspend\":false}}}}', or submit with --queue")
            if timeout_s is not None and time.monotonic() - start > timeout_s:
                raise RunError(f"RayJob {ns}/{name} did not finish within {timeout_s:g} s (now {_describe(status)}); "
                               f"it keeps running: kubectl -n {ns} get rayjob {name} -w")
            time.sleep(poll_s)
    except KeyboardInterrupt:
        log(f"stopped following; the RayJob keeps running: kubectl -n {ns} get rayjob {name} -w "
            f"(stop it: kubectl -n {ns} delete rayjob {name})")
        raise


def check_outcome(ns: str, name: str, status: dict) -> None:
    """Complete means the Ray job ended; only SUCCEEDED is success (older operators report a
    failed Ray job as Complete with jobStatus FAILED)."""
    if status.get("jobDeploymentStatus") == "Complete" and status.get("jobStatus") == "SUCCEEDED":
        return
    why = "".join(f": {status[k]}" for k in ("reason", "message") if status.get(k))
    raise RunError(f"RayJob {ns}/{name} ended {_describe(status)}{why}; details: "
                   f"kubectl -n {ns} describe rayjob {name}; kubectl -n {ns} logs job/{name}")


def _preflight(api: ApiClient, ns: str, job: dict, cfg: RunConfig, *, queued: bool,
               log: Callable[[str], None]) -> list[Finding]:
    """The cluster's answers to what the RayJob needs, each finding logged."""
    view = read_view(api, ns, job, queued)
    instance_type = next((g.instance_type for g in cfg.cluster.nodes if g.gpus and g.instance_type), None)
    findings = check(view, job, queued=queued, instance_type=instance_type, s3=cfg.storage.root.startswith("s3://"))
    for f in findings:
        log(str(f))
    return findings


def submit(config_uri: str, *, namespace: str | None = None, name: str | None = None, image: str | None = None,
           manifest: str | None = None, kubeconfig: str | None = None, context: str | None = None,
           in_cluster: bool = False, wait: bool = True, poll_s: float = 5, timeout_s: float | None = None,
           allow_tag_image: bool = False, queue: str | None = None, delete_timeout_s: float = 600,
           check_only: bool = False, log: Callable[[str], None] = print) -> dict:
    """Validate the run config, create its RayJob and (with `wait`) follow it to the end.

    Returns {"name", "namespace", "status"} with the RayJob's last status. Raises ConfigError
    before anything is created when the config, manifest, name, images or credentials are
    unusable, and RunError when the API refuses the RayJob, a RayJob of that name has not
    finished, or the run does not succeed. The namespace is `namespace`, else the manifest's,
    else the kubeconfig context's (or the pod's), else default. With `queue`, the RayJob waits
    in that Kueue LocalQueue (suspended) until its quota is free. Before creating it asks the
    cluster what it can (``preflight``): a missing thing refuses the submission with its fix;
    ``check_only`` stops there, returning the findings ({"name", "namespace", "findings"}).
    """
    from halluscope.config.load import load_config
    from halluscope.resolve.cluster import check_layout

    if in_cluster and (kubeconfig or context):
        raise ConfigError("in-cluster credentials exclude a kubeconfig or context: pass one or the other")
    cfg = load_config(config_uri)
    check_layout(cfg)
    root = find_checkout()
    template = load_template(manifest, root)
    located = config_for_cluster(config_uri, cfg, root or Path.cwd())
    fingerprint = cfg.fingerprint()
    job = build_rayjob(template, name=rayjob_name(name, cfg.run_id, fingerprint), config_uri=located.uri,
                       fingerprint=fingerprint, image=image)
    admitted = apply_queue(job, queue, cfg.cluster.gpus, cfg.cluster.cpus) if queue else None
    if "://" not in cfg.storage.root or cfg.storage.root.startswith("file://"):
        log(f"warning: storage.root {cfg.storage.root} is local to the run's pods: the results go when "
            "KubeRay deletes the cluster; use an s3:// root to keep them")
    check_images(job, allow_tag_image, log)
    api, credential_ns = _api_client(kubeconfig, context, in_cluster)
    with api:
        ns = namespace or job["metadata"].get("namespace") or credential_ns or "default"
        job["metadata"]["namespace"] = ns
        job_name = job["metadata"]["name"]
        findings = _preflight(api, ns, job, cfg, queued=bool(queue), log=log)
        if check_only:
            if located.target is not None:
                log(f"{located.why}; submit would upload it to {located.target.url}")
            return {"name": job_name, "namespace": ns, "findings": [str(f) for f in findings]}
        missing = [f for f in findings if f.blocking]
        if missing:
            raise ConfigError(f"the cluster cannot run RayJob {ns}/{job_name} as it is ({len(missing)} missing; "
                              "nothing was created): " + "; ".join(str(f) for f in missing))
        located.upload(log)
        created = _create(api, job, fingerprint, poll_s=poll_s, delete_timeout_s=delete_timeout_s, log=log)
        log(f"created RayJob {ns}/{job_name} for {located.uri} (fingerprint {fingerprint}, run id {job_name}); "
            f"follow: kubectl -n {ns} get rayjob {job_name} -w")
        if admitted:
            log(f"queued in Kueue LocalQueue {ns}/{queue}: it starts once the ClusterQueue admits {admitted}")
        if not wait:
            return {"name": job_name, "namespace": ns, "status": created.get("status") or {}}
        status = follow(api, ns, job_name, poll_s=poll_s, timeout_s=timeout_s, log=log,
                        queued=QUEUE_LABEL in job["metadata"].get("labels", {}))
    check_outcome(ns, job_name, status)
    return {"name": job_name, "namespace": ns, "status": status}
