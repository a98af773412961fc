"""Recorded generations: HALOGEN's released responses, or any CSV/JSONL/Parquet file.

A recorded row is joined to an item by the task's replay keys (the prompt, then task-specific
fields). Rows that cannot be parsed or match no item are quarantined with their reason; items
with no recorded row come back without text and are counted as missing, never scored.

Every unit of a run (a model on a task) and every worker joins its items against the same few
files, whatever the run's item limit: the rows' keys and reasons are derived once per content of
a file (and of the code and options that derive them) into an index under the data cache, so the
join reads the keys its items ask for instead of parsing the file again.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache, partial
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from halluscope.config.schema import ModelSpec, ReplayModel
from halluscope.errors import ConfigError, DataError, clip
from halluscope.knowledge.index_cache import cached_table
from halluscope.sources import DataResolver, csv_rows, jsonl_rows, open_text, system_path_problem, url_scheme

if TYPE_CHECKING:  # models/ sits below tasks/: a task is read through its methods only
    from halluscope.contract.task import Item, Task

_DEFAULT_TEXT_COLUMNS = ("response", "text", "output", "generation")


@dataclass
class Replayed:
    texts: dict[str, str]  # item_id -> recorded text
    source: str
    quarantine: list[dict] = field(default_factory=list)


def not_unicode(value: str) -> str | None:
    """Why a string cannot be stored as UTF-8 (a byte the file's encoding did not decode, or a
    lone surrogate such as JSON's "\\ud800"); None when it can."""
    try:
        value.encode("utf-8")
        return None
    except UnicodeEncodeError as err:
        ch = ord(value[err.start])
        if 0xDC80 <= ch <= 0xDCFF:
            return f"byte 0x{ch - 0xDC00:02x} at character {err.start} is not UTF-8 (save the file as UTF-8)"
        return f"lone surrogate \\u{ch:04x} at character {err.start} is not valid Unicode"


def _csv_rows(path: Path) -> Iterator[tuple[int, dict | None, str]]:
    with open_text(path, tolerant=True) as f:
        yield from csv_rows(f, path)


def _jsonl_rows(path: Path) -> Iterator[tuple[int, dict | None, str]]:
    with open_text(path, tolerant=True) as f:
        yield from jsonl_rows(f, start=0)


def _parquet_rows(path: Path) -> Iterator[tuple[int, dict | None, str]]:
    i = 0
    for batch in pq.ParquetFile(path).iter_batches():
        for row in batch.to_pylist():
            yield i, row, ""
            i += 1


def _rows_from_file(path: Path, fmt: str) -> Iterator[tuple[int, dict | None, str]]:
    """(row index, row, problem) of every row; a file that breaks off is a DataError naming it
    and the row it stopped at."""
    rows = {"csv": _csv_rows, "jsonl": _jsonl_rows, "parquet": _parquet_rows}[fmt](path)
    i = -1
    try:
        for i, row, problem in rows:
            yield i, row, problem
    except (OSError, EOFError, csv.Error, pa.ArrowException) as err:
        raise DataError(f"cannot read {path} after row {i}: {err}") from None


@lru_cache(maxsize=1)
def _file_rows(path: Path, fmt: str, stamp: tuple[int, int]) -> tuple[tuple[int, dict | None, str], ...]:
    """A file's rows, kept for the next reader: the indexes derived from one file (a benchmark's
    rule sets of a domain, its recorded answers) are built one after another, so a file not
    indexed yet is parsed once, not per index.
    ``stamp`` (mtime, size) keeps a rewritten file from being served from the cache."""
    return tuple(_rows_from_file(path, fmt))


def file_rows(path: Path, fmt: str) -> tuple[tuple[int, dict | None, str], ...]:
    """(row index, row, problem) of every row of a file, parsed once for as long as it is the
    last file read and unchanged."""
    stat = path.stat()
    return _file_rows(path, fmt, (stat.st_mtime_ns, stat.st_size))


def check_readable(path: Path, fmt: str) -> None:
    """Fail before any worker starts on a file that cannot be read as ``fmt`` at all (UTF-16,
    binary, not gzip, a Parquet file without its footer); bad rows are found and quarantined later."""
    try:
        if fmt == "parquet":
            pq.ParquetFile(path)
            return
        with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as f:
            head = f.read(4096)
    except (OSError, EOFError, pa.ArrowException) as err:
        raise DataError(f"cannot read {path} as {fmt}: {err}") from None
    if head.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in head:
        raise DataError(f"{path} is not UTF-8 text (UTF-16 or binary); save it as UTF-8 "
                        f"(e.g. iconv -f UTF-16 -t UTF-8 {path.name} > {path.stem}.utf8{path.suffix})")


def _replayed(spec: ModelSpec) -> ReplayModel:
    if not isinstance(spec, ReplayModel):
        raise TypeError(f"model '{spec.id}' answers by backend {spec.backend}: it has no recorded generations")
    return spec


def replay_source(model: ModelSpec, task: Task, resolver: DataResolver) -> tuple[str, Path, str] | None:
    """(label for the manifest, local path, format) of a model's recorded generations for a task;
    None when the source has none for this task (every item is then missing, and counted)."""
    spec = _replayed(model)
    p = spec.params
    if p.source in ("released", "recorded"):
        try:  # the task names the files its benchmark's authors released
            rel = task.replay_file(p.name or spec.id, p.source)
        except LookupError as err:
            raise ConfigError(f"models: '{spec.id}' replays {p.source} responses: {err}") from None
        return (rel, resolver.resolve(rel), "csv") if rel else None
    if not p.path:
        raise ConfigError(f"models: '{spec.id}': params.path is required when params.source is 'file'")
    scheme = url_scheme(p.path)
    if scheme:
        raise ConfigError(f"models: '{spec.id}': params.path: replay paths must be local files, not URLs "
                          f"({scheme}:// in {clip(p.path)}); copy the file here and give its path")
    path = Path(p.path).expanduser().absolute()
    try:
        is_file, is_dir = path.is_file(), path.is_dir()
    except OSError as err:  # a name longer than the filesystem allows
        raise DataError(f"models: '{spec.id}': params.path: {err.strerror or err}: {clip(path)}") from None
    if not is_file:
        why = "is a folder, not a file" if is_dir else "is not a regular file" if path.exists() else "not found"
        raise DataError(f"models: '{spec.id}': params.path: recorded generations file {why}: {clip(path, 300)} "
                        "(a relative path is taken from the config file's folder)")
    problem = system_path_problem(path)
    if problem:
        raise DataError(f"models: '{spec.id}': params.path: {clip(path)} {problem}")
    fmt = p.format or {".csv": "csv", ".gz": "csv", ".jsonl": "jsonl", ".parquet": "parquet"}.get(path.suffix)
    if fmt is None:
        raise ConfigError(f"models: '{spec.id}': cannot tell the format of {clip(path)}; set params.format")
    try:
        check_readable(path, fmt)
    except DataError as err:
        raise DataError(f"models: '{spec.id}': params.path: {err}") from None
    return str(path), path, fmt


@lru_cache(maxsize=4096)
def _digest(key: object) -> bytes:
    """A join key as the index keeps it: 16 bytes whatever its length (the prompt, the source
    passage), computed alike for a row and an item. Keys read from a user's file may hold the
    surrogates a byte that is not UTF-8 came in as: those are hashed too. Cached (a few thousand,
    as keys can be long): a task's units, one per model and rule set, join the same items."""
    return hashlib.blake2b(str(key).encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _index(path: Path, fmt: str, task: Task, cols: dict[str, str]) -> pa.Table:
    """What the join needs of a file, in file order: each usable row that is the first under one of
    its join keys, with its text and those keys (a later row under a key never matches), and each
    unusable row with the reason it is quarantined."""
    out: list[tuple[int, str | None, str | None, list[bytes]]] = []  # row, text, reason, keys
    taken: set[bytes] = set()
    seen: Counter[str] = Counter()
    text_col = cols.get("text")
    for i, row, problem in file_rows(path, fmt):
        if row is None:
            out.append((i, None, problem, []))
            continue
        if cols.get("task") and row.get(cols["task"]) != task.name:
            continue
        col = text_col or next((c for c in _DEFAULT_TEXT_COLUMNS if c in row), None)
        if col is None or col not in row:
            out.append((i, None, f"no text column (looked for {col or _DEFAULT_TEXT_COLUMNS})", []))
            continue
        text = row[col]
        if text is None or not isinstance(text, str):
            out.append((i, None, f"column {col!r} is not text", []))
            continue
        record = dict(row)
        if cols.get("prompt"):
            record["prompt"] = row.get(cols["prompt"], "")
        bad = next(((c, why) for c, v in ((col, text), (cols.get("prompt", "prompt"), record.get("prompt")))
                    if isinstance(v, str) and (why := not_unicode(v))), None)
        if bad:
            out.append((i, None, f"column {bad[0]!r}: {bad[1]}", []))
            continue
        if cols.get("item_id"):
            keys = [f"id:{row.get(cols['item_id'])}"]
        else:
            group = task.replay_group(record)
            record["occurrence"] = seen[group]
            seen[group] += 1
            keys = task.replay_keys(record)
        won = []
        for key in map(_digest, keys):
            if key not in taken:
                taken.add(key)
                won.append(key)
        if won:
            out.append((i, text, None, won))
    rows, texts, reasons, keys_ = zip(*out) if out else ((), (), (), ())
    return pa.table({"row": pa.array(rows, pa.int64()), "text": pa.array(texts, pa.string()),
                     "reason": pa.array(reasons, pa.string()), "keys": pa.array(keys_, pa.list_(pa.binary(16)))})


def _code_of(task: Task) -> tuple[str, ...]:
    """The files of the task's classes, whose replay keys the index holds (its benchmark may be a
    package other than this one)."""
    mods = {c.__module__ for c in type(task).__mro__}
    files = {getattr(sys.modules.get(m), "__file__", None) for m in mods
             if m.partition(".")[0] not in sys.stdlib_module_names}
    return tuple(sorted(f for f in files if f))


_ASKED: dict[tuple[str, bool], tuple[Task, list[Item], list[list[bytes]]]] = {}


def _asked(task: Task, items: list[Item], by_id: bool) -> list[list[bytes]]:
    """Each item's join keys, digested. Every model replayed on a task joins the same items (one
    list, loaded once per run): worked out for the first and kept for the others, while the
    task and its list are the same objects."""
    kept = _ASKED.get((task.name, by_id))
    if kept is not None and kept[0] is task and kept[1] is items:
        return kept[2]
    asked = [list(map(_digest, [f"id:{item.item_id}"] if by_id else
                      task.replay_keys({**item.fields, "prompt": item.prompt}))) for item in items]
    _ASKED[(task.name, by_id)] = (task, items, asked)
    return asked


def load_replay(model: ModelSpec, task: Task, items: list[Item], resolver: DataResolver) -> Replayed:
    """Join one model's recorded generations for one task to that task's items. The file's join
    index is built once per content and kept under the data cache (``index_cache.cached_table``);
    a run reads from it only the keys its items ask for."""
    spec = _replayed(model)
    found = replay_source(spec, task, resolver)
    if found is None:
        return Replayed({}, "(none released)")
    source, path, fmt = found
    cols = spec.params.columns
    table = cached_table(Path(resolver.cache_dir).expanduser() / "indexes", "replay", path,
                         [fmt, f"{type(task).__module__}.{type(task).__qualname__}", task.name, cols],
                         partial(_index, path, fmt, task, cols), _code_of(task))
    usable = pc.is_null(table["reason"])
    bad = table.filter(pc.invert(usable))
    quarantine = [{"row": i, "reason": why} for i, why in zip(bad["row"].to_pylist(), bad["reason"].to_pylist())]
    index = table.filter(usable)
    rows, row_texts = index["row"].to_pylist(), index["text"].to_pylist()
    lists = index["keys"].combine_chunks()
    flat, owner = lists.flatten(), pc.list_parent_indices(lists)
    asked = _asked(task, items, bool(cols.get("item_id")))
    wanted = pc.is_in(flat, value_set=pa.array(list({k for ks in asked for k in ks}), pa.binary(16)))
    by_key = {k: (rows[at], row_texts[at]) for k, at in zip(flat.filter(wanted).to_pylist(),
                                                            owner.filter(wanted).to_pylist())}
    texts: dict[str, str] = {}
    used: set[int] = set()
    for item, keys in zip(items, asked):
        for key in keys:
            hit = by_key.get(key)
            if hit is not None and hit[0] not in used:
                used.add(hit[0])
                texts[item.item_id] = hit[1]
                break
    for row_no in sorted(set(rows) - used):
        quarantine.append({"row": row_no, "reason": "matches no item of the task"})
    for q in quarantine:
        q.update(source=source, model=spec.id, task=task.name)
    return Replayed(texts, source, quarantine)
