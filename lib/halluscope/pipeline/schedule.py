"""Which served models under test hold the cluster when: a schedule within the run's budget
(``resolve.cluster``: what each model holds, the budget, the nodes).

One rule serves both the estimate (``simulate``: estimated seconds per model) and the run
(``Admission``, asked again whenever a deployment is given back): models are taken in order of
their estimated resource-work, largest first (longest-processing-time list scheduling; config
order where a size is unknown), and every model that fits in what is free starts, later ones
filling the room an earlier one leaves (backfill). A model that alone exceeds the budget never
fits: it is refused before anything is deployed.

Resources are "CPU" or a GPU resource: an accelerator type ("H100") or "GPU" (any). A budget
keyed "GPU" covers every GPU resource; one keyed by type covers that type (and "GPU" demands
when it is the only type).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from halluscope.resolve.cluster import CPU, Job, check_fits, pool_of
from halluscope.resolve.nodes import Layout


def order(jobs: Sequence[Job]) -> list[Job]:
    """Largest resource-work first; the config's order when any size is unknown."""
    if any(j.seconds is None for j in jobs):
        return list(jobs)
    return sorted(jobs, key=lambda j: -(j.units * (j.seconds or 0.0)))


class Admission:
    """The run's and the estimate's one rule for which model starts next."""

    def __init__(self, jobs: Sequence[Job], budget: dict[str, float], layout: Layout | None = None) -> None:
        check_fits(jobs, budget, layout=layout)
        self.pending = order(jobs)
        self.free = dict(budget)
        self.layout = layout  # node by node, when the config describes the nodes

    def start(self, allowed: Callable[[Job], bool] | None = None) -> list[Job]:
        """Every pending model that fits in what is free now, in order (the later ones backfill);
        ``allowed`` may hold a model back (a dollar budget)."""
        started = []
        for j in list(self.pending):
            pool = pool_of(j.resource, self.free)
            if pool is not None and j.units <= self.free[pool] + 1e-9 and (allowed is None or allowed(j)) \
                    and (self.layout is None or j.resource == CPU or self.layout.take(j.demand)):
                self.free[pool] -= j.units
                self.pending.remove(j)
                started.append(j)
        return started

    def release(self, job: Job) -> None:
        pool = pool_of(job.resource, self.free)
        if pool is not None:
            self.free[pool] += job.units
        if self.layout is not None:
            self.layout.release(job.model)


@dataclass
class Window:
    """One model's time on the cluster, in seconds from the schedule's start."""

    model: str
    wave: int
    resource: str
    units: float
    start_s: float
    ready_s: float
    end_s: float
    nodes: tuple[str, ...] = ()  # where its replicas run, when the config describes the nodes

    @property
    def held_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def busy_s(self) -> float:
        return self.end_s - self.ready_s


@dataclass
class Schedule:
    windows: list[Window] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    cluster: str | None = None  # the described nodes, as the service and the run's roles hold them

    @property
    def makespan_s(self) -> float:
        return max((w.end_s for w in self.windows), default=0.0)

    def peak(self, gpus: bool = True) -> float:
        """Most units held at once (GPUs, or CPUs with ``gpus=False``)."""
        events = sorted([(w.start_s, w.units) for w in self.windows if (w.resource != CPU) == gpus]
                        + [(w.end_s, -w.units) for w in self.windows if (w.resource != CPU) == gpus],
                        key=lambda e: (e[0], e[1]))
        held = peak = 0.0
        for _, delta in events:
            held += delta
            peak = max(peak, held)
        return peak

    def held_hours(self, gpus: bool = True) -> float:
        return math.fsum(w.units * w.held_s for w in self.windows if (w.resource != CPU) == gpus) / 3600

    def busy_hours(self, gpus: bool = True) -> float:
        return math.fsum(w.units * w.busy_s for w in self.windows if (w.resource != CPU) == gpus) / 3600

    def waves(self) -> list[list[str]]:
        """Models by wave: those that start together, in start order."""
        out: dict[int, list[str]] = {}
        for w in sorted(self.windows, key=lambda w: (w.wave, w.start_s, w.model)):
            out.setdefault(w.wave, []).append(w.model)
        return [out[k] for k in sorted(out)]

    def lower_bound_s(self, budget: dict[str, float]) -> float:
        """No schedule is shorter than the longest model, nor than the total work of a pool
        spread over its whole budget."""
        work: dict[str, float] = {}
        for w in self.windows:
            pool = pool_of(w.resource, budget) or w.resource
            work[pool] = work.get(pool, 0.0) + w.units * w.held_s
        spread = max((v / budget[k] for k, v in work.items() if budget.get(k)), default=0.0)
        return max(spread, max((w.held_s for w in self.windows), default=0.0))

    def as_dict(self) -> dict:
        return {"waves": self.waves(), "peak_gpus": self.peak(), "makespan_s": round(self.makespan_s, 3),
                "gpu_hours_held": self.held_hours(), "gpu_hours_busy": self.busy_hours(),
                "models": [{"model": w.model, "wave": w.wave, "resource": w.resource, "units": w.units,
                            "deploy_start_s": round(w.start_s, 3), "generate_start_s": round(w.ready_s, 3),
                            "release_s": round(w.end_s, 3), "nodes": list(w.nodes)} for w in self.windows],
                "cluster": self.cluster, "notes": list(self.notes)}


def simulate(jobs: Sequence[Job], budget: dict[str, float] | None, layout: Layout | None = None) -> Schedule:
    """The schedule ``Admission`` gives when every model takes its estimated time. Without a
    budget every model starts at once; a model of unknown time ends the simulation there."""
    if not jobs:
        return Schedule()
    if budget is None:
        budget = {}
        for j in jobs:
            budget[j.resource] = budget.get(j.resource, 0.0) + j.units
    admission = Admission(jobs, budget, layout)
    now, wave = 0.0, 0
    running: list[tuple[float, Job]] = []  # (end, job)
    schedule = Schedule(cluster=layout.describe() if layout else None)
    while admission.pending or running:
        started = admission.start()
        for j in started:
            deploy = j.deploy_s or 0.0
            end = now + (j.seconds if j.seconds is not None else math.inf)
            nodes = tuple(layout.nodes_of(j.model)) if layout else ()
            schedule.windows.append(Window(j.model, wave, j.resource, j.units, now, now + deploy, end, nodes))
            running.append((end, j))
        wave += bool(started)
        if not running:
            break
        running.sort(key=lambda r: r[0])
        now, done = running.pop(0)
        if math.isinf(now):
            schedule.notes.append("a model's time is unknown: the schedule after it is not estimated")
            break
        admission.release(done)
        while running and running[0][0] <= now:
            admission.release(running.pop(0)[1])
    return schedule
