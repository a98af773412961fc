"""Streams a run's work through its stages: on Ray Data, or as plain calls in the driver's process
for a small run with nothing to serve; the models under test the run serves generate in waves."""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import ray

from halluscope.config.schema import ModelSpec
from halluscope.models.registry import cached_prompts
from halluscope.pipeline import stages
from halluscope.pipeline.generation import (
    StagedRows,
    generate_model,
    prompts_left,
    staged_location,
)
from halluscope.pipeline.plan_view import Plan
from halluscope.pipeline.progress import Progress
from halluscope.pipeline.spend import dollar_gate
from halluscope.pipeline.watchdog import Watchdog
from halluscope.pipeline.workset import Expansion, Work, expand_unit
from halluscope.records import GenerationIds
from halluscope.resolve.cluster import budget as schedule_budget
from halluscope.resolve.cluster import scheduled
from halluscope.resolve.run import ResolvedRun
from halluscope.storage.fs import Location
from halluscope.storage.run import RunStore

if TYPE_CHECKING:
    from halluscope.pipeline.waves import Deployment

logger = logging.getLogger(__name__)


@dataclass
class StageInputs:
    """What the stages of one run are handed: its work, its store, the ids an earlier attempt
    committed, the endpoints of the models it serves for the whole run, and the progress it
    reports; ``ctx``, the expansion of its units with every item loaded, is built once for every
    call of the stages (the waves call them once per model)."""

    run: ResolvedRun
    store: RunStore
    work: Work
    done: GenerationIds
    endpoints: dict
    tracker: Progress
    estimate: Plan | None = None  # the run's, made once when it opened: the waves' jobs
    deployments: list[Deployment] = field(default_factory=list)  # the waves', as they happen
    on_commit: Callable[[str, dict[str, str]], None] | None = None  # each committed batch: key, parts (spend)
    # while the driver waits for a wave's models to generate, every TICK_S (spend: held time accrues)
    on_tick: Callable[[], None] = lambda: None
    # a wave's models given back: their nodes' logs copied before the autoscaler removes idle pods
    on_released: Callable[[], None] = lambda: None
    earlier_usd: float = 0.0  # what the run's earlier attempts spent: the budget is the run's
    ctx: Expansion = field(init=False)

    def __post_init__(self) -> None:
        self.ctx = Expansion(self.store, self.run.items, self.run.tested)


def in_process(run: ResolvedRun, todo: int) -> bool:
    """Whether the run's stages run in the driver's process rather than on Ray: a run with fewer
    than ``ray.in_process_below`` generations to do, no Ray to join (neither ``ray.address`` nor
    RAY_ADDRESS set, none started in this process) and no model the run serves on Ray Serve.
    Ray's own start (9 s on 2 cores) and its workers' would be most of such a run's time."""
    cfg = run.cfg
    return (todo < cfg.ray.in_process_below and not (cfg.ray.address or os.environ.get("RAY_ADDRESS"))
            and not ray.is_initialized() and not any(m.served for m in cfg.models))


def evaluate_actors(configured: int, blocks: int, live_rows: int | None, generate_batch_size: int) -> int:
    """No more actors than Evaluate will get inputs: an actor beyond them would start, and hold
    its CPU, for nothing. Without live models (``live_rows`` None) the inputs are the plan's
    blocks; with them, generation batches, one when every row fits in one."""
    if live_rows is None:
        return min(configured, blocks)
    return 1 if live_rows <= generate_batch_size else configured


def _live(models: list[ModelSpec]) -> bool:
    """Whether models under test answer live (judges are called from Evaluate)."""
    return any(not m.replayed for m in models if m.role == "test")


def driver_batches(run: ResolvedRun, store: RunStore, work: Work, blocks: list[pa.Table], done: GenerationIds,
                   models: list[ModelSpec], ctx: Expansion | None = None) -> Iterator[pa.Table]:
    """The stages of ``execute`` as plain calls in this process, one block after another: a small
    run's execution (``in_process``), and the single-process baseline of ``make bench``. Yields
    what Evaluate committed. ``ctx``: the run's expansion, when the caller has built it."""
    cfg = run.cfg
    generate = stages.Generate(models, {}, run.cache) if _live(models) else None
    ctx = ctx or Expansion(store, run.items, run.tested)
    evaluate = stages.Evaluate(run.knowledge, cfg.models, {}, run.cache, store, cfg.concurrency.batch_size, ctx.item)
    size = cfg.concurrency.generate_batch_size  # as Ray Data batches generation: what a budget stop waits for
    for block in blocks:
        for batch in expand_unit(block, ctx, done):
            for start in range(0, batch.num_rows, size):
                chunk = batch.slice(start, size)
                yield from evaluate(generate(chunk) if generate else chunk)


def _tracked(committed: Iterable[pa.Table], w: StageInputs) -> tuple[int, set[str]]:
    """The generations and keys of the parts committed (Evaluate's output), tracked as they come."""
    processed, keys = 0, set()
    for batch in committed:
        for r in batch.to_pylist():
            w.tracker.add(r["model"], r["task"], r["rows"], r["failed"])
            processed += r["rows"]
            if r["key"] not in keys and w.on_commit is not None:
                w.on_commit(r["key"], json.loads(r["parts"]))
            keys.add(r["key"])
    return processed, keys


def in_waves(w: StageInputs, watchdog: Watchdog, budget: dict[str, float],
             in_driver: bool = False) -> tuple[int, set[str], list[Deployment]]:
    """Evaluate what needs no deployment of its own at once; the served models under test
    generate in waves on a thread of their own (``waves.Waves``), and each is evaluated from its
    staged generations once its deployment is given back, while the next ones generate.
    ``in_driver``: a run with no served model evaluated in this process (``in_process``)."""
    cfg = w.run.cfg
    served_under_test = {m.id for m in cfg.models if scheduled(m)}
    blocks: dict[str, list[pa.Table]] = defaultdict(list)
    for b in w.work.blocks:
        blocks[b.column("model")[0].as_py()].append(b)
    others = [b for m, bs in blocks.items() if m not in served_under_test for b in bs]
    wanted = [m for m in served_under_test if blocks.get(m)]
    if not wanted:
        return (*execute(w, others, cfg.models, in_driver=in_driver), [])
    return _with_waves(w, watchdog, budget, blocks, others, wanted)


def _with_waves(w: StageInputs, watchdog: Watchdog, budget: dict[str, float], blocks: dict[str, list[pa.Table]],
                others: list[pa.Table], wanted: list[str]) -> tuple[int, set[str], list[Deployment]]:
    """``in_waves`` with served models under test: the waves follow on a thread; the driver's
    thread evaluates the other models, then each model the waves report generated."""
    from halluscope.pipeline.waves import Waves  # Ray Serve: imported by runs that serve models under test
    from halluscope.serving.app import remove, start_serve

    run, cfg = w.run, w.run.cfg
    specs = {m.id: m for m in cfg.models}
    estimate = w.estimate
    assert estimate is not None, "a run with served models under test is estimated when it opens"
    start_serve()  # before the pipeline's actors load the machine
    remove(wanted, scope=w.store.run_id)  # what a killed driver of this run left holds GPUs the budget counts
    ready: queue.Queue[tuple[str, bool]] = queue.Queue()
    ctx, done_ref = ray.put(w.ctx), ray.put(w.done)

    def generate(spec: ModelSpec, endpoint: Any) -> Any:
        return generate_model.remote(spec, endpoint, blocks[spec.id], ctx, done_ref, run.cache,
                                     staged_location(w.store.loc, spec.id), cfg.concurrency.generate_batch_size)

    deploy = _to_deploy(w, specs, blocks, wanted, generate)
    for m in set(wanted) - set(deploy):
        ready.put((m, True))
    waves = Waves([j for j in estimate.jobs if j.model in deploy], budget, specs, generate,
                  lambda m, ok: ready.put((m, ok)), scope=w.store.run_id,
                  layout=run.layout(),
                  allowed=dollar_gate(run, {j.model: j for j in estimate.jobs}, w.earlier_usd))
    w.deployments = waves.deployments
    staged = StagedRows(w.store.loc)
    w.tracker.views.append(lambda: {"deployments": [{**d.as_dict(), "staged_rows": staged.of(d.model)}
                                                    for d in list(waves.deployments)]})
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
        processed, keys = execute(w, others, [m for m in cfg.models if not scheduled(m)]) if others else (0, set())
        n, k = _evaluate_generated(w, blocks, set(wanted), ready, failed)
    finally:
        waves.stop.set()
        thread.join()
    if failed:
        raise failed[0]
    return processed + n, keys | k, result[0] if result else waves.deployments


def _evaluate_generated(w: StageInputs, blocks: dict[str, list[pa.Table]], remaining: set[str],
                        ready: queue.Queue[tuple[str, bool]], failed: list[BaseException]) -> tuple[int, set[str]]:
    """Each model's staged generations evaluated as the waves report it generated (or failed)."""
    specs = {m.id: m for m in w.run.cfg.models}
    processed, keys = 0, set[str]()
    while remaining:
        try:
            finished = [ready.get(timeout=TICK_S)]
        except queue.Empty:
            w.on_tick()  # deployments loading or generating hold GPUs with nothing committed
            continue
        while not ready.empty():
            finished.append(ready.get_nowait())
        if failed:
            raise failed[0]
        remaining -= {m for m, _ in finished}
        w.on_released()
        generated = [m for m, ok in finished if ok]
        if generated:
            n, k = execute(w, [b for m in generated for b in blocks[m]], [specs[m] for m in generated],
                           staged={m: staged_location(w.store.loc, m) for m in generated})
            processed, keys = processed + n, keys | k
    return processed, keys


TICK_S = 5.0  # how often the driver looks at the spend while it waits for a wave


def ray_budget(run: ResolvedRun, cpus: float | None) -> dict[str, float]:
    return schedule_budget(run.cfg, ray.cluster_resources().get("GPU", 0.0), cpus) or {}


def _to_deploy(w: StageInputs, specs: dict[str, ModelSpec], blocks: dict[str, list[pa.Table]], wanted: list[str],
               generate: Callable[[ModelSpec, Any], Any]) -> list[str]:
    """The models to deploy. One whose rows an earlier attempt generated is evaluated from its
    staged parts, not deployed again; one whose every answer left is in the call cache has its
    rows staged from there now, without a deployment."""
    def staged(m: str) -> Location:
        return staged_location(w.store.loc, m)

    cache = w.run.cache
    prompts = {m: prompts_left(blocks[m], w.ctx, w.done, staged(m)) for m in wanted}
    left = [m for m in wanted if prompts[m]]
    cached = [m for m in left if cache is not None and cached_prompts(specs[m], cache, prompts[m]) == prompts[m]]
    for m in cached:
        logger.info("%s: every answer left is in the call cache; staged from there, not deployed", m)
    ray.get([generate(specs[m], None) for m in cached])
    return [m for m in left if m not in cached]


def execute(w: StageInputs, blocks: list[pa.Table], models: list[ModelSpec], staged: dict[str, Location] | None = None,
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
        return _tracked(driver_batches(w.run, w.store, w.work, blocks, w.done, models, w.ctx), w)
    run, cfg = w.run, w.run.cfg
    conc = cfg.concurrency
    rows = sum(w.work.totals.get(unit, 0) for b in blocks
               for unit in zip(b.column("model").to_pylist(), b.column("task").to_pylist()))
    ds = ray.data.from_blocks(blocks)
    ds = ds.map_batches(expand_unit, batch_size=None, batch_format="pyarrow",
                        fn_kwargs={"ctx": w.ctx, "done": ray.put(w.done)})
    live = _live(models)
    if live:
        ds = ds.map_batches(stages.Generate, fn_constructor_args=(models, w.endpoints, run.cache, staged,
                                                                 conc.generate_actors),
                            batch_format="pyarrow",
                            batch_size=conc.generate_batch_size, num_cpus=0.5,
                            compute=ray.data.ActorPoolStrategy(size=conc.generate_actors))
    actors = evaluate_actors(conc.verify_actors, len(blocks), rows if live else None, conc.generate_batch_size)
    ds = ds.map_batches(stages.Evaluate, fn_constructor_args=(run.knowledge, cfg.models, w.endpoints, run.cache,
                                                              w.store, conc.batch_size, w.ctx.item, actors),
                        # None: one batch per block (a unit's rows); Evaluate commits them in parts
                        # of batch_size rows. A row count here would make Ray Data bundle units.
                        batch_format="pyarrow", batch_size=None,
                        # two blocks per actor: the next waits in the actor and starts the moment
                        # the last ends (with one, actors idled a quarter of the time between
                        # blocks); more would queue behind a busy actor while another runs dry
                        compute=ray.data.ActorPoolStrategy(size=actors, max_tasks_in_flight_per_actor=2))
    return _tracked(ds.iter_batches(batch_size=None, batch_format="pyarrow"), w)
