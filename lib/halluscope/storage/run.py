"""The layout of a run and its commit protocol.

A run is a folder ``<root>/<run_id>/``::

    manifest.json        config, code version, data hashes, rule/verifier versions, status
    items/<task>.parquet the test items, written once
    <table>/part-<key>.parquet   for table in generations, atoms, verdicts, scores
    quarantine/part-<key>.parquet  input rows that could not be used, with the reason
    metrics.json, leaderboard.md
    attempt.json         the driver attempt that owns the run now
    logs/                each attempt's log (pipeline/run_log.py)

The pipeline writes every batch as one part per table under the same key, the ``scores`` part
last. A batch is committed when its scores part exists; parts of any other key are leftovers of a
killed run and are ignored by readers and removed before a resume. Every object is written
atomically (see ``Location.write_bytes_atomic``).

A killed driver's actors can outlive it for a moment and commit after a resubmitted driver has
looked at the run. So each driver claims the run (``claim``), an actor commits only while its
driver still owns the run (``write_part(..., commit=True)``), and at its end the owner removes
every commit that is neither in its snapshot nor its own (``prune``): a late commit of the earlier
attempt holds generations this attempt processed again.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import pyarrow as pa
import pyarrow.parquet as pq

from halluscope.errors import Superseded
from halluscope.records import TABLES
from halluscope.storage.fs import Location
from halluscope.storage.names import check_run_id

COMMIT_TABLE = "scores"
# a batch's tables in writing order, the commit last
BATCH_TABLES = (*(t for t in TABLES if t != COMMIT_TABLE), COMMIT_TABLE)
PART_PREFIX = "part-"
ATTEMPT = "attempt.json"
_READERS = 8  # parts read at once
# columns whose values in a part its key fixes: the key hashes the part's generation ids, and an id
# names its model and task (records.generation_id), so a rewritten part holds the same ones
_KEYED = ("model", "task")


def table_to_bytes(table: pa.Table) -> bytes:
    """Parquet, zstd, without dictionary pages: on the demo's parts that is 20% less time to
    write and files a few percent smaller (its strings rarely repeat within a part). Into an
    Arrow buffer, not a Python file object, so the encoding releases the GIL throughout (a Python
    sink takes it back for every page) and another thread runs meanwhile."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd", use_dictionary=False)
    return sink.getvalue().to_pybytes()


def read_parquet(source: Any, columns: Sequence[str] | None = None, filters: Any = None,
                 schema: pa.Schema | None = None) -> pa.Table:
    """A Parquet file from a path, a file object or bytes, decoded in the calling thread. Arrow's
    own threads would hold the Python file's buffers past the call; one still releasing them when
    the interpreter exits aborts the process (exit 134 after a complete run)."""
    if filters is None and schema is None:  # read_table builds a dataset: more than a small part costs
        return pq.ParquetFile(source, pre_buffer=False).read(columns=columns, use_threads=False)
    return pq.read_table(source, columns=columns, filters=filters, schema=schema, use_threads=False,
                         pre_buffer=False)


def _footer_values(meta: pq.FileMetaData, column: str) -> frozenset[str] | None:
    """A string column's values in a Parquet file, from its row groups' statistics; None where they
    cannot tell (no such column, a row group of several values or with nulls, or no statistics:
    Arrow leaves out, never truncates, those of values over 4 KiB)."""
    at = next((i for i in range(meta.num_columns) if meta.schema.column(i).path == column), None)
    if at is None:
        return None
    if meta.num_rows == 0:  # an empty part (a commit of a batch without rows): none, whatever its row groups say
        return frozenset()
    found = set()
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(at).statistics
        if stats is None or not stats.has_min_max or stats.null_count or stats.min != stats.max:
            return None
        found.add(stats.min)
    return frozenset(found)


def _allowed(op: str, value: object) -> frozenset | None:
    """The values an equality or membership condition lets through; None for any other operator."""
    if op in ("==", "="):
        return frozenset([value])
    return frozenset(cast(Iterable, value)) if op == "in" else None


def _keyed_filters(filters: list[tuple[str, str, object]] | None) -> dict[str, frozenset]:
    """_KEYED column -> the values the filters (a row must pass all of them) let through."""
    out: dict[str, frozenset] = {}
    for column, op, value in filters or ():
        allowed = _allowed(op, value) if column in _KEYED else None
        if allowed is not None:
            out[column] = out[column] & allowed if column in out else allowed
    return out


def _excluded(values: dict[str, frozenset[str] | None], wanted: dict[str, frozenset]) -> bool:
    """Whether a part of these values holds no row the filters keep."""
    for column, allowed in wanted.items():
        found = values.get(column)
        if found is not None and not found & allowed:
            return True
    return False


def _holds(values: dict[str, frozenset[str] | None], condition: tuple[str, str, object]) -> bool:
    """Whether every row of a part of these values passes the condition."""
    column, op, value = condition
    found, allowed = values.get(column), _allowed(op, value)
    return found is not None and allowed is not None and found <= allowed


def _part_name(key: str) -> str:
    return f"{PART_PREFIX}{key}.parquet"


def _part_key(name: str) -> str | None:
    if name.startswith(PART_PREFIX) and name.endswith(".parquet"):
        return name[len(PART_PREFIX):-len(".parquet")]
    return None


class RunStore:
    """Reads and writes one run folder; picklable (Ray workers write parts directly)."""

    def __init__(self, root: Location, run_id: str) -> None:
        self.run_id = check_run_id(run_id)  # whoever asks, a run stays one folder directly under the root
        self.loc = root.child(run_id)
        self.attempt: str | None = None  # set by claim; travels with the store to the actors
        # (table, part key) -> the part's values of each _KEYED column (None: its footer cannot tell)
        self._keyed: dict[tuple[str, str], dict[str, frozenset[str] | None]] = {}

    # --- ownership ---------------------------------------------------------------------------
    def claim(self) -> None:
        """Make this driver the run's owner; actors of an earlier attempt stop committing."""
        self.attempt = uuid.uuid4().hex
        self.write_json(ATTEMPT, {"attempt": self.attempt, "claimed_at": dt.datetime.now(dt.UTC)})

    def check_owner(self) -> None:
        """Raise Superseded if another attempt has claimed the run since this store's claim."""
        if self.attempt is None:
            return
        owner = (self.read_json(ATTEMPT) or {}).get("attempt")
        if owner != self.attempt:
            raise Superseded(f"run {self.loc.url} was claimed by attempt {owner} (a resubmission of the same "
                             f"run id); attempt {self.attempt} stops without committing")

    # --- parts -----------------------------------------------------------------------------
    def write_batch(self, key: str, tables: dict[str, pa.Table]) -> None:
        """Write one batch's parts; the commit table goes last, so its presence means complete.
        Empty parts other than the commit are not written (most batches make no role calls)."""
        for name in (t for t in BATCH_TABLES if t in tables):
            if tables[name].num_rows or name == COMMIT_TABLE:
                self.write_part(name, key, tables[name], commit=name == COMMIT_TABLE)

    def part(self, table: str, key: str) -> Location:
        """Where the part of batch ``key`` of ``table`` lies."""
        return self.loc.child(table, _part_name(key))

    def part_keys(self, table: str) -> set[str]:
        return {k for k in map(_part_key, self.loc.child(table).list_names()) if k}

    def committed_keys(self, commit: str = COMMIT_TABLE) -> set[str]:
        return self.part_keys(commit)

    def prune(self, tables: Sequence[str], keep: set[str]) -> int:
        """Delete the parts of every batch of ``tables`` (the commit last) whose key is not in
        ``keep``: commits first, so a kill midway leaves uncommitted parts, never a commit
        without its data. Returns how many parts were removed."""
        self.check_owner()
        removed = 0
        for table in reversed(tables):
            for key in self.part_keys(table) - keep:
                self.part(table, key).remove()
                removed += 1
        return removed

    def read_table(self, table: str, columns: list[str] | None = None,
                   filters: list[tuple[str, str, object]] | None = None, keys: set[str] | None = None) -> pa.Table:
        """All committed rows of a table (an empty table with the schema if none), or those of
        the batches ``keys`` names; ``columns`` and ``filters`` (pyarrow's) keep the rest from
        ever being decoded. A filter on a part's model or task skips, by its footer, every part
        that holds none of the values asked for, and is not applied to one that holds only them
        (see ``_KEYED``): a read per model and task opens that model's and task's parts alone."""
        schema = TABLES.get(table)
        if table in TABLES:
            ordered = sorted(self.part_keys(table) & (self.committed_keys() if keys is None else keys))
        else:
            ordered = sorted(self.part_keys(table))
        wanted = _keyed_filters(filters) if schema is not None else {}

        def read(key: str) -> pa.Table | None:
            values = self._keyed.get((table, key))
            if values is not None and _excluded(values, wanted):
                return None
            loc = self.part(table, key)
            with loc.fs.open(loc.path, "rb") as f:
                opened = None
                if values is None and wanted:  # the part's first read: its footer, then its rows
                    opened = pq.ParquetFile(f, pre_buffer=False)
                    values = self._remember(table, key, opened.metadata)
                    if _excluded(values, wanted):
                        return None
                rest = [t for t in filters or () if values is None or not _holds(values, t)]
                if opened is not None and not rest:  # the footer just parsed serves the rows too
                    return opened.read(columns=columns, use_threads=False)
                f.seek(0)
                return read_parquet(f, columns=columns, filters=rest or None)

        # a run has hundreds of parts: read side by side (Arrow decodes without the GIL; on S3
        # each part is a request), in key order
        with ThreadPoolExecutor(max_workers=_READERS) as pool:
            parts = [p for p in pool.map(read, ordered) if p is not None]
        if not parts:
            if schema is None:
                return pa.table({})
            return schema.empty_table().select(columns) if columns else schema.empty_table()
        return pa.concat_tables(parts, promote_options="default")

    def _remember(self, table: str, key: str, meta: pq.FileMetaData) -> dict[str, frozenset[str] | None]:
        """A part's values of each _KEYED column, from its footer, kept for the store's life: a
        part never holds others, however often it is rewritten."""
        self._keyed[(table, key)] = found = {c: _footer_values(meta, c) for c in _KEYED}
        return found

    def parts_by(self, column: str, table: str = COMMIT_TABLE) -> dict[str, set[str]]:
        """value of ``column`` (a model or a task) -> the committed parts of ``table`` holding rows
        with it, read from each part's footer statistics (a part's column read only where they are
        missing): the aggregation reads one model's parts at a time without reading every row
        first. A part of several values is listed under each."""
        if column not in _KEYED:
            raise ValueError(f"parts_by: {column!r} is not one of {_KEYED}")

        def values(key: str) -> set[str]:
            known = self._keyed.get((table, key))
            if known is None:
                loc = self.part(table, key)
                with loc.fs.open(loc.path, "rb") as f:
                    known = self._remember(table, key, pq.ParquetFile(f, pre_buffer=False).metadata)
            found = known[column]
            if found is not None:
                return set(found)
            return set(self.read_table(table, [column], keys={key}).column(column).unique().to_pylist())

        keys = sorted(self.part_keys(table) & self.committed_keys())
        with ThreadPoolExecutor(max_workers=_READERS) as pool:
            found = list(pool.map(values, keys))
        out: dict[str, set[str]] = {}
        for key, vals in zip(keys, found):
            for v in vals:
                out.setdefault(v, set()).add(key)
        return out

    def keys_with(self, table: str, columns: list[str], where: Callable[[pa.Table], bool]) -> set[str]:
        """The committed batches of ``table`` with rows ``where`` picks, each part read alone
        (``columns`` of it): what a resumed run takes back to do again."""
        keys = sorted(self.part_keys(table) & self.committed_keys())  # the folders listed once

        def picks(key: str) -> bool:
            part = self.part(table, key)
            with part.fs.open(part.path, "rb") as f:
                return where(read_parquet(f, columns=columns))

        with ThreadPoolExecutor(max_workers=_READERS) as pool:
            picked = list(pool.map(picks, keys))
        return {key for key, hit in zip(keys, picked) if hit}

    def write_part(self, table: str, key: str, data: pa.Table, commit: bool = False) -> None:
        """Write one part; a commit part only while this store's attempt owns the run."""
        body = table_to_bytes(data)
        if commit:  # checked last thing before the write: the window for a stale owner is one PUT
            self.check_owner()
        self.part(table, key).write_bytes_atomic(body)

    def write_costs(self, costs: pa.Table) -> None:
        self.loc.child("costs.parquet").write_bytes_atomic(table_to_bytes(costs))

    def read_table_file(self, name: str) -> pa.Table:
        loc = self.loc.child(name)
        with loc.fs.open(loc.path, "rb") as f:
            return read_parquet(f)

    # --- items -----------------------------------------------------------------------------
    def items_location(self, task: str) -> Location:
        return self.loc.child("items", task.replace("/", "__") + ".parquet")

    def read_items(self, task: str) -> pa.Table:
        loc = self.items_location(task)
        with loc.fs.open(loc.path, "rb") as f:
            return read_parquet(f)

    # --- json documents ----------------------------------------------------------------------
    def write_json(self, name: str, doc: object) -> None:
        self.loc.child(name).write_bytes_atomic(json.dumps(doc, indent=2, sort_keys=True, default=str).encode())

    def read_json(self, name: str) -> dict[str, Any] | None:
        """A JSON object the run keeps (manifest, progress, attempt), or None before it is written."""
        try:  # one request, not an existence check and a read: every commit reads attempt.json
            return json.loads(self.loc.child(name).read_bytes())
        except FileNotFoundError:
            return None

    def write_text(self, name: str, text: str) -> None:
        self.loc.child(name).write_bytes_atomic(text.encode())
