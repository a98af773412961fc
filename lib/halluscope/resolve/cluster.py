"""What a run's served models hold and where, read from the config alone: each one's GPUs or CPUs
(``Job``), the budget the run's served models under test share, the nodes ``cluster.nodes``
describes, the CPUs the run holds, and the checks that refuse, before any deployment, a model
that can never fit. ``pipeline.schedule`` decides when each holds its share."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from halluscope.config.schema import ModelSpec, RunConfig
from halluscope.errors import ConfigError
from halluscope.resolve.nodes import RUN, Demand, Layout
from halluscope.resolve.service_engines import check_service_load
from halluscope.serving.served import cpus_of, placement

CPU = "CPU"


@dataclass(frozen=True)
class Job:
    """One served model under test: what it holds while deployed and, when known, for how long
    (deployment start and generation)."""

    model: str
    resource: str
    units: float  # per replica x replicas
    deploy_s: float | None = None
    generate_s: float | None = None
    replicas: int = 1

    @property
    def demand(self) -> Demand:
        """What it asks of the nodes: each replica's GPUs on one node."""
        return Demand(self.model, self.resource, self.units / self.replicas, self.replicas)

    @property
    def seconds(self) -> float | None:
        if self.deploy_s is None or self.generate_s is None:
            return None
        return self.deploy_s + self.generate_s

    def describe(self) -> str:
        kind = "CPUs" if self.resource == CPU else f"{self.resource} GPUs" if self.resource != "GPU" else "GPUs"
        return f"{self.units:g} {kind}"


def pool_of(resource: str, budget: dict[str, float]) -> str | None:
    """The budget entry a resource draws from, None when the budget has none for it."""
    if resource in budget:
        return resource
    if resource == CPU:
        return None
    if "GPU" in budget:
        return "GPU"
    gpu_types = [k for k in budget if k != CPU]
    return gpu_types[0] if resource == "GPU" and len(gpu_types) == 1 else None


def refusals(jobs: Iterable[Job], budget: dict[str, float], what: str = "cluster.gpus") -> list[str]:
    """Why each model that alone exceeds the budget can never be deployed."""
    out = []
    for j in jobs:
        pool = pool_of(j.resource, budget)
        have = budget.get(pool, 0.0) if pool else 0.0
        if j.units > have + 1e-9:
            name = f"{pool} " if pool and pool not in ("GPU", CPU) else ""
            out.append(f"model '{j.model}' needs {j.describe()}, the budget has {have:g} {name}"
                       f"{'CPUs' if j.resource == CPU else 'GPUs'} ({what})")
    return out


def check_fits(jobs: Iterable[Job], budget: dict[str, float], what: str = "cluster.gpus",
               layout: Layout | None = None) -> None:
    """Refuses the models that alone exceed the budget or, with ``layout``, that no node can hold
    (that message names the nodes, and replaces the budget's)."""
    jobs = list(jobs)
    by_nodes = {j.model: r for j in jobs if layout is not None and j.resource != CPU
                for r in [layout.refusal(j.demand)] if r}
    problems = refusals([j for j in jobs if j.model not in by_nodes], budget, what)
    if layout is not None and by_nodes:
        problems.append(layout.refused(list(by_nodes.values())))
    if problems:
        raise ConfigError("refused before any deployment: " + "; ".join(problems))


def scheduled(spec: ModelSpec) -> bool:
    """Models under test the run serves itself: deployed in waves, each only while it generates."""
    return spec.role == "test" and spec.served


def job_of(spec: ModelSpec, deploy_s: float | None = None, generate_s: float | None = None) -> Job:
    resource, units = placement(spec)
    return Job(spec.id, resource, units * spec.replicas, deploy_s, generate_s, spec.replicas)


def layout(cfg: RunConfig) -> Layout | None:
    """The nodes ``cluster.nodes`` describes, held by the shared service and then by the roles the
    run serves for its whole length; None when the config describes no node. Each call is a
    fresh copy: the waves and the estimate each place their models on their own."""
    nodes = Layout.of(cfg.cluster)
    if nodes is None:
        return None
    for m in cfg.models:
        if m.served and not scheduled(m) and (j := job_of(m)).resource != CPU and not nodes.take(j.demand):
            raise ConfigError(f"refused before any deployment: the {m.role} '{m.id}' the run serves needs "
                              f"{j.replicas} x {j.units / j.replicas:g} GPUs, each replica on one node; "
                              f"{nodes.describe()}")
    return nodes


def budget(cfg: RunConfig, gpus_found: float | None, cpus: float | None) -> dict[str, float] | None:
    """What the waves may hold: ``cluster.gpus`` (a quota), else what the shared service leaves of
    ``cluster.nodes``, else ``gpus_found`` (the Ray cluster's; None: unknown, and then no budget at
    all), less the GPUs of the roles the run serves; of ``cpus``
    (None: not known, not limited) what the roles and the pipeline's actors leave (``cpu_demand``)."""
    gpus = cfg.cluster.gpu_budget()
    nodes = Layout.of(cfg.cluster)
    if gpus is None and nodes is not None:  # what the service leaves of the described nodes
        gpus = {"GPU": nodes.free_for(RUN)}
    if gpus is None:
        if gpus_found is None:
            return None
        gpus = {"GPU": gpus_found}
    out = dict(gpus)
    for m in cfg.models:
        if m.served and not scheduled(m):
            j = job_of(m)
            pool = pool_of(j.resource, out)
            if pool is not None and pool != CPU:
                out[pool] -= j.units
    out[CPU] = math.inf if cpus is None else cpus - sum(cpu_demand(cfg, scheduled_models=False).values())
    return out


def check_layout(cfg: RunConfig) -> None:
    """What ``submit`` asks before it creates anything: the served models under test fit the GPUs
    and nodes the config describes, beside the shared service and the roles the run serves, and
    its calls to the shared service stay within what the service's nodes serve."""
    check_service_load(cfg)
    gpus = budget(cfg, None, None)  # None: neither cluster.gpus nor cluster.nodes, the Ray cluster's at the start
    if gpus is None:
        return
    jobs = [j for m in cfg.models if scheduled(m) for j in [job_of(m)] if j.resource != CPU]
    check_fits(jobs, {k: v for k, v in gpus.items() if k != CPU}, budget_source(cfg), layout(cfg))


def budget_source(cfg: RunConfig) -> str:
    """Where ``budget`` took the GPUs from, for a refusal to name."""
    if cfg.cluster.gpus is not None:
        return "cluster.gpus"
    return "cluster.nodes" if cfg.cluster.nodes else "the Ray cluster's GPUs; set cluster.gpus"


def cpu_demand(cfg: RunConfig, scheduled_models: bool = True) -> dict[str, float]:
    """Logical CPUs the run holds besides Ray's own, by holder: the roles it serves, the pipeline's
    actor pools, room for its tasks and (``scheduled_models``) its served models under test all at once."""
    out: dict[str, float] = {}
    for m in cfg.models:
        if m.served and (scheduled_models or not scheduled(m)):
            out[f"model '{m.id}' ({m.role})"] = cpus_of(m) * m.replicas
    conc = cfg.concurrency
    out["Evaluate actors (concurrency.verify_actors x 1)"] = float(conc.verify_actors)
    if any(not m.replayed for m in cfg.models if m.role == "test"):
        out["Generate actors (concurrency.generate_actors x 0.5)"] = 0.5 * conc.generate_actors
    out["tasks (unit expansion, generation)"] = 1.0
    return out


def check_cpus(cfg: RunConfig, total: float) -> None:
    """Before anything starts: the roles, the pipeline's actors and the smallest served model under
    test fit the CPUs, or the run says what holds them (otherwise a stage never schedules, and
    nothing says why)."""
    fixed = cpu_demand(cfg, scheduled_models=False)
    smallest = min((j.units for m in cfg.models if scheduled(m) for j in [job_of(m)] if j.resource == CPU),
                   default=0.0)
    need = sum(fixed.values()) + smallest
    if need > total + 1e-9:
        holders = "; ".join(f"{k} {v:g}" for k, v in fixed.items())
        extra = f"; the smallest served model under test {smallest:g}" if smallest else ""
        raise ConfigError(f"the run needs {need:g} logical CPUs at once and the cluster has {total:g}: "
                          f"{holders}{extra}. Lower serve.num_cpus or concurrency.verify_actors, or raise "
                          "ray.num_cpus / cluster.cpus")
