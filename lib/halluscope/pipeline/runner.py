"""Runs an evaluation: its lifecycle and manifest. A run is resolved from its config once, by its
caller (``resolve.run.ResolvedRun``), opened (checked, planned, claimed), streamed through its
stages (``execute``) and finished (``finish``); a stop on the way is recorded in its manifest."""

from __future__ import annotations

import datetime as dt
import logging
import signal
import time
from collections.abc import Sequence

import ray

from halluscope.contract.metrics import MetricRecord
from halluscope.cost.shared import check_services, record_run_usage
from halluscope.errors import (
    Interrupted,
    OverBudget,
    RunError,
    Stops,
    StorageError,
    Superseded,
    error_summary,
    stop_signals,
)
from halluscope.pipeline.aggregate import count_rows
from halluscope.pipeline.estimate import check_budget
from halluscope.pipeline.estimate import plan as estimate_cost
from halluscope.pipeline.execute import StageInputs, in_process, in_waves, ray_budget
from halluscope.pipeline.finish import Executed, Opened, RunResult, finish
from halluscope.pipeline.plan_view import Plan
from halluscope.pipeline.progress import Progress
from halluscope.pipeline.run_log import RunLog, ray_log_folder
from halluscope.pipeline.spend import SpendWatch, check_spent, held, record_held, spend_so_far, spent_before
from halluscope.pipeline.token_stats import TokenStats
from halluscope.pipeline.watchdog import Watchdog
from halluscope.pipeline.workset import list_work
from halluscope.records import GenerationIds, transient_error
from halluscope.resolve.cluster import budget_source, check_cpus, check_fits, cpu_demand, job_of, scheduled
from halluscope.resolve.knowledge import knowledge_provenance
from halluscope.resolve.run import ResolvedRun
from halluscope.runkit import check_api_keys, code_version, fewer_collections, init_ray, served
from halluscope.storage.run import BATCH_TABLES, RunStore
from halluscope.task_registry import get_task

logger = logging.getLogger(__name__)


def default_run_id(run: ResolvedRun) -> str:
    return f"{dt.datetime.now(dt.UTC):%Y%m%d-%H%M%S}-{run.fingerprint[:8]}"


def run(resolved: ResolvedRun, run_id: str | None = None, progress: bool = True, retry_failed: bool = True,
        agreement: Sequence[MetricRecord] = ()) -> RunResult:
    """Run (or resume) the ``resolved`` config as ``run_id``. A run that stops on an error or Ctrl-C records
    ``failed`` / ``interrupted`` with the reason in its manifest; one that went through but has
    nothing to stand on records ``failed`` and returns the reason in ``RunResult.failure``.
    ``retry_failed``: a resumed run does again the committed batches that hold a row whose error
    was transient (``records.transient_error``: a call out of retries, a generation its
    deployment ended before); without it, such rows stay as they were committed."""
    cfg = resolved.cfg
    check_api_keys(cfg.models)
    check_services(cfg.costs.shared_services, cfg.models)
    cfg.costs.usage_key()  # a key named but not set: refused before anything starts
    fewer_collections()  # the plan and the aggregation build a row object per generation
    run_id = run_id or cfg.run_id or default_run_id(resolved)
    root = resolved.root
    root.check_reachable("storage.root")  # in seconds, one line naming the URL (botocore retries for a minute)
    store = RunStore(root, run_id)
    try:
        with RunLog(store) as log, stop_signals() as stops:  # SIGTERM, SIGHUP: recorded as Ctrl-C is
            return _run(resolved, store, progress, retry_failed, stops, log, agreement)
    except SystemExit as err:
        # ray.init replaces the SIGTERM handler with its own, which exits with the signal's number
        if err.code != signal.SIGTERM:
            raise
        stop = Interrupted(signal.SIGTERM)
        _record_stop(store, stop)
        raise stop from None
    except (Exception, KeyboardInterrupt) as err:
        _record_stop(store, err)
        raise


def _record_stop(store: RunStore, err: BaseException) -> None:
    """Without this, a stopped run's manifest reads `running` forever. Not written when the run
    was never claimed (it stopped before writing anything) or another attempt owns it now; an
    attempt refused for the budget its earlier ones spent is counted (``attempts_refused``)."""
    refused = store.attempt is None and isinstance(err, OverBudget)  # a retry of a run that spent its budget
    if store.attempt is None and not refused:
        return
    interrupted = isinstance(err, KeyboardInterrupt)
    why = str(err) if isinstance(err, Interrupted) else "interrupted (Ctrl-C)"
    status = "interrupted" if interrupted else "over_budget" if isinstance(err, OverBudget) else "failed"
    try:
        store.check_owner()
        manifest = store.read_json("manifest.json") or {"run_id": store.run_id}
        if refused:
            if not manifest.get("config_fingerprint"):
                return  # no attempt of this run ever started
            manifest["attempts_refused"] = int(manifest.get("attempts_refused") or 0) + 1
        manifest.update(status=status,
                        reason=why if interrupted else error_summary(err),
                        finished_at=dt.datetime.now(dt.UTC).isoformat())
        store.write_json("manifest.json", manifest)
    except (Superseded, OSError, StorageError):
        pass  # the error that stopped the run is the one to report (a full disk takes the manifest too)


def _run(run: ResolvedRun, store: RunStore, progress: bool, retry_failed: bool, stops: Stops,
         log: RunLog, agreement: Sequence[MetricRecord]) -> RunResult:
    started = time.time()
    opened = _open(run, store, retry_failed)
    executed = _pipeline(run, store, opened, progress, log)
    stops.rearm()  # Ray's handler, put in by ray.init, exits the process: the rest of the run records a stop too
    stops.check()  # a signal whose exception a finalizer swallowed during the pipeline
    return finish(run, store, opened, executed, started, agreement, before_close=stops.check)


def _open(run: ResolvedRun, store: RunStore, retry_failed: bool = True) -> Opened:
    """Check that the run may start or resume, plan it and claim it: everything that can fail on
    bad input (data files, model names, a budget) fails here, in the driver, before any Ray
    worker or model starts."""
    cfg = run.cfg
    previous = store.read_json("manifest.json")
    if previous and previous.get("config_fingerprint") != run.fingerprint:
        raise RunError(f"run {store.loc.url} was started with a different configuration "
                       f"(fingerprint {previous.get('config_fingerprint')} != {run.fingerprint}); "
                       "use a new run id")
    redo = _to_redo(store) if previous and retry_failed else set()
    estimate = None
    kept = store.committed_keys() - redo
    spent = spent_before(run, store, kept)  # the run's spend is counted over all its attempts
    if cfg.costs.budget_usd is not None or any(scheduled(m) for m in cfg.models):
        # once, before anything is written or started: the budget gate and the waves' schedule
        committed = GenerationIds(store.read_table("scores", ["gen_id"], keys=kept).column("gen_id"))
        estimate = estimate_cost(run, TokenStats.measure([store]) if committed else None, done=committed)
        if cfg.costs.budget_usd is not None:
            # the budget is the run's: what earlier attempts spent counts, and an attempt that
            # would cross it starts nothing (a retry of an over-budget run ends here, in seconds)
            check_spent(spent[0], cfg.costs.budget_usd, estimate.total_usd)
            check_budget(estimate, cfg.costs.budget_usd)
    mark = time.time()
    work = list_work(run, store)
    knowledge = knowledge_provenance(cfg.tasks, run.knowledge)
    check_same_inputs(previous, input_hashes(work.sources, knowledge), store.loc.url)
    timings = {"plan_s": round(time.time() - mark, 2)}
    store.claim()
    snapshot = store.committed_keys() - redo  # read once: an earlier attempt's late commits are not in it
    removed = store.prune(BATCH_TABLES, snapshot)
    done, done_counts = _committed(store, snapshot)
    manifest = {
        "run_id": store.run_id, "status": "running", "code_version": code_version(),
        "created_at": (previous or {}).get("created_at", dt.datetime.now(dt.UTC).isoformat()),
        "config": cfg.model_dump(mode="json"), "config_fingerprint": run.fingerprint,
        **({"config_source": cfg.source} if cfg.source else {}),
        "tasks": [get_task(t).describe() for t in cfg.tasks], "knowledge": knowledge,
        "data_sources": work.sources,
    }
    store.write_json("manifest.json", manifest)
    logger.info("run %s, attempt %s: %d generations, %d committed before; code %s", store.run_id, store.attempt,
                work.total, len(done), manifest["code_version"])
    return Opened(work, done, done_counts, snapshot, removed, manifest, timings, estimate, spent, len(redo))


def _pipeline(run: ResolvedRun, store: RunStore, opened: Opened, progress: bool, log: RunLog) -> Executed:
    """Start what the run needs (Ray, its roles on Serve) and stream the work still to do."""
    cfg, work, timings, done = run.cfg, opened.work, opened.timings, opened.done
    mark = time.time()
    here = in_process(run, work.total - len(done))
    opened.manifest["execution"] = "in the driver's process" if here else "Ray"
    out = Executed()
    if not here:
        out.started_ray, out.budget = _start_ray(run)
        log.ray_logs = ray_log_folder()
        timings["ray_init_s"] = round(time.time() - mark, 2)
    mark = time.time()
    tracker = Progress(store, work.totals, opened.done_counts, show=progress, every_s=cfg.progress_every_s)
    tracker.views.append(log.view)
    services, root = cfg.costs.shared_services, run.root
    if len(done) < work.total:
        out.window = (time.time(), None)
        record_run_usage(root, services, cfg.models, store.run_id, out.window[0], key=cfg.costs.usage_key())
        w = StageInputs(run, store, work, done, {}, tracker, opened.estimate,
                        earlier_usd=opened.spent[0].usd)
        try:
            # the roles are held for the whole run; served models under test in waves (in_waves)
            roles = [m for m in cfg.models if not scheduled(m)]
            with served(roles, scope=store.run_id) as (w.endpoints, _):
                watch = SpendWatch(run, store, cfg.costs.budget_usd, *opened.spent,
                                   lambda: spend_so_far(run, w.deployments, out.window[0]),
                                   lambda: held(run, w.deployments, (out.window[0], time.time()), time.time()))
                w.on_commit, w.on_tick, w.on_released = watch.committed, watch.tick, log.copy_other_nodes
                tracker.views.append(lambda: {"spend": watch.view(), **_planned(opened.estimate)})
                with Watchdog(cfg.cluster.stall_timeout_s, lambda: sum(tracker.done.values())) as watchdog, \
                        tracker.written_meanwhile():
                    out.processed, out.mine, out.schedule = in_waves(w, watchdog, out.budget, here)
                out.stalls = watchdog.stalls
        finally:
            out.window = (out.window[0], time.time())
            record_run_usage(root, services, cfg.models, store.run_id, *out.window, key=cfg.costs.usage_key())
            # what this attempt's deployments held, for a later attempt's budget and for the ledger
            record_held(store, held(run, out.schedule or w.deployments, out.window, out.window[1]))
            log.copy_other_nodes(wait=True)  # the replicas' and engines' logs, before their pods go
    tracker.flush(final=True)
    out.late = store.prune(BATCH_TABLES, opened.snapshot | out.mine)
    timings["pipeline_s"] = round(time.time() - mark, 2)
    logger.info("pipeline (%s): %d generations committed in %.1f s", opened.manifest["execution"], out.processed,
                timings["pipeline_s"])
    return out


def _planned(estimate: Plan | None) -> dict:
    """What the plan the attempt opened with expects of it, for ``status``'s time and money left."""
    if estimate is None:
        return {}
    return {"planned": {"usd": None if estimate.unpriced else round(estimate.total_usd, 4),
                        "wall_s": None if estimate.wall_hours is None else round(estimate.wall_hours * 3600, 1)}}


def _start_ray(run: ResolvedRun) -> tuple[bool, dict[str, float]]:
    """Ray joined or started, the run's CPUs and GPUs checked against it before any deployment;
    whether this run started it, and what its served models under test may hold."""
    cfg = run.cfg
    started = init_ray(cfg.ray, cpus_needed=sum(cpu_demand(cfg).values()))
    # an autoscaling cluster may have fewer CPUs now than it will have: checked where the CPUs are known
    cpus = cfg.cluster.cpus or (ray.cluster_resources().get("CPU", 0.0) if started else None)
    if cpus is not None:
        check_cpus(cfg, cpus)
    waved = [job_of(m) for m in cfg.models if scheduled(m)]
    budget = ray_budget(run, cpus) if waved else {}
    check_fits(waved, budget, budget_source(cfg), run.layout())  # before any deployment, the roles' included
    # per-model progress lines replace Ray Data's per-operator bars (pipeline/progress.py)
    ray.data.DataContext.get_current().enable_progress_bars = False
    return started, budget


def input_hashes(sources: dict[str, str], knowledge: dict) -> dict[str, str]:
    """sha256 of every input a run's results depend on besides its config: data files by name, and
    the knowledge snapshots (PyPI names, title dump, Wikipedia articles)."""
    out = dict(sources)
    for kind, entry in knowledge.items():
        digest = entry.get("sha256") or entry.get("store_sha256")
        if digest:
            out[f"{entry.get('source') or kind} (verifiers' {kind} knowledge)"] = digest
    return out


def check_same_inputs(previous: dict | None, now: dict[str, str], url: str) -> None:
    """A run id is bound to its inputs as to its config: a resume whose data changed would keep
    results of the old files and record the new files' hashes in the manifest."""
    if not previous:
        return
    before = input_hashes(previous.get("data_sources") or {}, previous.get("knowledge") or {})
    for name, digest in sorted(before.items()):
        if name in now and now[name] != digest:
            raise RunError(f"run {url}: {name} changed since the run started (sha256 {digest[:16]}... then, "
                           f"{now[name][:16]}... now), and its committed results came from the old file; "
                           "use a new run id, or restore the file to resume")


def _to_redo(store: RunStore) -> set[str]:
    """The committed batches holding a row whose error may go away on another try."""
    return store.keys_with("scores", ["error"],
                           lambda t: any(transient_error(e) for e in t.column("error").to_pylist()))


def _committed(store: RunStore, keys: set[str]) -> tuple[GenerationIds, dict[tuple[str, str], int]]:
    """The ids and the counts per (model, task) of what the parts ``keys`` committed; the rows
    read for them are not held through the run."""
    rows = store.read_table("scores", ["gen_id", "model", "task"], keys=keys)
    return (GenerationIds(rows.column("gen_id")),
            {(r["model"], r["task"]): r["n"] for r in count_rows(rows, ["model", "task"])})
