"""The layout of a run and its commit protocol.

A run is a folder ``<root>/<run_id>/``::

    manifest.json        config, code version, data hashes, rule/verifier versions, status
    items/<task>.parquet the test items, written once
    <table>/part-<key>.parquet   for table in generations, atoms, verdicts, scores
    quarantine/part-<key>.parquet  input rows that could not be used, with the reason
    metrics.json, leaderboard.md

The pipeline writes every batch as one part per table under the same key, the ``scores`` part
last. A batch is committed when its scores part exists; parts of any other key are leftovers of a
killed run and are ignored by readers and removed before a resume. Every object is written
atomically (see ``Location.write_bytes_atomic``).
"""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq

from halluscope.records import TABLES
from halluscope.storage.fs import Location

COMMIT_TABLE = "scores"
PART_PREFIX = "part-"


def table_to_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


def _part_name(key: str) -> str:
    return f"{PART_PREFIX}{key}.parquet"


def _part_key(name: str) -> str | None:
    if name.startswith(PART_PREFIX) and name.endswith(".parquet"):
        return name[len(PART_PREFIX):-len(".parquet")]
    return None


class RunStore:
    """Reads and writes one run folder; picklable (Ray workers write parts directly)."""

    def __init__(self, root: Location, run_id: str) -> None:
        self.run_id = run_id
        self.loc = root.child(run_id)

    # --- parts -----------------------------------------------------------------------------
    def write_batch(self, key: str, tables: dict[str, pa.Table]) -> None:
        """Write one batch's parts; the commit table goes last, so its presence means complete.
        Empty parts other than the commit are not written (most batches make no role calls)."""
        for name in sorted(tables, key=lambda n: n == COMMIT_TABLE):
            if tables[name].num_rows == 0 and name != COMMIT_TABLE:
                continue
            self.loc.child(name, _part_name(key)).write_bytes_atomic(table_to_bytes(tables[name]))

    def part_keys(self, table: str) -> set[str]:
        return {k for k in map(_part_key, self.loc.child(table).list_names()) if k}

    def committed_keys(self) -> set[str]:
        return self.part_keys(COMMIT_TABLE)

    def remove_uncommitted(self) -> int:
        """Delete parts of batches that never committed; returns how many were removed."""
        committed = self.committed_keys()
        removed = 0
        for table in TABLES:
            for key in self.part_keys(table) - committed:
                self.loc.child(table, _part_name(key)).remove()
                removed += 1
        return removed

    def read_table(self, table: str, columns: list[str] | None = None,
                   filters: list[tuple[str, str, object]] | None = None) -> pa.Table:
        """All committed rows of a table (an empty table with the schema if none); ``columns`` and
        ``filters`` (pyarrow's) keep the rest from ever being decoded."""
        schema = TABLES.get(table)
        keys = sorted(self.part_keys(table) & self.committed_keys()) if table in TABLES \
            else sorted(self.part_keys(table))
        parts = []
        for key in keys:
            loc = self.loc.child(table, _part_name(key))
            with loc.fs.open(loc.path, "rb") as f:
                parts.append(pq.read_table(f, columns=columns, filters=filters))
        if not parts:
            if schema is None:
                return pa.table({})
            return schema.empty_table().select(columns) if columns else schema.empty_table()
        return pa.concat_tables(parts, promote_options="default")

    def write_part(self, table: str, key: str, data: pa.Table) -> None:
        self.loc.child(table, _part_name(key)).write_bytes_atomic(table_to_bytes(data))

    def write_costs(self, costs: pa.Table) -> None:
        self.loc.child("costs.parquet").write_bytes_atomic(table_to_bytes(costs))

    def read_table_file(self, name: str) -> pa.Table:
        loc = self.loc.child(name)
        with loc.fs.open(loc.path, "rb") as f:
            return pq.read_table(f)

    # --- items -----------------------------------------------------------------------------
    def items_location(self, task: str) -> Location:
        return self.loc.child("items", task.replace("/", "__") + ".parquet")

    def read_items(self, task: str) -> pa.Table:
        loc = self.items_location(task)
        with loc.fs.open(loc.path, "rb") as f:
            return pq.read_table(f)

    # --- json documents ----------------------------------------------------------------------
    def write_json(self, name: str, doc: object) -> None:
        self.loc.child(name).write_bytes_atomic(json.dumps(doc, indent=2, sort_keys=True, default=str).encode())

    def read_json(self, name: str) -> object | None:
        loc = self.loc.child(name)
        return json.loads(loc.read_bytes()) if loc.exists() else None

    def write_text(self, name: str, text: str) -> None:
        self.loc.child(name).write_bytes_atomic(text.encode())
