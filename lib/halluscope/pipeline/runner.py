"""Runs an evaluation: plan the work, stream it through Ray Data, aggregate what was written."""

from __future__ import annotations

import datetime as dt
import gc
import math
import os
import queue
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import ray

from halluscope.config.schema import DEFAULT_PRICE_TABLE, ModelSpec, RunConfig
from halluscope.cost.ledger import cost_record, ledger
from halluscope.cost.nodes import stranded_rows
from halluscope.cost.prices import PriceTable, load_prices
from halluscope.cost.shared import check_services, record_run_usage, service_rows
from halluscope.errors import Interrupted, RunError, Superseded, error_summary, stop_signals
from halluscope.knowledge.base import Knowledge
from halluscope.pipeline import stages
from halluscope.pipeline.aggregate import aggregate, count_rows
from halluscope.pipeline.estimate import check_budget
from halluscope.pipeline.estimate import plan as estimate_cost
from halluscope.pipeline.generation import generate_model, staged_location
from halluscope.pipeline.progress import Progress
from halluscope.pipeline.schedule import Job, check_cpus, check_fits, cpu_demand, job_of, scheduled
from halluscope.pipeline.schedule import budget as schedule_budget
from halluscope.pipeline.token_stats import TokenStats
from halluscope.pipeline.watchdog import Watchdog

if TYPE_CHECKING:
    from halluscope.pipeline.waves import Deployment
from halluscope.pipeline.workset import Plan, expand_unit, expansion, plan, resolver_for
from halluscope.records import GenerationIds
from halluscope.report.html import write_report
from halluscope.report.leaderboard import leaderboard
from halluscope.runkit import check_api_keys, code_version, fewer_collections, init_ray, served
from halluscope.storage.fs import Location
from halluscope.storage.names import CALL_CACHE, INDEX_CACHE, shared_url
from halluscope.storage.run import BATCH_TABLES, RunStore
from halluscope.task_registry import benchmark_of, benchmarks, get_task


@dataclass
class RunResult:
    run_id: str
    uri: str
    metrics: list[dict]  # the records as metrics.json holds them (MetricRecord.as_json)
    leaderboard: str
    processed: int
    skipped: int
    seconds: float
    missing: dict[str, int] = field(default_factory=dict)  # "model/task" -> items with no recorded response
    failure: str | None = None  # set when the run went through but failed (manifest status failed)


def default_run_id(cfg: RunConfig) -> str:
    return f"{dt.datetime.now(dt.timezone.utc):%Y%m%d-%H%M%S}-{cfg.fingerprint()[:8]}"


def run(cfg: RunConfig, run_id: str | None = None, progress: bool = True) -> RunResult:
    """Run (or resume) ``cfg`` as ``run_id``. A run that stops on an error or Ctrl-C records
    ``failed`` / ``interrupted`` with the reason in its manifest; one that went through but has
    nothing to stand on records ``failed`` and returns the reason in ``RunResult.failure``."""
    check_api_keys(cfg.models)
    check_services(cfg.costs.shared_services, cfg.models)
    fewer_collections()  # the plan and the aggregation build a row object per generation
    run_id = run_id or cfg.run_id or default_run_id(cfg)
    root = Location.from_url(cfg.storage.root, cfg.storage)
    root.check_reachable("storage.root")  # in seconds, one line naming the URL (botocore retries for a minute)
    store = RunStore(root, run_id)
    try:
        with stop_signals():  # SIGTERM, SIGHUP: recorded as Ctrl-C is
            return _run(cfg, store, progress)
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
    was never claimed (it stopped before writing anything) or another attempt owns it now."""
    if store.attempt is None:
        return
    interrupted = isinstance(err, KeyboardInterrupt)
    why = str(err) if isinstance(err, Interrupted) else "interrupted (Ctrl-C)"
    try:
        store.check_owner()
        manifest = store.read_json("manifest.json") or {"run_id": store.run_id}
        manifest.update(status="interrupted" if interrupted else "failed",
                        reason=why if interrupted else error_summary(err),
                        finished_at=dt.datetime.now(dt.timezone.utc).isoformat())
        store.write_json("manifest.json", manifest)
    except (Superseded, OSError):
        pass  # the error that stopped the run is the one to report


def _run(cfg: RunConfig, store: RunStore, progress: bool) -> RunResult:
    started = time.time()
    run_id = store.run_id
    previous = store.read_json("manifest.json")
    fingerprint, prices = cfg.fingerprint(), price_table(cfg)  # read once; the config does not change in a run
    if previous and previous.get("config_fingerprint") != fingerprint:
        raise RunError(f"run {store.loc.url} was started with a different configuration "
                       f"(fingerprint {previous.get('config_fingerprint')} != {fingerprint}); "
                       "use a new run id")
    if cfg.costs.budget_usd is not None:  # before anything is written or started
        committed = GenerationIds(store.read_table("scores", ["gen_id"]).column("gen_id"))
        estimate = estimate_cost(cfg, prices, TokenStats.measure([store]) if committed else None,
                                 cache=cache_location(cfg), done=committed)
        check_budget(estimate, cfg.costs.budget_usd)
    timings: dict[str, float] = {}
    # everything that can fail on bad input (data files, model names) fails here, in the
    # driver, before any Ray worker or model starts
    mark = time.time()
    work = plan(cfg, store)
    knowledge = knowledge_provenance(cfg, knowledge_for(cfg))
    check_same_inputs(previous, input_hashes(work.sources, knowledge), store.loc.url)
    timings["plan_s"] = round(time.time() - mark, 2)
    store.claim()
    snapshot = store.committed_keys()  # read once: an earlier attempt's late commits are not in it
    removed = store.prune(BATCH_TABLES, snapshot)
    done, done_counts = _committed(store, snapshot)
    manifest = {
        "run_id": run_id, "status": "running", "code_version": code_version(),
        "created_at": (previous or {}).get("created_at", dt.datetime.now(dt.timezone.utc).isoformat()),
        "config": cfg.model_dump(mode="json"), "config_fingerprint": fingerprint,
        "tasks": [get_task(t).describe() for t in cfg.tasks], "knowledge": knowledge,
        "data_sources": work.sources,
    }
    store.write_json("manifest.json", manifest)

    mark = time.time()
    here = in_process(cfg, work.total - len(done))
    manifest["execution"] = "in the driver's process" if here else "Ray"
    started_ray, budget = False, {}
    if not here:
        started_ray = init_ray(cfg.ray, cpus_needed=sum(cpu_demand(cfg).values()))
        # an autoscaling cluster may have fewer CPUs now than it will have: checked where the CPUs are known
        cpus = cfg.cluster.cpus or (ray.cluster_resources().get("CPU", 0.0) if started_ray else None)
        if cpus is not None:
            check_cpus(cfg, cpus)
        waved = [job_of(m) for m in cfg.models if scheduled(m)]
        budget = _budget(cfg, cpus) if waved else {}
        check_fits(waved, budget, _budget_source(cfg))  # before any deployment, the roles' included
        # per-model progress lines replace Ray Data's per-operator bars (pipeline/progress.py)
        ray.data.DataContext.get_current().enable_progress_bars = False
        timings["ray_init_s"] = round(time.time() - mark, 2)
    mark = time.time()
    processed, mine = 0, set[str]()
    deployments: list[dict] = []
    tracker = Progress(store, work.totals, done_counts, show=progress, every_s=cfg.progress_every_s)
    schedule: list[Deployment] = []
    watchdog_stalls: list[str] = []
    services, root = cfg.costs.shared_services, Location.from_url(cfg.storage.root, cfg.storage)
    window: tuple[float | None, float | None] = (None, None)  # the pipeline's time: shared services' charge
    if len(done) < work.total:
        window = (time.time(), None)
        record_run_usage(root, services, cfg.models, run_id, window[0])
        try:
            # the roles are held for the whole run; served models under test in waves (_in_waves)
            with served([m for m in cfg.models if not scheduled(m)], cfg.serve_http_port) as (endpoints,
                                                                                             deployments):
                with Watchdog(cfg.cluster.stall_timeout_s, lambda: sum(tracker.done.values())) as watchdog:
                    processed, mine, schedule = _in_waves(cfg, store, work, done, endpoints, tracker,
                                                          watchdog, budget, prices, here)
                watchdog_stalls = watchdog.stalls
        finally:
            window = (window[0], time.time())
            record_run_usage(root, services, cfg.models, run_id, *window)
        deployments += [{"model": d.model, "resource": d.resource, "resource_seconds": d.units * d.held_s}
                        for d in schedule]
    tracker.flush(final=True)
    late = store.prune(BATCH_TABLES, snapshot | mine)
    timings["pipeline_s"] = round(time.time() - mark, 2)

    mark = time.time()
    # nothing after the pipeline uses Ray: a local Ray this run started stops (its processes take
    # over a second to) while the results are read back and aggregated. The pipeline's garbage
    # is collected first: an object reference the collector found later, in any thread, would
    # reach a stopped Ray, which ends the process (seen once a 1M-generation run's aggregation
    # outlasted the stop)
    stopping = threading.Thread(target=ray.shutdown, name="ray-shutdown") if started_ray else None
    if stopping is not None:
        gc.collect()
        stopping.start()
    totals = aggregate(cfg, store)
    metrics = totals.metrics
    costs = ledger(totals.calls, cfg.models, deployments, prices,
                   extra_rows=[*service_rows(cfg.models, services, root, run_id, *window, prices),
                               *stranded_rows(_held(cfg, schedule, window), prices)])
    store.write_costs(costs)
    metrics.append(cost_record(costs))
    board = leaderboard(metrics, run_id)
    stored = [m.as_json() for m in metrics]
    store.write_json("metrics.json", stored)
    store.write_text("leaderboard.md", board)
    timings["aggregate_s"] = round(time.time() - mark, 2)
    if stopping is not None:
        stopping.join()
    failure, missing = totals.counts.failure(cfg.max_error_fraction), dict(sorted(totals.counts.missing.items()))
    unserved = [f"model '{d.model}' {d.status}: {d.reason}" for d in schedule if d.reason]
    if unserved:
        failure = "; ".join([*unserved, *([failure] if failure else [])])
    if watchdog_stalls:
        manifest["stalls"] = watchdog_stalls
    if schedule:
        manifest["schedule"] = {"budget": {k: v for k, v in budget.items() if math.isfinite(v)},
                                "deployments": [d.as_dict() for d in schedule]}
    manifest.update(timings=timings, status="failed" if failure else "complete", reason=failure,
                    finished_at=dt.datetime.now(dt.timezone.utc).isoformat(),
                    counts={"generations": work.total, "done_before": len(done), "processed": processed,
                            "quarantined_rows": store.read_table("quarantine", ["row"]).num_rows,
                            "missing": missing, "uncommitted_parts_removed": removed,
                            "late_parts_removed": late})
    store.write_json("manifest.json", manifest)
    write_report(store)
    return RunResult(run_id, store.loc.url, stored, board, processed, len(done), time.time() - started,
                     missing, failure)


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


def _committed(store: RunStore, keys: set[str]) -> tuple[GenerationIds, dict[tuple[str, str], int]]:
    """The ids and the counts per (model, task) of what the parts ``keys`` committed; the rows
    read for them are not held through the run."""
    rows = store.read_table("scores", ["gen_id", "model", "task"], keys=keys)
    return (GenerationIds(rows.column("gen_id")),
            {(r["model"], r["task"]): r["n"] for r in count_rows(rows, ["model", "task"])})


def price_table(cfg: RunConfig) -> PriceTable | None:
    table = cfg.costs.price_table
    if table is None or (table == DEFAULT_PRICE_TABLE and not Path(table).exists()):
        return None
    return load_prices(table)


def knowledge_for(cfg: RunConfig) -> Knowledge:
    """The verifiers' knowledge, unloaded: each actor loads what its tasks use, as their
    benchmarks' options name it. Passage indexes persist under <storage.root>/_cache/indexes,
    package and title indexes under data.cache_dir."""
    named = dict.fromkeys([*cfg.benchmarks, *(benchmark_of(t).name for t in cfg.tasks)])
    return Knowledge(resolver_for(cfg), Location.from_url(shared_url(cfg.storage.root, INDEX_CACHE), cfg.storage),
                     clients=cfg.concurrency.verify_actors, options={b: cfg.options_for(b) for b in named})


def knowledge_provenance(cfg: RunConfig, kb: Knowledge) -> dict:
    """Provenance of the knowledge the run's tasks use, for the manifest, as each benchmark
    describes the sources its tasks name (``Benchmark.describe_knowledge``). Loading them here, in
    the driver, fails a bad source before any model starts and builds shared indexes once. An
    entry two benchmarks describe differently is kept for each (the second as ``<key> (<name>)``)."""
    needed: dict[str, set[str]] = defaultdict(set)
    for t in cfg.tasks:
        needed[benchmark_of(t).name].update(get_task(t).knowledge)
    out: dict = {}
    for name, kinds in needed.items():
        describe = benchmarks()[name].describe_knowledge
        if not kinds or describe is None:
            continue
        for key, entry in describe(kb.options_for(name), kb, kinds).items():
            out[key if out.get(key, entry) == entry else f"{key} ({name})"] = entry
    return out


def cache_location(cfg: RunConfig) -> Location | None:
    if not cfg.cache.enabled:
        return None
    return Location.from_url(cfg.cache.root or shared_url(cfg.storage.root, CALL_CACHE), cfg.storage)


def evaluate_actors(configured: int, blocks: int, live_rows: int | None, generate_batch_size: int) -> int:
    """No more actors than Evaluate will get inputs: an actor beyond them would start, and hold
    its CPU, for nothing. Without live models (``live_rows`` None) the inputs are the plan's
    blocks; with them, generation batches, one when every row fits in one."""
    if live_rows is None:
        return min(configured, blocks)
    return 1 if live_rows <= generate_batch_size else configured


def in_process(cfg: RunConfig, todo: int) -> bool:
    """Whether the run's stages run in the driver's process rather than on Ray: a run with fewer
    than ``ray.in_process_below`` generations to do, no Ray to join (neither ``ray.address`` nor
    RAY_ADDRESS set, none started in this process) and no model the run serves on Ray Serve.
    Ray's own start (9 s on 2 cores) and its workers' would be most of such a run's time."""
    return (todo < cfg.ray.in_process_below and not (cfg.ray.address or os.environ.get("RAY_ADDRESS"))
            and not ray.is_initialized() and not any(m.served for m in cfg.models))


def driver_batches(cfg: RunConfig, store: RunStore, work: Plan, blocks: list[pa.Table], done: GenerationIds,
                   models: list[ModelSpec]) -> Iterator[pa.Table]:
    """The stages of ``_execute`` as plain calls in this process, one block after another: a small
    run's execution (``in_process``), and the single-process baseline of ``make bench``. Yields
    what Evaluate committed."""
    live = any(m.backend != "replay" for m in models if m.role == "test")
    generate = stages.Generate(models, {}, cache_location(cfg)) if live else None
    evaluate = stages.Evaluate(knowledge_for(cfg), cfg.models, {}, cache_location(cfg), store,
                               cfg.concurrency.batch_size)
    ctx = expansion(cfg, store, work)
    for block in blocks:
        for batch in expand_unit(block, ctx, done):
            yield from evaluate(generate(batch) if generate else batch)


def _tracked(committed: Iterable[pa.Table], tracker: Progress) -> tuple[int, set[str]]:
    """The generations and keys of the parts committed (Evaluate's output), tracked as they come."""
    processed, keys = 0, set()
    for batch in committed:
        for r in batch.to_pylist():
            tracker.add(r["model"], r["task"], r["rows"])
            processed += r["rows"]
            keys.add(r["key"])
    return processed, keys


def _in_waves(cfg: RunConfig, store: RunStore, work: Plan, done: GenerationIds, endpoints: dict, tracker: Progress,
              watchdog: Watchdog, budget: dict[str, float], prices: PriceTable | None,
              in_driver: bool = False) -> tuple[int, set[str], list[Deployment]]:
    """Evaluate what needs no deployment of its own at once; the served models under test
    generate in waves on a thread of their own (``waves.Waves``), and each is evaluated from its
    staged generations once its deployment is given back, while the next ones generate.
    ``in_driver``: a run with no served model evaluated in this process (``in_process``)."""
    specs = {m.id: m for m in cfg.models}
    served_under_test = {m.id for m in cfg.models if scheduled(m)}
    blocks: dict[str, list[pa.Table]] = defaultdict(list)
    for b in work.blocks:
        blocks[b.column("model")[0].as_py()].append(b)
    others = [b for m, bs in blocks.items() if m not in served_under_test for b in bs]
    wanted = [m for m in served_under_test if blocks.get(m)]
    if not wanted:
        return (*_execute(cfg, store, work, others, done, endpoints, tracker, cfg.models, in_driver=in_driver), [])
    estimate = estimate_cost(cfg, prices, cache=cache_location(cfg), done=done)
    jobs = [j for j in estimate.jobs if j.model in wanted]
    from halluscope.pipeline.waves import Waves  # Ray Serve: imported by runs that serve models under test
    from halluscope.serving.app import remove, start_serve

    start_serve(cfg.serve_http_port)  # before the pipeline's actors load the machine
    remove(wanted)  # what a killed driver of this run left deployed holds the GPUs the budget counts
    ready: queue.Queue[tuple[str, bool]] = queue.Queue()
    ctx, done_ref = ray.put(expansion(cfg, store, work)), ray.put(done)

    def generate(spec: ModelSpec, endpoint: Any) -> Any:
        return generate_model.remote(spec, endpoint, blocks[spec.id], ctx, done_ref, cache_location(cfg),
                                     staged_location(store.loc, spec.id), cfg.concurrency.generate_batch_size)

    waves = Waves(jobs, budget, specs, generate, lambda m, ok: ready.put((m, ok)), http_port=cfg.serve_http_port,
                  allowed=_dollar_gate(cfg, prices, {j.model: j for j in estimate.jobs}))
    watchdog.waiting = waves.waiting
    watchdog.signals.append(lambda: waves.last_event)
    failed: list[BaseException] = []
    result: list[list[Deployment]] = []

    def follow() -> None:
        try:
            result.append(waves.run())
        except BaseException as err:  # noqa: BLE001 - raised again in the driver's thread
            failed.append(err)
            ready.put(("", False))

    thread = threading.Thread(target=follow, name="waves", daemon=True)
    thread.start()
    try:
        processed, keys = _execute(cfg, store, work, others, done, endpoints, tracker,
                                   [m for m in cfg.models if m.id not in served_under_test]) if others else (0, set())
        remaining = set(wanted)
        while remaining:
            finished = [ready.get()]
            while not ready.empty():
                finished.append(ready.get_nowait())
            if failed:
                raise failed[0]
            remaining -= {m for m, _ in finished}
            generated = [m for m, ok in finished if ok]
            if generated:
                n, k = _execute(cfg, store, work, [b for m in generated for b in blocks[m]], done, endpoints, tracker,
                                [specs[m] for m in generated],
                                staged={m: staged_location(store.loc, m) for m in generated})
                processed, keys = processed + n, keys | k
    finally:
        waves.stop.set()
        thread.join()
    if failed:
        raise failed[0]
    return processed, keys, result[0] if result else waves.deployments


def _held(cfg: RunConfig, schedule: list[Deployment],
          window: tuple[float | None, float | None]) -> list[tuple[float, float, str, float]]:
    """What the run's deployments held when: the waves' models from request to release, the roles
    it served for the pipeline's time."""
    out = [(d.requested_at, d.released_at or d.requested_at, d.resource, d.units) for d in schedule]
    start, end = window
    if start is not None and end is not None:
        out += [(start, end, j.resource, j.units) for m in cfg.models
                if m.served and not scheduled(m) for j in [job_of(m)]]
    return out


def _budget(cfg: RunConfig, cpus: float | None) -> dict[str, float]:
    return schedule_budget(cfg, ray.cluster_resources().get("GPU", 0.0), cpus) or {}


def _budget_source(cfg: RunConfig) -> str:
    return "cluster.gpus" if cfg.cluster.gpus is not None else "the Ray cluster's GPUs; set cluster.gpus"


def _dollar_gate(cfg: RunConfig, prices: PriceTable | None,
                 jobs: dict[str, Job]) -> Callable[[Job, list[Deployment]], str | None] | None:
    """Holds back a model whose estimated time would take the run's served models past
    ``costs.budget_usd`` (what they held so far, the estimate of those still held, and its own);
    the run then stops before it, and resumes under a raised budget."""
    budget = cfg.costs.budget_usd
    if budget is None or prices is None:
        return None

    def usd(resource: str, seconds: float) -> float:
        return prices.hours_usd(resource, seconds) or 0.0

    def allowed(job: Job, deployments: list[Deployment]) -> str | None:
        spent = math.fsum(usd(d.resource, d.units * (d.held_s if d.released_at else
                                                     max(d.held_s, jobs[d.model].seconds or 0.0)))
                          for d in deployments)
        need = usd(job.resource, job.units * (job.seconds or 0.0))
        if spent + need <= budget:
            return None
        return (f"costs.budget_usd ${budget:,.2f} would be crossed: model '{job.model}' is estimated at "
                f"${need:,.2f} beside ${spent:,.2f} of served models so far; raise the budget and resume the run")

    return allowed


def _execute(cfg: RunConfig, store: RunStore, work: Plan, blocks: list[pa.Table], done: GenerationIds,
             endpoints: dict, tracker: Progress, models: list[ModelSpec], staged: dict[str, Location] | None = None,
             in_driver: bool = False) -> tuple[int, set[str]]:
    """Stream the work through the stages; returns the number of generations committed and the
    keys of the batches that committed them.

    Execution shape: one input block per (model, task) unit, or per model and the recorded file
    its units replay (a benchmark's rule sets of one domain); expansion fuses into the
    evaluation actors (abstain -> decompose -> verify -> score -> write per batch), so a unit's
    rows never leave the worker that expanded them. Live models under test add a generation actor pool
    in between, sized apart from evaluation (``staged``: models that generated earlier in the run
    answer from there). ``in_driver``: the same stages in this process instead (``in_process``)."""
    if in_driver:
        return _tracked(driver_batches(cfg, store, work, blocks, done, models), tracker)
    conc = cfg.concurrency
    rows = sum(work.totals.get(unit, 0) for b in blocks
               for unit in zip(b.column("model").to_pylist(), b.column("task").to_pylist()))
    ds = ray.data.from_blocks(blocks)
    ds = ds.map_batches(expand_unit, batch_size=None, batch_format="pyarrow",
                        fn_kwargs={"ctx": expansion(cfg, store, work), "done": ray.put(done)})
    live = any(m.backend != "replay" for m in models if m.role == "test")  # judges are called from Evaluate
    if live:
        ds = ds.map_batches(stages.Generate, fn_constructor_args=(models, endpoints, cache_location(cfg), staged),
                            batch_format="pyarrow",
                            batch_size=conc.generate_batch_size, num_cpus=0.5,
                            compute=ray.data.ActorPoolStrategy(size=conc.generate_actors))
    actors = evaluate_actors(conc.verify_actors, len(blocks), rows if live else None, conc.generate_batch_size)
    ds = ds.map_batches(stages.Evaluate, fn_constructor_args=(knowledge_for(cfg), cfg.models, endpoints,
                                                              cache_location(cfg), store, conc.batch_size, actors),
                        # None: one batch per block (a unit's rows); Evaluate commits them in parts
                        # of batch_size rows. A row count here would make Ray Data bundle units.
                        batch_format="pyarrow", batch_size=None,
                        # two blocks per actor: the next waits in the actor and starts the moment
                        # the last ends (with one, actors idled a quarter of the time between
                        # blocks); more would queue behind a busy actor while another runs dry
                        compute=ray.data.ActorPoolStrategy(size=actors, max_tasks_in_flight_per_actor=2))
    return _tracked(ds.iter_batches(batch_size=None, batch_format="pyarrow"), tracker)
