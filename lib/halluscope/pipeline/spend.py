"""A run's spend as it happens, held to ``costs.budget_usd`` across every attempt.

The estimate is checked before an attempt starts; what the calls really cost is known only as
they are committed (an answer longer than the plan assumed, a resume that finds fewer cache hits).
The driver prices each committed batch's calls as the ledger will (its generations and role calls,
read back from the batch's parts) and adds what the run's deployments have held so far; a run
whose spend crosses the budget stops there (``OverBudget``: status ``over_budget``), its committed
work kept, and resumes under a raised budget. Batches already in flight when it stops are the most
it can go over by.

The budget is the run's, not the attempt's: a retry (KubeRay's ``backoffLimit``, a resubmission
of the same run id) starts from what every earlier attempt spent. Calls are read back from the
committed parts, which outlive their attempt; what an attempt's deployments held is written, as
it grows, to a part of its own in ``held/`` (verified on reading as every part is), so a killed
or stopped attempt's GPU time is still counted by the next one and billed by the ledger."""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from halluscope.cost.ledger import CallTally, calls_usd
from halluscope.cost.nodes import Interval, held_usd
from halluscope.cost.overheads import HEAD, pods_cpus
from halluscope.errors import OverBudget
from halluscope.resolve.cluster import Job, job_of, scheduled
from halluscope.resolve.run import ResolvedRun
from halluscope.storage.run import RunStore

if TYPE_CHECKING:
    from halluscope.pipeline.waves import Deployment

_GENERATION_COLUMNS = ["model", "task", "cached", "error", "input_tokens", "output_tokens"]
_ROLE_CALL_COLUMNS = ["role_model", "task", "stage", "calls", "cached_calls", "failed_calls", "input_tokens",
                      "output_tokens"]
HELD_TABLE = "held"  # one part per attempt: what its deployments held, rewritten as it grows
_HELD_SCHEMA = pa.schema([("model", pa.string()), ("resource", pa.string()), ("units", pa.float64()),
                          ("start", pa.float64()), ("end", pa.float64())])


def record_held(store: RunStore, intervals: Sequence[Interval]) -> None:
    """This attempt's deployments' time (``Interval``s with their model), replacing what it
    recorded before: what a later attempt counts against the budget and the ledger bills."""
    if store.attempt is None or not intervals:
        return
    table = pa.Table.from_pylist([{"model": i.model, "resource": i.resource, "units": i.units, "start": i.start,
                                   "end": i.end} for i in intervals], schema=_HELD_SCHEMA)
    name = store.write_part(HELD_TABLE, store.attempt, table)
    for old in store.parts(HELD_TABLE).get(store.attempt, []):
        if old != name:
            store.part_file(HELD_TABLE, old).remove()


def held_by_attempts(store: RunStore, but_this: bool = False) -> list[Interval]:
    """What the deployments of every attempt (``but_this``: of every other attempt than this
    store's) held; parts that do not verify are skipped with a warning, as every part is."""
    rows = store.read_table(HELD_TABLE, keys={k for k in store.parts(HELD_TABLE) if not but_this or k != store.attempt})
    return [Interval(r["start"], r["end"], r["resource"], r["units"], r["model"]) for r in rows.to_pylist()]


def deployment_rows(intervals: Sequence[Interval]) -> list[dict]:
    """The ledger's deployments (``cost.ledger.ledger``): each model's resource-seconds over every attempt."""
    seconds: dict[tuple[str, str], float] = defaultdict(float)
    for i in intervals:
        if i.model != HEAD:  # the pods' own rows: cost.overheads.ledger_rows
            seconds[(i.model, i.resource)] += (i.end - i.start) * i.units
    return [{"model": m, "resource": r, "resource_seconds": s} for (m, r), s in sorted(seconds.items())]


@dataclass(frozen=True)
class Spent:
    """What a run spent before this attempt: its committed calls and earlier attempts' deployments."""

    calls_usd: float
    held_usd: float

    @property
    def usd(self) -> float:
        return self.calls_usd + self.held_usd


def tally_of(run: ResolvedRun, store: RunStore, keys: set[str]) -> CallTally:
    """The calls of the committed batches ``keys``, tallied as the ledger tallies them."""
    tally = CallTally(run.cfg.models)
    tally.add_generations(store.read_table("generations", _GENERATION_COLUMNS, keys=keys))
    tally.add_role_calls(store.read_table("role_calls", _ROLE_CALL_COLUMNS, keys=keys))
    return tally


def _services(run: ResolvedRun) -> dict[str, str]:
    return {m: s.name for s in run.cfg.costs.shared_services for m in s.models}


def spent_before(run: ResolvedRun, store: RunStore, keys: set[str]) -> tuple[Spent, CallTally]:
    """What the run spent before this attempt (the batches ``keys`` committed and the deployments
    of every earlier attempt), and the tally of those calls for the watch to go on from."""
    tally = tally_of(run, store, keys)
    calls = calls_usd(tally, run.cfg.models, run.prices, _services(run))
    return Spent(calls, held_usd(run.prices, held_by_attempts(store, but_this=True))), tally


class SpendWatch:
    """``committed(key, parts)`` after each batch commits, ``tick()`` while nothing commits: the
    run's spend (this attempt's and every earlier one's), line by line, for ``status`` (``view``)
    and, under ``budget_usd``, held to it: ``OverBudget`` once it crosses. ``held_usd``: what this
    attempt's deployments have held so far, in dollars; ``held``: their intervals, recorded each
    time."""

    def __init__(self, run: ResolvedRun, store: RunStore, budget_usd: float | None, before: Spent, tally: CallTally,
                 held_usd: Callable[[], float | None], held: Callable[[], Sequence[Interval]]) -> None:
        self.run, self.store, self.budget_usd, self.before = run, store, budget_usd, before
        self.tally, self.held_usd, self.held = tally, held_usd, held
        self.services = _services(run)
        self.calls_usd = before.calls_usd

    def committed(self, key: str, parts: dict[str, str]) -> None:
        """``parts``: table -> the name of the batch's part in it (a batch without role calls
        writes no role_calls part)."""
        for table, columns, add in (("generations", _GENERATION_COLUMNS, self.tally.add_generations),
                                    ("role_calls", _ROLE_CALL_COLUMNS, self.tally.add_role_calls)):
            rows = self.store.read_part(table, parts[table], columns) if table in parts else None
            if rows is not None:
                add(rows)
        self.calls_usd = calls_usd(self.tally, self.run.cfg.models, self.run.prices, self.services)
        self.tick()

    def tick(self) -> None:
        """The held time so far recorded and, under a budget, checked: a deployment that loads or
        generates for long holds GPUs before any batch commits (a run planned at $0.0087 spent
        $0.49 of a $0.30 budget, checked only at its first commit)."""
        record_held(self.store, self.held())
        spent, deployments = self.spent_usd(), self.before.held_usd + (self.held_usd() or 0.0)
        if self.budget_usd is not None and spent > self.budget_usd:
            raise OverBudget(f"costs.budget_usd ${self.budget_usd:,.2f} crossed: ${spent:,.2f} spent so far "
                             f"over every attempt (calls ${self.calls_usd:,.2f}, deployments ${deployments:,.2f}); "
                             "the committed work is kept: raise the budget and resume the run")

    def spent_usd(self) -> float:
        return self.calls_usd + self.before.held_usd + (self.held_usd() or 0.0)

    def view(self) -> dict[str, float | None]:
        """The spend so far by line, for progress.json (calls as of the last commit)."""
        return {"earlier_attempts_usd": round(self.before.usd, 4),
                "calls_usd": round(self.calls_usd - self.before.calls_usd, 4), "deployments_usd": self.held_usd(),
                "total_usd": round(self.spent_usd(), 4), "budget_usd": self.budget_usd}


def check_spent(before: Spent, budget_usd: float, planned_usd: float) -> None:
    """Refuse an attempt whose run has already spent its budget, or whose work left would cross
    it: retried as the job's policy retries (KubeRay's ``backoffLimit``), it starts nothing."""
    if before.usd > 0 and before.usd + planned_usd > budget_usd:
        raise OverBudget(f"costs.budget_usd ${budget_usd:,.2f}: earlier attempts of this run spent "
                         f"${before.usd:,.2f} (calls ${before.calls_usd:,.2f}, deployments "
                         f"${before.held_usd:,.2f}) and the work left is estimated at ${planned_usd:,.2f}; "
                         "nothing was started: raise the budget and resume the run")


def held(run: ResolvedRun, schedule: list[Deployment], window: tuple[float | None, float | None],
         now: float | None = None) -> list[Interval]:
    """What the run's deployments held when: the waves' models from request to release (to
    ``now`` for those not released yet), the roles it served and its head and CPU pods
    (``costs.overheads``) for the pipeline's time."""
    cfg = run.cfg
    out = [Interval(d.requested_at, d.released_at or now or d.requested_at, d.resource, d.units, d.model)
           for d in schedule]
    start, end = window
    if start is not None and end is not None:
        out += [Interval(start, end, j.resource, j.units, m.id) for m in cfg.models
                if m.served and not scheduled(m) for j in [job_of(m)]]
        if pods_cpus(cfg.costs.overheads):  # the head and CPU worker pods (costs.overheads)
            out.append(Interval(start, end, "CPU", pods_cpus(cfg.costs.overheads), HEAD))
    return out


def spend_so_far(run: ResolvedRun, schedule: list[Deployment], started: float | None) -> float | None:
    """Dollars of the resources the run's deployments have held until now (the waves' models and
    the roles it serves); calls to priced APIs are counted at the end, from the committed rows."""
    prices = run.prices
    if prices is None or started is None:
        return None
    now = time.time()
    return round(held_usd(prices, held(run, list(schedule), (started, now), now)), 4)


def dollar_gate(run: ResolvedRun, jobs: dict[str, Job],
                 earlier_usd: float = 0.0) -> Callable[[Job, list[Deployment]], str | None] | None:
    """Holds back a model whose estimated time would take the run's served models past
    ``costs.budget_usd`` (what earlier attempts spent, what they held so far, the estimate of
    those still held, and its own); the run then stops before it, and resumes under a raised budget."""
    budget, prices = run.cfg.costs.budget_usd, run.prices
    if budget is None or prices is None:
        return None

    def usd(resource: str, seconds: float) -> float:
        return prices.hours_usd(resource, seconds) or 0.0

    def allowed(job: Job, deployments: list[Deployment]) -> str | None:
        spent = earlier_usd + math.fsum(usd(d.resource, d.units * (d.held_s if d.released_at else
                                                                   max(d.held_s, jobs[d.model].seconds or 0.0)))
                                        for d in deployments)
        need = usd(job.resource, job.units * (job.seconds or 0.0))
        if spent + need <= budget:
            return None
        return (f"costs.budget_usd ${budget:,.2f} would be crossed: model '{job.model}' is estimated at "
                f"${need:,.2f} beside ${spent:,.2f} spent so far; raise the budget and resume the run")

    return allowed
