"""The layout of a run and its commit protocol.

A run is a folder ``<root>/<run_id>/``::

    manifest.json        config, code version, data hashes, rule/verifier versions, status
    items/<task>.parquet the test items, written once
    <table>/part-<key>.<sha256>.parquet   for table in generations, atoms, verdicts, scores
    quarantine/part-<key>.<sha256>.parquet  input rows that could not be used, with the reason
    metrics.json, leaderboard.md
    attempt.json         the driver attempt that owns the run now
    logs/                each attempt's log (pipeline/run_log.py)
    held/part-<attempt>.<sha256>.parquet  what each attempt's deployments held (pipeline/spend.py)

The pipeline writes every batch as one part per table under the same key, the ``scores`` part
last. A part's name carries its batch's key and the sha256 of its bytes, and it is read only if
it still hashes to it (``storage.verified``: locally also a regular file of this user that no one
else can write). A batch is committed when its scores part exists and verifies; parts of any
other key are leftovers of a killed run (or were altered since) and are ignored by readers and
removed before a resume, which does their batches again. Every object is written atomically.

A killed driver's actors can outlive it for a moment and commit after a resubmitted driver has
looked at the run. So each driver claims the run (``claim``), an actor commits only while its
driver still owns the run (``write_part(..., commit=True)``), and at its end the owner removes
every commit that is neither in its snapshot nor its own (``prune``): a late commit of the earlier
attempt holds generations this attempt processed again.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import cache
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from halluscope.errors import DataError, Superseded
from halluscope.records import TABLES
from halluscope.storage.fs import Location, list_private, write_private
from halluscope.storage.names import check_run_id
from halluscope.storage.parquet import read_parquet, table_to_bytes
from halluscope.storage.verified import skip, trusted_bytes

COMMIT_TABLE = "scores"
# a batch's tables in writing order, the commit last
BATCH_TABLES = (*(t for t in TABLES if t != COMMIT_TABLE), COMMIT_TABLE)
PART_PREFIX = "part-"
_NAME = re.compile(r"part-([^./]+)\.([0-9a-f]{64})\.parquet")
ATTEMPT = "attempt.json"
_READERS = 8  # parts read at once
# columns whose values in a part its key fixes: the key hashes the part's generation ids, and an id
# names its model and task (records.generation_id), so a rewritten part holds the same ones
_KEYED = ("model", "task")

logger = logging.getLogger(__name__)
_warned: set[str] = set()  # folders whose foreign files were warned about, in this process
_warned_lock = threading.Lock()


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


def part_name(key: str, data: bytes) -> str:
    """A part's file name: its batch's key and the sha256 of its bytes."""
    return f"{PART_PREFIX}{key}.{hashlib.sha256(data).hexdigest()}.parquet"


def _parsed(name: str) -> tuple[str, str] | None:
    """(key, sha256) of a name ``part_name`` gives, None for any other."""
    found = _NAME.fullmatch(name)
    return (found[1], found[2]) if found else None


def _warn_foreign(folder: Location, names: list[str]) -> None:
    """Files in a table's folder that no run wrote as it writes parts: one warning per folder."""
    with _warned_lock:
        first = folder.url not in _warned
        _warned.add(folder.url)
    if first:
        logger.warning("run: %d file(s) in %s are not parts named part-<key>.<sha256>.parquet (written by an "
                       "older halluscope, or not by a run), e.g. %s: their rows are not used", len(names),
                       folder.url, names[0])


def json_bytes(doc: object) -> bytes:
    """A JSON document as the run folder keeps it: indented, keys sorted."""
    return json.dumps(doc, indent=2, sort_keys=True, default=str).encode()


class ViewChanged(DataError):
    """A run's view (metrics.json, leaderboard.md, costs.parquet) differs from what it wrote."""


class RunStore:
    """Reads and writes one run folder; picklable (Ray workers write parts directly).

    Every part is read back as ``storage.verified`` reads the caches' (its bytes hash to the
    sha256 in its name; locally a regular file of this user that no one else can write): one that
    fails is skipped with a warning naming it, and a batch whose commit fails is not committed,
    so a resume does it again (``storage.verified.skipped_parts`` lists what was skipped)."""

    def __init__(self, root: Location, run_id: str) -> None:
        self.run_id = check_run_id(run_id)  # whoever asks, a run stays one folder directly under the root
        self.loc = root.child(run_id)
        self.attempt: str | None = None  # set by claim; travels with the store to the actors
        # (table, part key) -> the part's values of each _KEYED column (None: its footer cannot tell)
        self._keyed: dict[tuple[str, str], dict[str, frozenset[str] | None]] = {}
        # commit files that verified -> their generation ids (their rows are checked again when read)
        self._commits: dict[str, frozenset[str]] = {}
        # inside ``unchanging``: each table's parts and the committed batches, found once
        self._listed: dict[str, dict[str, list[str]]] | None = None
        self._committed: set[str] | None = None

    def __getstate__(self) -> dict:
        """What an actor needs to write parts: not the driver's memo of what it verified (the
        generation ids of every commit, megabytes in a large run)."""
        return {**self.__dict__, "_keyed": {}, "_commits": {}, "_listed": None, "_committed": None}

    @contextmanager
    def unchanging(self) -> Iterator[None]:
        """Reads of a run nothing writes meanwhile (its aggregation, after the pipeline): each
        folder is listed, and the committed batches are found, once for the block rather than at
        every read. Read a model at a time, 2,000 models listed every part of four tables and
        checked every commit 8,000 times: 12 s of a 27 s aggregation."""
        self._listed, self._committed = {}, None
        try:
            yield
        finally:
            self._listed, self._committed = None, None

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
    def write_batch(self, key: str, tables: dict[str, pa.Table]) -> dict[str, str]:
        """Write one batch's parts; the commit table goes last, so its presence means complete.
        Empty parts other than the commit are not written (most batches make no role calls).
        Returns table -> the name of its part."""
        return {name: self.write_part(name, key, tables[name], commit=name == COMMIT_TABLE)
                for name in BATCH_TABLES if name in tables and (tables[name].num_rows or name == COMMIT_TABLE)}

    def parts(self, table: str) -> dict[str, list[str]]:
        """key -> the names of its parts in ``table`` (one, but where a batch was written twice)."""
        if self._listed is not None and table in self._listed:
            return self._listed[table]
        folder = self.loc.child(table)
        found: dict[str, list[str]] = {}
        foreign = []
        for name in list_private(folder):
            parsed = _parsed(name)
            if parsed is None:
                foreign.append(name)
            else:
                found.setdefault(parsed[0], []).append(name)
        if foreign:
            _warn_foreign(folder, foreign)
        if self._listed is not None:
            self._listed[table] = found
        return found

    def committed_keys(self) -> set[str]:
        """The batches whose commit part verifies (each part that did is not checked again), each
        row once by its generation id: a batch holding an id an earlier batch (by key) committed is
        a copy, whatever its bytes (copied, or re-encoded under another key), and is skipped with a
        warning. Every part of a finished run copied so had its rows counted twice, n 5 -> 10. A
        batch redone for a failed row is taken back before it is done again, so runs of this code
        never commit an id twice."""
        if self._committed is not None:  # set inside ``unchanging`` only
            return set(self._committed)
        listed = self.parts(COMMIT_TABLE)
        unseen = [n for names in listed.values() for n in names if n not in self._commits]
        with ThreadPoolExecutor(max_workers=_READERS) as pool:
            for name, data in zip(unseen, pool.map(lambda n: self._trusted(COMMIT_TABLE, n), unseen)):
                if data is not None:
                    ids = read_parquet(pa.BufferReader(data), columns=["gen_id"]).column("gen_id")
                    self._commits[name] = frozenset(ids.to_pylist())
        keys: set[str] = set()
        owner: dict[str, str] = {}  # gen_id -> the first key (sorted) that committed it
        for key in sorted(listed):
            verified = [n for n in sorted(listed[key]) if n in self._commits]
            if not verified:
                continue
            ids = self._commits[verified[0]]
            first = next((owner[i] for i in ids if i in owner), None)
            if first is not None:
                skip(None, "run", self.loc.child(COMMIT_TABLE).url + f" batch {key}",
                     f"holds rows batch {first} committed (a copy)", "they are counted once")
                continue
            owner.update(dict.fromkeys(ids, key))
            keys.add(key)
        if self._listed is not None:
            self._committed = set(keys)
        return keys

    def _trusted(self, table: str, name: str) -> bytes | None:
        """A part's bytes if they can be used; else None, and the file skipped with a warning."""
        parsed = _parsed(name)
        assert parsed is not None, name
        folder = self.loc.child(table)
        data, why = trusted_bytes(folder, name, parsed[1])
        if data is None:
            skip(None, "run", folder.child(name).url, why,
                 "its rows are not used (a resume does its batch again)")
        return data

    def _read(self, table: str, names: list[str]) -> bytes | None:
        """The bytes of the first of a batch's parts in ``table`` that can be used."""
        for name in sorted(names):
            data = self._trusted(table, name)
            if data is not None:
                return data
        return None

    def prune(self, tables: Sequence[str], keep: set[str]) -> int:
        """Delete the parts of every batch of ``tables`` (the commit last) whose key is not in
        ``keep``: commits first, so a kill midway leaves uncommitted parts, never a commit
        without its data. Returns how many parts were removed."""
        self.check_owner()
        removed = 0
        for table in reversed(tables):
            for key, names in self.parts(table).items():
                if key not in keep:
                    for name in names:
                        self.part_file(table, name).remove()
                        removed += 1
        return removed

    def part_file(self, table: str, name: str) -> Location:
        return self.loc.child(table, name)

    def read_part(self, table: str, name: str, columns: list[str] | None = None) -> pa.Table | None:
        """One part (``columns`` of it), None if it cannot be used (skipped with a warning)."""
        data = self._read(table, [name])
        return None if data is None else read_parquet(pa.BufferReader(data), columns=columns)

    def read_table(self, table: str, columns: list[str] | None = None,
                   filters: list[tuple[str, str, object]] | None = None, keys: set[str] | None = None) -> pa.Table:
        """All committed rows of a table (an empty table with the schema if none; ``pa.table({})``
        for a table records.TABLES does not name), or those of the batches ``keys`` names;
        ``columns`` and ``filters`` (pyarrow's) keep the rest from ever being decoded. A filter on
        a part's model or task skips, by its footer, every part that holds none of the values
        asked for, and is not applied to one that holds only them (see ``_KEYED``): a read per
        model and task opens that model's and task's parts alone."""
        schema = TABLES.get(table)
        listed = self.parts(table)
        if table in TABLES:
            ordered = sorted(set(listed) & (self.committed_keys() if keys is None else keys))
        else:  # a table outside the batches' commit protocol: every part, or those ``keys`` names
            ordered = sorted(set(listed) if keys is None else set(listed) & keys)
        wanted = _keyed_filters(filters) if schema is not None else {}
        given = filters or []

        def read(key: str) -> pa.Table | None:
            values = self._keyed.get((table, key))
            if values is not None and _excluded(values, wanted):
                return None
            if values is None and wanted:  # the part's first read: its footer, then (if wanted) its rows
                values = self._remember(table, key, self.part_file(table, sorted(listed[key])[0]).parquet_metadata())
                if _excluded(values, wanted):
                    return None
            data = self._read(table, listed[key])
            if data is None:
                return None
            rest = tuple(i for i, t in enumerate(given) if values is None or not _holds(values, t))
            if not rest:
                return read_parquet(pa.BufferReader(data), columns=columns)
            # the part read whole, then filtered by an expression built once per read_table: a
            # filtered pq.read_table builds a dataset per part, 3x the time of a small part's read
            needed = None if columns is None else list(dict.fromkeys([*columns, *(given[i][0] for i in rest)]))
            found = read_parquet(pa.BufferReader(data), columns=needed).filter(expression(rest))
            return found if columns is None else found.select(columns)

        @cache
        def expression(rest: tuple[int, ...]) -> pc.Expression:  # by the filters' places: values may be lists
            return pq.filters_to_expression([given[i] for i in rest])

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
        listed = self.parts(table)

        def values(key: str) -> set[str]:
            known = self._keyed.get((table, key))
            if known is None:
                known = self._remember(table, key, self.part_file(table, sorted(listed[key])[0]).parquet_metadata())
            found = known[column]
            if found is not None:
                return set(found)
            return set(self.read_table(table, [column], keys={key}).column(column).unique().to_pylist())

        keys = sorted(set(listed) & self.committed_keys())
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
        listed = self.parts(table)
        keys = sorted(set(listed) & self.committed_keys())

        def picks(key: str) -> bool:
            data = self._read(table, listed[key])
            return data is not None and where(read_parquet(pa.BufferReader(data), columns=columns))

        with ThreadPoolExecutor(max_workers=_READERS) as pool:
            picked = list(pool.map(picks, keys))
        return {key for key, hit in zip(keys, picked) if hit}

    def write_part(self, table: str, key: str, data: pa.Table, commit: bool = False) -> str:
        """Write one part, as the readers accept it; a commit part only while this store's
        attempt owns the run. Returns its file name."""
        body = table_to_bytes(data)
        name = part_name(key, body)
        if commit:  # checked last thing before the write: the window for a stale owner is one PUT
            self.check_owner()
        write_private(self.loc.child(table), name, body)
        return name

    def write_costs(self, costs: pa.Table) -> str:
        return self.write_view("costs.parquet", table_to_bytes(costs))

    def read_table_file(self, name: str) -> pa.Table:
        data = self.read_view(name)
        if data is None:
            raise FileNotFoundError(self.loc.child(name).url)
        return read_parquet(pa.BufferReader(data))

    # --- views: what the run builds from its parts at its end, each kept as it wrote it ------
    def write_view(self, name: str, data: bytes) -> str:
        """Writes a view (metrics.json, leaderboard.md, costs.parquet); its sha256, which the
        manifest records under ``views``."""
        self.loc.child(name).write_bytes_atomic(data)
        return hashlib.sha256(data).hexdigest()

    def read_view(self, name: str) -> bytes | None:
        """A view as the run wrote it, None before it is written: its bytes must hash to the sha256
        the manifest records (a run from before views were recorded is read as it is), else the
        file was changed since and DataError says so: every reader then shows the same numbers,
        the parts' (an edited metrics.json had report and compare disagree)."""
        try:
            data = self.loc.child(name).read_bytes()
        except FileNotFoundError:
            return None
        recorded = ((self.read_json("manifest.json") or {}).get("views") or {}).get(name)
        if recorded is not None and hashlib.sha256(data).hexdigest() != recorded:
            raise ViewChanged(f"{self.loc.child(name).url} was changed after the run wrote it (its sha256 is not the "
                              "one manifest.json records): its numbers are not the run's; rebuild the views from "
                              f"the run's parts with `halluscope run CONFIG --run-id {self.run_id}`")
        return data

    # --- items -----------------------------------------------------------------------------
    def items_location(self, task: str) -> Location:
        return self.loc.child("items", task.replace("/", "__") + ".parquet")

    def read_items(self, task: str) -> pa.Table:
        return read_parquet(pa.BufferReader(self.items_location(task).read_bytes()))

    # --- json documents ----------------------------------------------------------------------
    def write_json(self, name: str, doc: object) -> None:
        self.loc.child(name).write_bytes_atomic(json_bytes(doc))

    def read_json(self, name: str) -> dict[str, Any] | None:
        """A JSON object the run keeps (manifest, progress, attempt), or None before it is written."""
        try:  # one request, not an existence check and a read: every commit reads attempt.json
            return json.loads(self.loc.child(name).read_bytes())
        except FileNotFoundError:
            return None

    def write_text(self, name: str, text: str) -> None:
        self.loc.child(name).write_bytes_atomic(text.encode())
