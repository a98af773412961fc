"""Filtered reads of a many-part run: FEWL's evidence read one (task, model) at a time.

A run of 10 models x 2 tasks x 25 batches (500 committed parts, 200,000 verdicts with ~100-byte
evidence) is written to a temporary folder; then each (task, model) is read with its filter, as
FEWL's metrics read it, through ``RunStore.read_table`` (which opens only the parts that footers
say hold that model and task), and as a store that opens every part and lets pyarrow's filter
drop the rows (what every filtered read did before). Both must return the same rows. Usage:

    python bench/filtered_reads.py [--models 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable

import pyarrow as pa

from halluscope import records
from halluscope.storage.fs import Location
from halluscope.storage.parquet import read_parquet
from halluscope.storage.run import RunStore

MODELS, TASKS, BATCHES, ROWS = 10, ("fewl/a", "fewl/b"), 25, 400
COLUMNS = ["gen_id", "evidence"]


def _table(schema: pa.Schema, columns: dict[str, list]) -> pa.Table:
    """``columns`` in the table's schema, the others null."""
    n = len(next(iter(columns.values())))
    return pa.table({f.name: pa.array(columns[f.name], f.type) if f.name in columns else pa.nulls(n, f.type)
                     for f in schema}, schema=schema)


def _write(store: RunStore, models: int) -> None:
    for m in range(models):
        for task in TASKS:
            for b in range(BATCHES):
                ids = [f"{m}-{task}-{b}-{i}" for i in range(ROWS)]
                common = {"gen_id": ids, "model": [f"model{m}"] * ROWS, "task": [task] * ROWS}
                evidence = [json.dumps({"candidates": [f"answer {i} of model {m}"] * 3}) for i in range(ROWS)]
                store.write_batch(f"{m:02d}{task[-1]}{b:02d}", {
                    "verdicts": _table(records.VERDICTS, {**common, "atom_id": ids, "evidence": evidence}),
                    "scores": _table(records.SCORES, common)})


def _every_part(store: RunStore) -> Callable[[list], pa.Table]:
    """The read that opens every committed part and filters its rows."""
    listed = store.parts("verdicts")
    names = [listed[key][0] for key in sorted(store.committed_keys())]

    def read(filters: list) -> pa.Table:
        parts = []
        for name in names:
            loc = store.part_file("verdicts", name)
            with loc.fs.open(loc.path, "rb") as f:
                parts.append(read_parquet(f, columns=COLUMNS, filters=filters))
        return pa.concat_tables(parts)
    return read


def _timed(read: Callable[[list], pa.Table], models: int) -> tuple[float, list[pa.Table]]:
    t0 = time.perf_counter()
    out = [read([("task", "==", task), ("model", "==", f"model{m}")]) for task in TASKS for m in range(models)]
    return time.perf_counter() - t0, out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--models", type=int, default=MODELS, help="models in the run (25 parts each)")
    p.add_argument("--json", action="store_true", help="print the results as one JSON line last")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = RunStore(Location.from_url(f"file://{tmp}"), "reads")
        _write(store, args.models)
        every_s, expected = _timed(_every_part(store), args.models)
        pruned_s, found = _timed(lambda filters: store.read_table("verdicts", COLUMNS, filters), args.models)
    if found != expected:
        sys.exit("filtered reads: the pruned reads' rows differ from those of every part read and filtered")
    reads, parts = len(TASKS) * args.models, args.models * len(TASKS) * BATCHES
    result = [{"name": "filtered_reads_seconds", "value": round(pruned_s, 2), "unit": "s",
               "baseline": f"the same {reads} reads of {parts} parts, each opening every part",
               "baseline_value": round(every_s, 2), "ratio": round(pruned_s / every_s, 3)}]
    for r in result:
        print(f"{r['name']}: {r['value']} {r['unit']} (baseline {r['baseline_value']}: {r['baseline']})")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
