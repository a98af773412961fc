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

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa

from halluscope.cost.ledger import CallTally, calls_usd
from halluscope.cost.nodes import Interval, held_usd
from halluscope.cost.overheads import HEAD
from halluscope.errors import OverBudget
from halluscope.pipeline.resolved import ResolvedRun
from halluscope.storage.run import RunStore

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
