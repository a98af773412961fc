"""What `halluscope submit` asks the cluster before it creates anything (``--check``: only
this): whether the installed operators serve what the RayJob uses, whether the GPU nodes can
hold its GPU pods, and whether its pods' ServiceAccount exists with a cloud role. Each finding
names its fix; a blocking one stops the submission (the API or the scheduler would refuse or
strand the run), a warning is printed.

The checks read objects (``ClusterView``), so they are the same against a live API server and
against recorded ones."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from halluscope.errors import RunError
from halluscope.quantity import parse_quantity

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

RAYJOBS = "rayjobs.ray.io"
LOCALQUEUES = "localqueues.kueue.x-k8s.io"
KUBERAY_MIN = "1.6"  # the first to know authOptions.secretName, which the manifests set
KUEUE_API = "v1beta2"  # served from Kueue 0.15
GPU = "nvidia.com/gpu"
IRSA = "eks.amazonaws.com/role-arn"


@dataclass(frozen=True)
class Finding:
    blocking: bool
    what: str
    fix: str

    def __str__(self) -> str:
        return f"{'missing' if self.blocking else 'warning'}: {self.what}. Fix: {self.fix}"


@dataclass
class ClusterView:
    """What the API server showed: CRDs by name (None: not installed), the nodes (None: not
    allowed to list them), the namespace's ServiceAccounts the RayJob names (None: absent)."""

    namespace: str
    crds: dict[str, dict | None] = field(default_factory=dict)
    nodes: list[dict] | None = None
    service_accounts: dict[str, dict | None] = field(default_factory=dict)
    unreadable: list[str] = field(default_factory=list)  # what the API server would not show this user


def read_view(api: ApiClient, namespace: str, job: dict, queued: bool) -> ClusterView:
    """What ``check`` reads, from the API server (nothing is written): a 404 is an absence, a
    403 a thing this user may not see (a warning, not a refusal)."""
    from kubernetes.client import CoreV1Api, CustomObjectsApi
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    view = ClusterView(namespace)

    def read(what: str, call: Any) -> tuple[bool, Any]:
        try:
            return True, call()
        except ApiException as err:
            if err.status == 404:
                return True, None
            view.unreadable.append(f"{what} (HTTP {err.status})")
            return False, None
        except HTTPError as err:
            raise RunError(f"cannot reach the Kubernetes API at {api.configuration.host}: {err}") from None

    def raw(response: Any) -> dict:
        return json.loads(response.data)

    custom, core = CustomObjectsApi(api), CoreV1Api(api)
    for name in crds_needed(queued):
        ok, crd = read(f"CRD {name}", lambda n=name: custom.get_cluster_custom_object(
            "apiextensions.k8s.io", "v1", "customresourcedefinitions", n))
        if ok:
            view.crds[name] = crd
    ok, nodes = read("the nodes", lambda: raw(core.list_node(_preload_content=False)))
    view.nodes = (nodes or {}).get("items", []) if ok else None
    for name in accounts_of(job):
        ok, account = read(f"ServiceAccount {namespace}/{name}", lambda n=name: raw(
            core.read_namespaced_service_account(n, namespace, _preload_content=False)))
        if ok:
            view.service_accounts[name] = account
    return view


def crds_needed(queued: bool) -> list[str]:
    return [RAYJOBS, *([LOCALQUEUES] if queued else [])]


def accounts_of(job: dict) -> list[str]:
    """The ServiceAccounts the RayJob's pods run as ("default" where a pod names none)."""
    return sorted({p.get("serviceAccountName") or "default" for p in pod_specs(job["spec"])})


def check(view: ClusterView, job: dict, *, queued: bool, instance_type: str | None, s3: bool) -> list[Finding]:
    """Every finding, blocking ones first. What ``view`` could not read is a warning each."""
    found = _kuberay(view.crds[RAYJOBS], job) if RAYJOBS in view.crds else []
    if queued and LOCALQUEUES in view.crds:
        found += _kueue(view.crds[LOCALQUEUES])
    found += _gpu_nodes(view.nodes, job, instance_type)
    found += _accounts(view, job, s3)
    found += [Finding(False, f"{what} could not be read: not checked", "grant this user get on it, or check by hand")
              for what in view.unreadable if not what.startswith("the nodes")]
    return sorted(found, key=lambda f: not f.blocking)


def _kuberay(crd: dict | None, job: dict) -> list[Finding]:
    upgrade = f"install or upgrade KubeRay to {KUBERAY_MIN} or later (helm upgrade --install kuberay-operator " \
              f"kuberay/kuberay-operator --version {KUBERAY_MIN}.2)"
    if crd is None:
        return [Finding(True, f"KubeRay is not installed (no CRD {RAYJOBS})", upgrade)]
    version = next((v for v in crd["spec"].get("versions", []) if v.get("name") == "v1" and v.get("served")), None)
    if version is None:
        return [Finding(True, "the installed KubeRay serves no ray.io/v1 RayJob", upgrade)]
    unknown = unknown_fields(job, version["schema"]["openAPIV3Schema"])
    if unknown:
        return [Finding(True, f"the installed KubeRay's RayJob does not know {', '.join(unknown[:3])} (it refuses "
                              "the object: submit creates with strict field validation)", upgrade)]
    return []


def _kueue(crd: dict | None) -> list[Finding]:
    fix = "install or upgrade Kueue to 0.15 or later, with its RayJob integration; then kubectl apply -k k8s/kueue"
    if crd is None:
        return [Finding(True, f"Kueue is not installed (no CRD {LOCALQUEUES})", fix)]
    if not any(v.get("name") == KUEUE_API and v.get("served") for v in crd["spec"].get("versions", [])):
        return [Finding(True, f"the installed Kueue serves no kueue.x-k8s.io/{KUEUE_API}", fix)]
    return []


def _gpu_nodes(nodes: list[dict] | None, job: dict, instance_type: str | None) -> list[Finding]:
    gpu_pods = [p for p in pod_specs(job["spec"]) if pod_requests(p).get(GPU)]
    if not gpu_pods:
        return []
    if nodes is None:
        return [Finding(False, "the nodes could not be listed: the GPU nodes' labels, GPUs and storage are not "
                               "checked", "grant this user list on nodes (a ClusterRole), or check them by hand")]
    pod = gpu_pods[0]
    wanted = pod_requests(pod)
    gpu_nodes = [n for n in nodes if _allocatable(n).get(GPU) or (instance_type and _labels(n).get(
        "node.kubernetes.io/instance-type") == instance_type)]
    if not gpu_nodes:
        return [Finding(False, "no GPU node is up now: its labels, GPUs and storage are not checked",
                        "let the node autoscaler (Karpenter, the cluster autoscaler) bring them, then check again")]
    selector = pod.get("nodeSelector") or {}
    chosen = [n for n in gpu_nodes if all(_labels(n).get(k) == v for k, v in selector.items())]
    found = []
    if not chosen:
        return [Finding(True, f"no GPU node carries the GPU pods' node selector {selector} (GPU feature discovery "
                              "labels are missing on EKS's GPU AMI)",
                        "select by node.kubernetes.io/instance-type (k8s/overlays/prod does), or install NVIDIA GPU "
                        "feature discovery")]
    for n in chosen:
        name, have = n["metadata"]["name"], _allocatable(n)
        if have.get(GPU, 0) < wanted[GPU]:
            found.append(Finding(True, f"node {name} offers {have.get(GPU, 0):g} {GPU}; a GPU pod asks {wanted[GPU]:g}",
                                 "run NVIDIA's device plugin on the GPU nodes (EKS: the NVIDIA device plugin "
                                 "DaemonSet, or the GPU operator)"))
        need = wanted.get("ephemeral-storage", 0.0)
        if have.get("ephemeral-storage", 0.0) < need:
            found.append(Finding(True, f"node {name} has {have.get('ephemeral-storage', 0.0) / 2**30:,.0f} GiB of "
                                       f"ephemeral storage; a GPU pod asks {need / 2**30:,.0f} GiB for its model cache",
                                 "back the kubelet's storage with the instance's NVMe disks in RAID0 (EKS AL2023: a "
                                 "NodeConfig with spec.instance.localStorage.strategy: RAID0 in the node group's "
                                 "user data)"))
    return found


def _accounts(view: ClusterView, job: dict, s3: bool) -> list[Finding]:
    found = []
    for name in accounts_of(job):
        if name not in view.service_accounts:
            continue  # unreadable
        account = view.service_accounts[name]
        if account is None:
            found.append(Finding(True, f"ServiceAccount {view.namespace}/{name}, which the RayJob's pods run as, does "
                                       "not exist", "kubectl apply -k k8s/overlays/prod (k8s/base/serviceaccounts.yaml "
                                                    "creates it)"))
        elif s3 and IRSA not in ((account.get("metadata") or {}).get("annotations") or {}):
            found.append(Finding(False, f"ServiceAccount {view.namespace}/{name} carries no IAM role ({IRSA}): the "
                                        "run reaches storage only by an EKS Pod Identity association, which the API "
                                        "server does not show, or by the keys in Secret halluscope-run",
                                 f"kubectl -n {view.namespace} annotate serviceaccount {name} "
                                 f"{IRSA}=arn:aws:iam::<account>:role/<role>, or create a Pod Identity association"))
    return found


def unknown_fields(obj: Any, schema: dict, path: str = "") -> list[str]:
    """The fields of ``obj`` its OpenAPI ``schema`` does not declare, as dotted paths: what an API
    server with strict field validation refuses."""
    if not isinstance(schema, dict) or schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(obj, dict) and "properties" in schema:
        props, where = schema["properties"], f"{path}." if path else ""
        return [u for k, v in obj.items()
                for u in ([f"{where}{k}"] if k not in props else unknown_fields(v, props[k], f"{where}{k}"))]
    if isinstance(obj, list) and "items" in schema:
        return [u for v in obj for u in unknown_fields(v, schema["items"], f"{path}[]")]
    return []


def pod_specs(node: Any) -> list[dict]:
    """Every pod spec (a mapping with ``containers``) inside a manifest, however deep."""
    if isinstance(node, dict):
        return ([node] if isinstance(node.get("containers"), list) else []) + [p for v in node.values()
                                                                              for p in pod_specs(v)]
    if isinstance(node, list):
        return [p for v in node for p in pod_specs(v)]
    return []


def pod_requests(pod: dict) -> dict[str, float]:
    """What a pod spec's containers request, summed per resource, as numbers."""
    out: dict[str, float] = {}
    for c in pod["containers"]:
        for k, v in ((c.get("resources") or {}).get("requests") or {}).items():
            out[k] = out.get(k, 0.0) + parse_quantity(v)
    return out


def _allocatable(node: dict) -> dict[str, float]:
    return {k: parse_quantity(v) for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()}


def _labels(node: dict) -> dict[str, str]:
    return (node.get("metadata") or {}).get("labels") or {}
