"""What a run has to do: items x models, with replayed text joined in, minus what is done."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import ray

from halluscope import records
from halluscope.config import ReplayModel, RunConfig
from halluscope.records import generation_id, stable_id
from halluscope.sources import DataResolver
from halluscope.storage.run import RunStore, table_to_bytes
from halluscope.tasks.base import Item, Task
from halluscope.tasks.registry import get_task

if TYPE_CHECKING:
    from halluscope.models.replay import Replayed

MISSING = "no recorded response"


@dataclass
class WorkSet:
    tables: list[pa.Table]  # WORK rows still to do, in chunks
    total: int  # all generations of the run, done or not
    done: int
    sources: dict[str, str] = field(default_factory=dict)  # data file -> sha256
    quarantined: int = 0
    missing: dict[str, int] = field(default_factory=dict)  # model/task -> items without a record


def resolver_for(cfg: RunConfig) -> DataResolver:
    return DataResolver(cfg.data.dir, cfg.data.cache_dir, cfg.data.download)


def write_items(store: RunStore, task: Task, items: list[Item]) -> None:
    loc = store.items_location(task.name)
    if loc.exists():
        return
    table = pa.Table.from_pylist([{"task": i.task, "item_id": i.item_id, "prompt": i.prompt,
                                   "fields": i.fields_json(), "source_row": i.source_row} for i in items],
                                 schema=records.ITEMS)
    loc.write_bytes_atomic(table_to_bytes(table))


@ray.remote(num_cpus=0.5)
def _replay_remote(spec: ReplayModel, task_name: str, items: list[Item], resolver: DataResolver):
    """Parse one recorded file on a worker; the driver only receives the joined texts."""
    from halluscope.models.replay import load_replay

    return load_replay(spec, get_task(task_name), items, resolver)


def _replay_all(cfg: RunConfig, tasks: list[Task], items: dict[str, list[Item]], resolver: DataResolver,
                on_ray: bool) -> dict[tuple[str, str], "Replayed"]:
    """Parse every recorded file: as Ray tasks (one per model and task), or in this process."""
    from halluscope.models.replay import load_replay

    pairs = [(m, t) for t in tasks for m in cfg.models if isinstance(m, ReplayModel)]
    if not on_ray:
        return {(m.id, t.name): load_replay(m, t, items[t.name], resolver) for m, t in pairs}
    refs = {t.name: ray.put(items[t.name]) for t in tasks}
    futures = {(m.id, t.name): _replay_remote.remote(m, t.name, refs[t.name], resolver) for m, t in pairs}
    return dict(zip(futures, ray.get(list(futures.values()))))


def build_workset(cfg: RunConfig, store: RunStore, done: set[str], blocks: int, on_ray: bool = True) -> WorkSet:
    resolver = resolver_for(cfg)
    limit = cfg.limits.max_items_per_task
    tasks = [get_task(t) for t in cfg.tasks]
    ws = WorkSet(tables=[], total=0, done=0)
    loaded = {t.name: t.load_items(resolver) for t in tasks}
    # Recorded rows are joined against every item of a task (so rows past a limit are not
    # quarantined as unmatched); the limit applies to what is evaluated.
    replayed = _replay_all(cfg, tasks, {n: li.items for n, li in loaded.items()}, resolver, on_ray)
    rows: list[dict] = []
    quarantine: list[dict] = []
    for task in tasks:
        items = loaded[task.name].items[:limit] if limit else loaded[task.name].items
        ws.sources.update(loaded[task.name].sources)
        write_items(store, task, items)
        for model in cfg.models:
            rep = replayed.get((model.id, task.name))
            if rep is not None:
                ws.sources[rep.source] = rep.sha256
                quarantine.extend(rep.quarantine)
            for item in items:
                gid = generation_id(task.name, item.item_id, model.id)
                ws.total += 1
                if gid in done:
                    ws.done += 1
                    continue
                text = rep.texts.get(item.item_id) if rep is not None else None
                error = MISSING if rep is not None and text is None else None
                if error:
                    ws.missing[f"{model.id}/{task.name}"] = ws.missing.get(f"{model.id}/{task.name}", 0) + 1
                rows.append({"gen_id": gid, "model": model.id, "task": task.name, "item_id": item.item_id,
                             "sample_idx": 0, "prompt": item.prompt, "fields": item.fields_json(), "text": text,
                             "input_tokens": None, "output_tokens": None, "latency_s": None,
                             "attempts": 0 if rep is not None else None, "error": error})
    if quarantine:
        store.write_part("quarantine", stable_id("replay", len(quarantine), quarantine[0]["source"]),
                         pa.Table.from_pylist(quarantine, schema=records.QUARANTINE))
    ws.quarantined = len(quarantine)
    chunk_rows = max(1, -(-len(rows) // blocks))
    ws.tables = [pa.Table.from_pylist(rows[i:i + chunk_rows], schema=records.WORK)
                 for i in range(0, len(rows), chunk_rows)]
    return ws
