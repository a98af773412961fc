"""Recorded generations: HALOGEN's released responses, or any CSV/JSONL/Parquet file.

A recorded row is joined to an item by the task's replay keys (the prompt, then task-specific
fields). Rows that cannot be parsed or match no item are quarantined with their reason; items
with no recorded row come back without text and are counted as missing, never scored.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pyarrow.parquet as pq

from halluscope.config import ReplayModel
from halluscope.errors import ConfigError, DataError
from halluscope.sources import DataResolver, open_text
from halluscope.tasks.base import Item, Task
from halluscope.tasks.halogen.common import HalogenTask, normalize_prompt, read_csv_rows

_DEFAULT_TEXT_COLUMNS = ("response", "text", "output", "generation")


@dataclass
class Replayed:
    texts: dict[str, str]  # item_id -> recorded text
    source: str
    quarantine: list[dict] = field(default_factory=list)


def _rows_from_file(path: Path, fmt: str) -> Iterator[tuple[int, dict | None, str]]:
    if fmt == "csv":
        yield from read_csv_rows(path)
    elif fmt == "jsonl":
        with open_text(path) as f:
            for i, line in enumerate(f):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as err:
                    yield i, None, f"invalid JSON: {err.msg}"
                    continue
                yield (i, row, "") if isinstance(row, dict) else (i, None, "not a JSON object")
    else:
        for i, row in enumerate(pq.read_table(path).to_pylist()):
            yield i, row, ""


def replay_source(spec: ReplayModel, task: Task, resolver: DataResolver) -> tuple[str, Path, str] | None:
    """(label for the manifest, local path, format) of a model's recorded generations for a task;
    None when the source has none for this task (every item is then missing, and counted)."""
    p = spec.params
    if p.source == "halogen":
        if not isinstance(task, HalogenTask):
            raise ConfigError(f"models: '{spec.id}' replays HALOGEN's released responses, "
                              f"which have none for task {task.name}")
        rel = task.released_file(p.name or spec.id)
        return (rel, resolver.resolve(rel), "csv") if rel else None
    if not p.path:
        raise ConfigError(f"models: '{spec.id}': params.path is required when params.source is 'file'")
    path = Path(p.path).expanduser()
    if not path.is_file():
        raise DataError(f"models: '{spec.id}': recorded generations file not found: {p.path}")
    fmt = p.format or {".csv": "csv", ".gz": "csv", ".jsonl": "jsonl", ".parquet": "parquet"}.get(path.suffix)
    if fmt is None:
        raise ConfigError(f"models: '{spec.id}': cannot tell the format of {p.path}; set params.format")
    return str(path), path, fmt


def load_replay(spec: ReplayModel, task: Task, items: list[Item], resolver: DataResolver) -> Replayed:
    """Join one model's recorded generations for one task to that task's items."""
    found = replay_source(spec, task, resolver)
    if found is None:
        return Replayed({}, "(none released)")
    source, path, fmt = found
    cols = spec.params.columns
    by_key: dict[str, tuple[int, str]] = {}
    quarantine: list[dict] = []
    seen: Counter[str] = Counter()
    text_col = cols.get("text")
    for i, row, problem in _rows_from_file(path, fmt):
        if row is None:
            quarantine.append({"row": i, "reason": problem})
            continue
        if cols.get("task") and row.get(cols["task"]) != task.name:
            continue
        col = text_col or next((c for c in _DEFAULT_TEXT_COLUMNS if c in row), None)
        if col is None or col not in row:
            quarantine.append({"row": i, "reason": f"no text column (looked for {col or _DEFAULT_TEXT_COLUMNS})"})
            continue
        text = row[col]
        if text is None or not isinstance(text, str):
            quarantine.append({"row": i, "reason": f"column {col!r} is not text"})
            continue
        record = dict(row)
        if cols.get("prompt"):
            record["prompt"] = row.get(cols["prompt"], "")
        if cols.get("item_id"):
            keys = [f"id:{row.get(cols['item_id'])}"]
        else:
            prompt = normalize_prompt(str(record.get("prompt", "")))
            record["occurrence"] = seen[prompt]
            seen[prompt] += 1
            keys = task.replay_keys(record)
        for key in keys:
            by_key.setdefault(key, (i, text))
    texts: dict[str, str] = {}
    used: set[int] = set()
    for item in items:
        keys = [f"id:{item.item_id}"] if cols.get("item_id") else \
            task.replay_keys({**item.fields, "prompt": item.prompt})
        for key in keys:
            hit = by_key.get(key)
            if hit is not None and hit[0] not in used:
                used.add(hit[0])
                texts[item.item_id] = hit[1]
                break
    all_rows = {row for row, _ in by_key.values()}
    for row in sorted(all_rows - used):
        quarantine.append({"row": row, "reason": "matches no item of the task"})
    for q in quarantine:
        q.update(source=source, model=spec.id, task=task.name)
    return Replayed(texts, source, quarantine)
