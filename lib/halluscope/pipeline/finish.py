"""The end of a run: its metric records, costs and manifest, built once from what it committed,
and the views of them (metrics.json, leaderboard.md, report.html)."""

from __future__ import annotations

import datetime as dt
import gc
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import ray

from halluscope.contract.metrics import MetricRecord
from halluscope.cost.ledger import CallTally, cost_record, ledger
from halluscope.cost.nodes import stranded_rows
from halluscope.cost.overheads import ledger_rows as overhead_rows
from halluscope.cost.shared import service_rows
from halluscope.pipeline.aggregate import aggregate
from halluscope.pipeline.plan_view import Plan
from halluscope.pipeline.service_load import busy_by_service
from halluscope.pipeline.spend import Spent, deployment_rows, held_by_attempts
from halluscope.pipeline.workset import Work
from halluscope.records import GenerationIds
from halluscope.report.agreement import agreement_summary
from halluscope.report.html import RunData, write_report
from halluscope.report.leaderboard import leaderboard
from halluscope.report.sections import report_sections
from halluscope.resolve.run import ResolvedRun
from halluscope.storage.run import RunStore, json_bytes

if TYPE_CHECKING:
    from halluscope.pipeline.waves import Deployment

logger = logging.getLogger(__name__)


@dataclass
class RunResult:
    run_id: str
    uri: str
    metrics: list[dict]  # the records as metrics.json holds them (MetricRecord.as_json)
    leaderboard: str
    processed: int
    skipped: int
    seconds: float
    # from the pipeline's end to the run's return: aggregation, ledger, views, manifest and report
    # (what a run of many models pays once its generations are scored)
    finish_s: float
    missing: dict[str, int] = field(default_factory=dict)  # "model/task" -> items with no recorded response
    failure: str | None = None  # set when the run went through but failed (manifest status failed)


@dataclass
class Opened:
    """A run claimed and planned: its plan, what an earlier attempt committed, its manifest so far."""

    work: Work
    done: GenerationIds
    done_counts: dict[tuple[str, str], int]  # (model, task) -> generations committed before
    snapshot: set[str]  # the keys of the batches committed before
    removed: int  # uncommitted parts an earlier attempt left, removed
    manifest: dict
    timings: dict[str, float]
    estimate: Plan | None  # for a budget or served models under test: the gate's and the waves' one estimate
    spent: tuple[Spent, CallTally]  # what earlier attempts spent, and their calls' tally the run goes on from
    redone: int = 0  # committed batches taken back for a row that failed transiently


@dataclass
class Executed:
    """What the pipeline did: generations and keys committed, the waves' deployments (what every
    attempt's deployments held is in the run's ``held/`` table: ``pipeline.spend``)."""

    processed: int = 0
    mine: set[str] = field(default_factory=set)
    schedule: list[Deployment] = field(default_factory=list)
    window: tuple[float | None, float | None] = (None, None)  # the pipeline's time: shared services' charge
    stalls: list[str] = field(default_factory=list)
    budget: dict[str, float] = field(default_factory=dict)
    started_ray: bool = False
    late: int = 0  # parts committed after the run's own, removed


def finish(run: ResolvedRun, store: RunStore, opened: Opened, done: Executed, started: float,
           agreement: Sequence[MetricRecord] = (), before_close: Callable[[], None] = lambda: None) -> RunResult:
    """The run's records and views, then its manifest closed; ``before_close`` runs just before
    that (a stop asked for meanwhile raises there, and the run records itself interrupted)."""
    cfg, mark = run.cfg, time.time()
    # nothing after the pipeline uses Ray: a local Ray this run started stops (its processes take
    # over a second to) while the results are read back and aggregated. The pipeline's garbage
    # is collected first: an object reference the collector found later, in any thread, would
    # reach a stopped Ray, which ends the process (seen once a 1M-generation run's aggregation
    # outlasted the stop)
    stopping = threading.Thread(target=ray.shutdown, name="ray-shutdown") if done.started_ray else None
    if stopping is not None:
        gc.collect()
        stopping.start()
    totals = aggregate(store, cfg.tasks, cfg.models, run.options_for)
    metrics = [*agreement, *totals.metrics]
    root = run.root
    intervals = held_by_attempts(store)  # every attempt's deployments: each one's GPUs were billed
    last = max((d.wave for d in done.schedule), default=None)
    costs = ledger(totals.calls, cfg.models, deployment_rows(intervals), run.prices, extra_rows=[
        *service_rows(cfg.models, cfg.costs.shared_services, root, store.run_id, *done.window, run.prices,
                      busy_s=busy_by_service(run, totals.calls), key=cfg.costs.usage_key()),
        *stranded_rows(intervals, run.prices),
        *overhead_rows(cfg.costs.overheads, intervals, [(d.resource, d.units) for d in done.schedule
                                                         if d.wave == last], run.prices)])
    views = {"costs.parquet": store.write_costs(costs)}
    metrics.append(cost_record(costs))
    built = report_sections(metrics)  # once, for leaderboard.md and report.html
    board = leaderboard(metrics, store.run_id, built)
    stored = [m.as_json() for m in metrics]
    views["metrics.json"] = store.write_view("metrics.json", json_bytes(stored))
    views["leaderboard.md"] = store.write_view("leaderboard.md", board.encode())
    opened.manifest["views"] = views  # their sha256: a reader finds a view changed since
    opened.timings["aggregate_s"] = round(time.time() - mark, 2)
    if stopping is not None:
        stopping.join()
    failure, missing = totals.counts.failure(cfg.max_error_fraction), dict(sorted(totals.counts.missing.items()))
    unserved = [f"model '{d.model}' {d.status}: {d.reason}" for d in done.schedule
                if d.reason and d.status != "requeued"]
    if unserved:
        failure = "; ".join([*unserved, *([failure] if failure else [])])
    if agreement:
        opened.manifest["judge_agreement"] = [agreement_summary(r) for r in agreement]
    before_close()
    _close_manifest(store, opened, done, failure, missing)
    logger.info("run %s %s%s", store.run_id, "failed: " if failure else "complete", failure or "")
    write_report(store, RunData(store.run_id, opened.manifest, metrics, costs=costs), built)
    return RunResult(store.run_id, store.loc.url, stored, board, done.processed, len(opened.done),
                     time.time() - started, time.time() - mark, missing, failure)


def _close_manifest(store: RunStore, opened: Opened, done: Executed, failure: str | None,
                    missing: dict[str, int]) -> None:
    manifest = opened.manifest
    if done.stalls:
        manifest["stalls"] = done.stalls
    if done.schedule:
        manifest["schedule"] = {"budget": {k: v for k, v in done.budget.items() if math.isfinite(v)},
                                "deployments": [d.as_dict() for d in done.schedule]}
    manifest.update(timings=opened.timings, status="failed" if failure else "complete", reason=failure,
                    finished_at=dt.datetime.now(dt.UTC).isoformat(),
                    counts={"generations": opened.work.total, "done_before": len(opened.done),
                            "processed": done.processed,
                            "quarantined_rows": store.read_table("quarantine", ["row"]).num_rows,
                            "missing": missing, "uncommitted_parts_removed": opened.removed,
                            "late_parts_removed": done.late, "batches_redone": opened.redone})
    store.write_json("manifest.json", manifest)
