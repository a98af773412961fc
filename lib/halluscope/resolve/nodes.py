"""The physical cluster, node by node: where each served replica's GPUs land.

A tensor-parallel engine runs on one Ray node (Ray's STRICT_PACK placement groups, as the Serve
configs ask). On Kubernetes a Ray node is a pod, and the RayService and each RayJob are Ray
clusters of their own: a pod asks for ``cluster.pod_gpus`` GPUs of one machine whatever its
engines use. So 16 GPUs on two machines of 8 hold no pod of the run's once a TP8 extractor and a
TP4 judge each sit in a pod of 8, though 4 GPUs idle. A pooled GPU count cannot tell; this can.
Replicas go best fit (the fitting Ray node with the fewest free GPUs): the service's engines
first, largest first, then the roles the run serves, then its models under test in the waves'
order; a pod opens on a machine only when no open pod of its owner fits.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from halluscope.config.schema import ClusterSpec, ServiceHold
from halluscope.errors import ConfigError
from halluscope.serving.throughput import CHECKOUT

ANY_GPU = "GPU"
SERVICE, RUN = "service", "run"


@dataclass(frozen=True)
class Demand:
    """``replicas`` engines of ``size`` GPUs of ``resource`` (a type, or "GPU": any), each on one Ray node."""

    holder: str
    resource: str
    size: float
    replicas: int


@dataclass
class RayNode:
    """A pod of ``owner`` (the service's or the run's), or a whole machine both share when pods are
    not described (one Ray cluster over the machines)."""

    name: str
    owner: str | None
    gpus: float
    holds: list[tuple[str, float]] = field(default_factory=list)  # (holder, GPUs)

    @property
    def free(self) -> float:
        return self.gpus - sum(n for _, n in self.holds)


@dataclass
class Machine:
    name: str
    accelerator: str | None
    gpus: float
    ray_nodes: list[RayNode] = field(default_factory=list)

    @property
    def unclaimed(self) -> float:
        """GPUs no pod has asked for."""
        return self.gpus - sum(r.gpus for r in self.ray_nodes)

    def serves(self, resource: str) -> bool:
        return resource == ANY_GPU or resource == self.accelerator


class Layout:
    """The machines, the Ray nodes on them, what holds those, and the placement rule."""

    def __init__(self, machines: list[Machine], pod_gpus: float | None) -> None:
        self.machines = machines
        self.pod_gpus = pod_gpus
        if pod_gpus is None:
            for m in machines:
                m.ray_nodes = [RayNode(m.name, None, m.gpus)]

    @classmethod
    def of(cls, cluster: ClusterSpec, service_at_most: bool = False) -> Layout | None:
        """The described machines with the shared service placed (its minimum replicas, or with
        ``service_at_most`` its maximum); None when none is described. A ``cluster.gpus`` quota
        beyond what the service leaves of them is refused: Kueue would hold the run for GPUs that
        are never free."""
        if not cluster.nodes:
            return None
        layout = cls([Machine(f"{g.name}-{i}", g.accelerator, float(g.gpus)) for g in cluster.nodes
                      for i in range(g.count)], cluster.pod_gpus)
        for hold in sorted(service_holds(cluster), key=lambda h: -h.gpus):
            replicas = hold.most if service_at_most else hold.replicas
            # named apart from a model under test that may share its model id
            demand = Demand(f"{hold.name} (service)", hold.accelerator or ANY_GPU, float(hold.gpus), replicas)
            if not layout.take(demand, SERVICE):
                kind = f"{hold.accelerator} " if hold.accelerator else ""
                bound = "at most" if service_at_most else "at least"
                raise ConfigError(f"cluster.service: {hold.name} ({bound} {replicas} x {hold.gpus} {kind}GPUs, each "
                                  f"on one node) does not fit the nodes cluster.nodes describes: {layout.describe()}")
        for resource, quota in (cluster.gpu_budget() or {}).items():
            left = layout.free_for(RUN, resource)
            if quota > left + 1e-9:
                kind = f"{resource} " if resource != ANY_GPU else ""
                raise ConfigError(f"cluster.gpus asks for {quota:g} {kind}GPUs and the nodes cluster.nodes describes "
                                  f"leave the run {left:g} after cluster.service's holds: {layout.describe()}. "
                                  "Add a node, or lower cluster.gpus to what the nodes leave")
        return layout

    @property
    def total(self) -> float:
        return sum(m.gpus for m in self.machines)

    def free_for(self, owner: str, resource: str = ANY_GPU) -> float:
        """GPUs of ``resource`` ``owner`` could still place on: free in its Ray nodes, and those no pod asked for."""
        machines = [m for m in self.machines if m.serves(resource)]
        return sum(r.free for m in machines for r in m.ray_nodes if r.owner in (owner, None)) + \
            (sum(m.unclaimed for m in machines) if self.pod_gpus is not None else 0.0)

    def copy(self) -> Layout:
        return copy.deepcopy(self)

    def take(self, d: Demand, owner: str = RUN) -> bool:
        """Places every replica (best fit, opening pods as needed) or none."""
        before = copy.deepcopy(self.machines)
        for _ in range(d.replicas):
            node = self._fitting(d, owner)
            if node is None:
                self.machines = before
                return False
            node.holds.append((d.holder, d.size))
        return True

    def _fitting(self, d: Demand, owner: str) -> RayNode | None:
        fitting = [r for m in self.machines if m.serves(d.resource) for r in m.ray_nodes
                   if r.owner in (owner, None) and r.free + 1e-9 >= d.size]
        if fitting:
            return min(fitting, key=lambda r: (r.free, r.name))
        if self.pod_gpus is None or self.pod_gpus < d.size:
            return None
        room = [m for m in self.machines if m.serves(d.resource) and m.unclaimed + 1e-9 >= self.pod_gpus]
        if not room:
            return None
        machine = min(room, key=lambda m: (m.unclaimed, m.name))
        pod = RayNode(f"{machine.name}/{owner}-pod-{len(machine.ray_nodes)}", owner, self.pod_gpus)
        machine.ray_nodes.append(pod)
        return pod

    def pods_of(self, owner: str) -> int:
        """How many pods ``owner`` holds."""
        return sum(r.owner == owner for m in self.machines for r in m.ray_nodes)

    def nodes_of(self, holder: str) -> list[str]:
        return [r.name for m in self.machines for r in m.ray_nodes for h, _ in r.holds if h == holder]

    def release(self, holder: str) -> None:
        """The holder's GPUs go back to its Ray nodes; a pod stays (the autoscaler's idle timeout ends it)."""
        for m in self.machines:
            for r in m.ray_nodes:
                r.holds = [h for h in r.holds if h[0] != holder]

    def refusal(self, d: Demand) -> str | None:
        """Why ``d`` can never be placed as the nodes are held now (by the service and the run's
        roles), or None; ``refused`` says what holds the nodes, once for every model refused."""
        if self.copy().take(d):
            return None
        kind = f"{d.resource} " if d.resource != ANY_GPU else ""
        largest = self.pod_gpus if self.pod_gpus is not None else max((m.gpus for m in self.machines), default=0.0)
        if largest < d.size:
            where = f"a pod holds {largest:g} (cluster.pod_gpus)" if self.pod_gpus is not None else \
                f"the largest node has {largest:g}"
            return (f"model '{d.holder}' needs {d.size:g} {kind}GPUs on one node and {where}: lower its tensor "
                    "parallelism")
        return (f"model '{d.holder}' needs {d.replicas} x {d.size:g} {kind}GPUs, each replica on one node"
                + (f" in a pod of {self.pod_gpus:g}" if self.pod_gpus is not None else ""))

    def refused(self, problems: list[str]) -> str:
        """The models ``refusal`` refused, with the nodes as they are held and what would fit them."""
        return (f"{'; '.join(problems)}. The nodes: {self.describe()}. Add a node, serve the shared roles in the "
                "run, or give them fewer GPUs")

    def describe(self) -> str:
        """'2 nodes, 12 of 16 GPUs in use, 16 asked for by pods: gpu-worker-0 [service pod: extractor 8], ...'."""
        used = sum(g for m in self.machines for r in m.ray_nodes for _, g in r.holds)
        claimed = sum(m.gpus - m.unclaimed for m in self.machines) if self.pod_gpus is not None else None
        head = f"{len(self.machines)} nodes, {used:g} of {self.total:g} GPUs in use" + \
            (f", {claimed:g} asked for by pods" if claimed is not None else "")
        return head + ": " + ", ".join(f"{m.name} {self._machine_text(m)}" for m in self.machines)

    def _machine_text(self, m: Machine) -> str:
        def held(r: RayNode) -> str:
            return " + ".join(f"{h} {g:g}" for h, g in r.holds) or "nothing"
        if self.pod_gpus is None:
            (r,) = m.ray_nodes
            return f"[{held(r)}; {r.free:g} free]"
        pods = [f"{r.owner} pod: {held(r)}; {r.free:g} idle" for r in m.ray_nodes]
        return "[" + "; ".join([*pods, f"{m.unclaimed:g} GPUs unclaimed"]) + "]"


def service_holds(cluster: ClusterSpec) -> list[ServiceHold]:
    out: list[ServiceHold] = []
    for entry in cluster.service:
        out += serve_config_holds(_found(Path(entry))) if isinstance(entry, str) else [entry]
    return out


def _found(path: Path) -> Path:
    """A relative path in the working directory (a job's is the checkout), else in the checkout
    halluscope runs from, as cluster/throughput.yaml is found."""
    if path.is_absolute() or path.exists():
        return path
    return CHECKOUT / path if (CHECKOUT / path).exists() else path


_SIZING_KEYS = ("dtype", "quantization")  # the engine arguments its time depends on, besides parallelism


def serve_config_holds(path: Path) -> list[ServiceHold]:
    """The engines a Ray Serve config (``serve/*.yaml``) keeps up: per ``ray.serve.llm`` LLM config,
    tensor x pipeline parallel GPUs times its minimum replicas."""
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"cluster.service: cannot read the Serve config {path}: {err}") from err
    out = []
    for app in (doc or {}).get("applications") or []:
        for llm in ((app.get("args") or {}).get("llm_configs") or []):
            engine = llm.get("engine_kwargs") or {}
            deployment = llm.get("deployment_config") or {}
            scaling = deployment.get("autoscaling_config") or {}
            replicas = scaling.get("min_replicas", deployment.get("num_replicas", 1))
            most = scaling.get("max_replicas", replicas)
            target = scaling.get("target_ongoing_requests", deployment.get("max_ongoing_requests"))
            name = (llm.get("model_loading_config") or {}).get("model_id") or app.get("name")
            gpus = int(engine.get("tensor_parallel_size", 1)) * int(engine.get("pipeline_parallel_size", 1))
            if replicas:
                out.append(ServiceHold(name=str(name), gpus=gpus, replicas=int(replicas), max_replicas=int(most),
                                       target_ongoing_requests=None if target is None else int(target),
                                       accelerator=llm.get("accelerator_type"),
                                       model_source=(llm.get("model_loading_config") or {}).get("model_source"),
                                       engine_kwargs={k: v for k, v in engine.items() if k in _SIZING_KEYS}))
    if not out:
        raise ConfigError(f"cluster.service: {path} names no ray.serve.llm engine (applications[].args.llm_configs)")
    return out
