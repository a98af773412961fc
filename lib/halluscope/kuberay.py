"""Run a config on Kubernetes as a KubeRay RayJob and follow it to the end.

The RayJob is the repository's own k8s/base/rayjob.yaml (or a rendered overlay passed as
`manifest`), so `halluscope submit` creates the object that `kubectl apply -k` would: the same
token auth, pod security and secret references. Only the name, the run config URI and
optionally the image change. The RayJob's name is the run id (the submitter reads it through
the downward API), so KubeRay's retries and a resubmission under the same name resume one
run. The template is read from the checkout, not embedded in the package: a second copy would
drift from the kustomize base that the tests check, and the checkout is where submissions come
from (a laptop, CI, or the image's WORKDIR, which holds the repository).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import yaml

from halluscope.errors import ConfigError, RunError

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

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


def _pod_specs(node: Any) -> list[dict]:
    if isinstance(node, dict):
        found = [node] if isinstance(node.get("containers"), list) else []
        return found + [s for v in node.values() for s in _pod_specs(v)]
    if isinstance(node, list):
        return [s for v in node for s in _pod_specs(v)]
    return []


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
        for pod in _pod_specs(spec):
            for c in pod["containers"] + pod.get("initContainers", []):
                c["image"] = image
    meta = job.setdefault("metadata", {})
    for key in ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"):
        meta.pop(key, None)
    meta["name"] = check_name(name)
    meta.setdefault("labels", {}).update({"app.kubernetes.io/part-of": "halluscope",
                                          "halluscope.io/fingerprint": fingerprint})
    meta.setdefault("annotations", {})["halluscope.io/config"] = config_uri
    job.pop("status", None)
    return job


def _api_client(kubeconfig: str | None, context: str | None, in_cluster: bool) -> tuple["ApiClient", str | None]:
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


def _create(api: "ApiClient", job: dict) -> dict:
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
        why = _server_message(err)
        hint = {
            401: "the credentials were refused",
            403: f"the credentials may not create rayjobs.{GROUP} in namespace {ns}",
            404: f"namespace {ns} or the RayJob resource does not exist (is the KubeRay operator installed?)",
            409: f"a RayJob named {name} exists in {ns}: pass another --name or delete it",
        }.get(err.status, "the API server refused it")
        raise RunError(f"cannot create RayJob {ns}/{name} (HTTP {err.status}: {why}); {hint}") from None
    except HTTPError as err:
        raise RunError(f"cannot reach the Kubernetes API at {api.configuration.host}: {err}") from None


def _read_status(api: "ApiClient", ns: str, name: str, retry_s: float, log: Callable[[str], None]) -> dict:
    from kubernetes.client import CustomObjectsApi
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    for attempt in range(1, _READ_RETRIES + 1):
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
        log(f"RayJob {ns}/{name}: status read failed ({problem}); attempt {attempt} of {_READ_RETRIES}")
        if attempt < _READ_RETRIES:
            time.sleep(retry_s)
    raise RunError(f"cannot read RayJob {ns}/{name} after {_READ_RETRIES} attempts; it keeps running: "
                   f"kubectl -n {ns} get rayjob {name}")


def _describe(status: dict) -> str:
    text = status.get("jobDeploymentStatus") or "New"
    if status.get("jobStatus"):
        text += f" (Ray job {status['jobStatus']})"
    return text


def follow(api: "ApiClient", ns: str, name: str, *, poll_s: float, timeout_s: float | None,
           log: Callable[[str], None]) -> dict:
    """Poll the RayJob until KubeRay marks it Complete or Failed, logging each change. Retrying
    (backoffLimit) and Suspended are not final: KubeRay moves on from them itself."""
    start = time.monotonic()
    last: tuple[str, str] | None = None
    try:
        while True:
            status = _read_status(api, ns, name, poll_s, log)
            state = (status.get("jobDeploymentStatus", ""), status.get("jobStatus", ""))
            if state != last:
                log(f"RayJob {ns}/{name}: {_describe(status)}")
                last = state
            if state[0] in ("Complete", "Failed"):
                return status
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


def submit(config_uri: str, *, namespace: str | None = None, name: str | None = None, image: str | None = None,
           manifest: str | None = None, kubeconfig: str | None = None, context: str | None = None,
           in_cluster: bool = False, wait: bool = True, poll_s: float = 5, timeout_s: float | None = None,
           log: Callable[[str], None] = print) -> dict:
    """Validate the run config, create its RayJob and (with `wait`) follow it to the end.

    Returns {"name", "namespace", "status"} with the RayJob's last status. Raises ConfigError
    before anything is created when the config, manifest, name or credentials are unusable, and
    RunError when the API refuses the RayJob or the run does not succeed. The namespace is
    `namespace`, else the manifest's, else the kubeconfig context's (or the pod's), else default.
    """
    from halluscope.config import load_config

    if in_cluster and (kubeconfig or context):
        raise ConfigError("in-cluster credentials exclude a kubeconfig or context: pass one or the other")
    cfg = load_config(config_uri)
    root = find_checkout()
    template = load_template(manifest, root)
    located = cluster_uri(config_uri, root or Path.cwd())
    fingerprint = cfg.fingerprint()
    job = build_rayjob(template, name=rayjob_name(name, cfg.run_id, fingerprint), config_uri=located,
                       fingerprint=fingerprint, image=image)
    if "://" not in cfg.storage.root or cfg.storage.root.startswith("file://"):
        log(f"warning: storage.root {cfg.storage.root} is local to the run's pods: the results go when "
            "KubeRay deletes the cluster; use an s3:// root to keep them")
    api, credential_ns = _api_client(kubeconfig, context, in_cluster)
    with api:
        ns = namespace or job["metadata"].get("namespace") or credential_ns or "default"
        job["metadata"]["namespace"] = ns
        job_name = job["metadata"]["name"]
        created = _create(api, job)
        log(f"created RayJob {ns}/{job_name} for {located} (fingerprint {fingerprint}, run id {job_name}); "
            f"follow: kubectl -n {ns} get rayjob {job_name} -w")
        if not wait:
            return {"name": job_name, "namespace": ns, "status": created.get("status") or {}}
        status = follow(api, ns, job_name, poll_s=poll_s, timeout_s=timeout_s, log=log)
    check_outcome(ns, job_name, status)
    return {"name": job_name, "namespace": ns, "status": status}
