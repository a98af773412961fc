"""The plan's shared services (``costs.shared_services``): the run's calls to each engine a
service runs for its role models (``service_engines``) at that engine's prefill and decode rates,
and the service's rows of the plan: the time its engines are busy with the run and the rest of
the run's wall time it holds them idle."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

from halluscope.cost.ledger import CallTally
from halluscope.cost.shared import service_gpus, service_rate, services_of
from halluscope.pipeline.plan_view import PlanRow
from halluscope.resolve.run import ResolvedRun
from halluscope.resolve.service_engines import Engine, service_engines
from halluscope.serving.served import busy_seconds
from halluscope.serving.throughput import PlanOptions


def service_rows(run: ResolvedRun, wall_s: float | None, service: ServiceLoad) -> list[PlanRow]:
    """Two rows per shared service the run calls, at its full rate for the run's wall time (the
    run's share, split with the runs that overlap it, ``cost.shared``, is at most that): the time
    its engines are busy with the run's calls ("shared"; the busiest engine's, where
    ``cluster.service`` describes them, else the whole window), and the rest of the window it
    holds them idle ("idle")."""
    out, prices = [], run.prices
    for s in services_of(run.cfg.costs.shared_services, run.cfg.models):
        rate, why = service_rate(s, prices)
        busy = PlanRow(s.name, "service", "*", "shared", 0, 0, 0, 0, 0, s.resource, None, None, "estimated", why)
        idle = PlanRow(s.name, "service", "*", "idle", 0, 0, 0, 0, 0, s.resource, None, None, "estimated", why)
        if wall_s is None:
            busy.note = "the run's wall time is unknown: a model's busy time could not be estimated"
        else:
            busy_s = min(wall_s, service.busy_s(s.name) if s.name in service.services() else wall_s)
            busy.note = why or (f"its engines busy {busy_s / 3600:,.3g} h with the run's calls, from their load"
                                if s.name in service.services() else
                                "busy for the run's wall time: cluster.service does not describe its engines")
            idle.note = why or "the rest of the run's wall time, held idle"
            if rate is not None:
                busy.usd, idle.usd = rate * busy_s / 3600, rate * (wall_s - busy_s) / 3600
            gpus = service_gpus(s, prices)
            if gpus is not None:
                busy.resource_hours, idle.resource_hours = gpus * busy_s / 3600, gpus * (wall_s - busy_s) / 3600
        out += [busy, idle]
    return out


@dataclass
class ServiceLoad:
    """The run's calls on each shared service's engines: seconds of each engine's time (``None``
    once one cannot be sized), and of it each model under test's (``by_subject``), whose calls a
    served model's release puts in the engine's queue. Its replicas share the load: the service's
    minimum, which it holds."""

    engines: dict[str, Engine]
    seconds: dict[str, float | None] = field(default_factory=dict)  # engine -> wall seconds
    by_subject: dict[str, dict[str, float]] = field(default_factory=dict)  # engine -> model under test -> seconds

    def add(self, engine: Engine, calls: int, tin: int, tout: int, o: PlanOptions,
            subjects: Mapping[str, Sequence[float]] | None = None) -> tuple[float | None, str | None]:
        """GPU-seconds of the calls on ``engine`` (or why unknown); adds their wall seconds, and each
        model under test's part of them (``subjects``: its input and output tokens)."""
        gpu_s, why = busy_seconds(engine.spec, calls, tin, tout, o)
        name, at_once = engine.hold.name, engine.hold.gpus * engine.hold.replicas
        if gpu_s is None:
            self.seconds[name] = None
        elif self.seconds.get(name, 0.0) is not None:
            self.seconds[name] = cast(float, self.seconds.get(name, 0.0)) + gpu_s / at_once
        per = self.by_subject.setdefault(name, defaultdict(float))
        for subject, (s_in, s_out) in (subjects or {}).items():
            part, _ = busy_seconds(engine.spec, 0, round(s_in), round(s_out), o)
            per[subject] += (part or 0.0) / at_once
        return gpu_s, why

    def services(self) -> set[str]:
        return {self.engines[e].service for e in self.seconds}

    def busy_s(self, service: str) -> float:
        """How long the service's busiest engine works for the run (its engines work side by side)."""
        return max((s or 0.0 for e, s in self.seconds.items() if self.engines[e].service == service), default=0.0)

    def end_s(self, released: Mapping[str, float]) -> float | None:
        """When the last engine ends the run's calls (None when one could not be sized): a served
        model under test's calls join its engine's queue when it is given back (``released``:
        seconds into the run), the others' from the start; an engine works them in that order."""
        if any(s is None for s in self.seconds.values()):
            return None
        ends = [0.0]
        for engine, total in self.seconds.items():
            per = self.by_subject.get(engine) or {}
            free = 0.0
            for subject, seconds in sorted(per.items(), key=lambda kv: released.get(kv[0], 0.0)):
                free = max(free, released.get(subject, 0.0)) + seconds
            ends.append(max(free, cast(float, total)))
        return max(ends)

    def streamed_s(self, released: Mapping[str, float]) -> float:
        """The busiest engine's seconds for models under test that are not given back (API
        models): their calls stream in as they generate, the last batch's after the last answer."""
        return max((sum(s for m, s in per.items() if m not in released) for per in self.by_subject.values()),
                   default=0.0)


def busy_by_service(run: ResolvedRun, tally: CallTally) -> dict[str, float]:
    """How long each shared service's busiest engine worked for the calls ``tally`` counted: their
    tokens at the engine's rates, as the plan sizes them (``run.plan_options``; a service reports no
    time per run). A service whose engines ``cluster.service`` does not describe, or cannot be
    sized, is left out."""
    load, o, specs = ServiceLoad(service_engines(run.cfg)), run.plan_options, run.specs
    shared = {m for s in run.cfg.costs.shared_services for m in s.models}
    for (model, _, _), a in tally.acc.items():
        engine = load.engines.get(specs[model].api_model) if model in shared else None
        if engine is not None and a["calls"]:
            load.add(engine, a["calls"], a["input_tokens"], a["output_tokens"], o)
    return {s: load.busy_s(s) for s in load.services()
            if all(t is not None for e, t in load.seconds.items() if load.engines[e].service == s)}
