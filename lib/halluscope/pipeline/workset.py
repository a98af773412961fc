"""The first stage: what a run has to do, as units of (model, task) expanded into rows.

The driver only lists the units; Ray Data expands each unit on a worker into one row per item
(joining recorded generations for replay models) and drops what an earlier attempt of the run
already committed. Parsing recorded files thus streams with the rest of the pipeline.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache

import pyarrow as pa
import ray

from halluscope import records
from halluscope.config.schema import ModelSpec
from halluscope.contract.task import Item, Task
from halluscope.models.replay import load_replay, replay_source
from halluscope.records import MISSING, GenerationIds, generation_id, stable_id
from halluscope.resolve.items import ItemSource
from halluscope.resolve.run import ResolvedRun
from halluscope.sources import sha256_file
from halluscope.storage.parquet import table_to_bytes
from halluscope.storage.run import RunStore
from halluscope.task_registry import get_task

UNITS = pa.schema([("model", pa.string()), ("task", pa.string())])  # a unit names its model; the specs travel once


@dataclass
class Work:
    """The units of a run (each model under test on each of its tasks) and their generations: what
    it does, as the estimate (``Plan``) is what it costs."""

    units: pa.Table  # one row per (model, task)
    # the units in input blocks, those replaying the same file together (one worker reads it once)
    blocks: list[pa.Table]
    total: int  # generations in the run, done or not
    totals: dict[tuple[str, str], int] = field(default_factory=dict)  # (model, task) -> generations
    sources: dict[str, str] = field(default_factory=dict)  # data file -> sha256


def _write_items(store: RunStore, task: Task, items: list[Item]) -> None:
    loc = store.items_location(task.name)
    if loc.exists():
        return
    table = pa.Table.from_pylist([{"task": i.task, "item_id": i.item_id, "prompt": i.prompt,
                                   "fields": i.fields_json(), "source_row": i.source_row} for i in items],
                                 schema=records.ITEMS)
    loc.write_bytes_atomic(table_to_bytes(table))


def list_work(run: ResolvedRun, store: RunStore) -> Work:
    """Load each task's items once here, from the run's item source (they are written to the
    run), hash every input file, and list the units. Fails early, before any worker starts, on
    a missing file."""
    cfg, source = run.cfg, run.items
    sources: dict[str, str] = {}
    totals: dict[tuple[str, str], int] = {}
    shared: dict[tuple[str, str], str] = {}  # (model, task) -> the recorded file it replays
    for name in cfg.tasks:
        task = get_task(name)
        written: dict[str, Item] = {}  # per-model test sets: the items of every model's sets
        for m in run.tested:
            if name not in cfg.tasks_of(m):
                continue
            _, loaded = source.source(name, m.id)
            sources.update(loaded.sources)
            items = source.limited(loaded.items)
            written.update((i.item_id, i) for i in items)
            totals[(m.id, task.name)] = len(items)
            if m.replayed:
                found = replay_source(m, task, source.resolver)
                if found is not None:
                    sources[found[0]] = sha256_file(found[1])
                    shared[(m.id, task.name)] = str(found[1])
        _write_items(store, task, list(written.values()))
    units = pa.Table.from_pylist([{"model": m.id, "task": t}
                                  for t in cfg.tasks for m in run.tested if t in cfg.tasks_of(m)],
                                 schema=UNITS)
    keys = list(zip(units.column("model").to_pylist(), units.column("task").to_pylist()))
    by_block: dict[tuple[str, str], list[int]] = {}
    for i, (model, task_name) in enumerate(keys):
        by_block.setdefault((model, shared.get((model, task_name), task_name)), []).append(i)
    # the largest first, so the actors finish together rather than one waiting on a large last block
    order = sorted(by_block.values(), key=lambda rows: -sum(totals.get(keys[i], 0) for i in rows))
    blocks = [units.take(rows) for rows in order]
    return Work(units, blocks, sum(totals.values()), totals, sources)


class Expansion:
    """What a worker needs to expand a unit into rows: the run's item source, with every source
    its plan loaded (shipped, so a worker parses none again), and its store (for quarantined
    input rows).

    A plain class, not a dataclass: Ray Data describes a stage's arguments for its dashboard,
    and converts a dataclass whole (every loaded item: 0.8 s of the driver's time before the
    demo's first block went out) where it writes an object's name."""

    def __init__(self, store: RunStore, items: ItemSource, models: list[ModelSpec]) -> None:
        self.store = store
        self.items = items
        self.specs = {m.id: m for m in models}  # the models under test the units name

    def item(self, task: str, model: str, item_id: str) -> Item:
        return self.items.item(task, model, item_id)


@lru_cache(maxsize=1)
def committed_before(ref: ray.ObjectRef) -> GenerationIds:
    """The ids an earlier attempt committed, fetched once per worker process rather than once per
    block: a resumed run of millions of generations hands each worker hundreds of blocks."""
    return ray.get(ref)


def expand_unit(units: pa.Table, ctx: Expansion, done: ray.ObjectRef | GenerationIds) -> Iterator[pa.Table]:
    """Rows still to do for a batch of units, as one table (Ray Data makes one block of a unit's
    rows whatever it is given; Evaluate cuts it into committed parts); quarantined input rows
    are written per unit.
    ``done`` (ids committed by an earlier attempt) travels once through the object store."""
    if isinstance(done, ray.ObjectRef):
        done = committed_before(done)
    tables: list[pa.Table] = []
    for unit in units.to_pylist():
        task, spec = get_task(unit["task"]), ctx.specs[unit["model"]]
        all_items = ctx.items.source(task.name, spec.id)[1].items
        items = ctx.items.limited(all_items)
        ids = [generation_id(task.name, i.item_id, spec.id) for i in items]
        todo = [(i, g) for i, g, new in zip(items, ids, done.unseen(ids)) if new]
        if not todo:
            continue
        texts: list[str | None] | None = None  # a replayed model's, None where its file has no text
        if spec.replayed:
            # joined against every item of the task, so rows past a limit are not "unmatched"
            rep = load_replay(spec, task, all_items, ctx.items.resolver)
            texts = [rep.texts.get(item.item_id) for item, _ in todo]
            if rep.quarantine:
                ctx.store.write_part("quarantine", stable_id("replay", spec.id, task.name),
                                     pa.Table.from_pylist(rep.quarantine, schema=records.QUARANTINE))
        n = len(todo)
        tables.append(pa.Table.from_pydict({
            "gen_id": [g for _, g in todo], "model": [spec.id] * n, "task": [task.name] * n,
            "item_id": [i.item_id for i, _ in todo], "sample_idx": [0] * n, "prompt": [i.prompt for i, _ in todo],
            "text": texts or [None] * n, "input_tokens": [None] * n,
            "output_tokens": [None] * n, "latency_s": [None] * n, "attempts": [0 if texts else None] * n,
            "cached": [False] * n, "error": [MISSING if t is None else None for t in texts] if texts else [None] * n},
            schema=records.WORK))
    if tables:
        yield pa.concat_tables(tables)
