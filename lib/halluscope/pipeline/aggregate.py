"""What a run's committed parts add up to: metrics, the ledger's call counts, failures and
missing items, read one model under test at a time.

The driver never holds a run's rows. Each model's parts (found from their footers,
``RunStore.parts_by``) are read, counted, tallied for the ledger and handed to the benchmarks
whose metrics are per model, then dropped: peak memory is that of the largest model's rows,
however many models a run has. A benchmark whose metrics compare models
(``Benchmark.metrics_per_model`` False) is handed its own tasks' rows at once. The records its
calls return are merged, and its groups' records built, by the aggregation each figure declares
(``contract.metrics.Figure``), so no benchmark merges its own.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel

from halluscope.config.schema import ModelSpec
from halluscope.contract.benchmark import MetricInputs
from halluscope.contract.metrics import Figure, MetricRecord
from halluscope.cost.ledger import LEDGER_COLUMNS, CallTally
from halluscope.errors import RunError
from halluscope.records import MISSING
from halluscope.storage.run import RunStore
from halluscope.task_registry import benchmark_of, benchmarks


@dataclass
class RowCounts:
    """Scored, failed and missing generations per model, and failures by error: what a run's
    verdict on itself reads, counted part by part."""

    kinds: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))  # model -> kind -> n
    errors: Counter[str] = field(default_factory=Counter)  # error text -> failed generations
    missing: Counter[str] = field(default_factory=Counter)  # "model/task" -> items with no recorded response

    def add(self, scores: pa.Table) -> None:
        error = scores.column("error")
        kind = pc.if_else(pc.is_null(error), "scored", pc.if_else(pc.equal(error, MISSING), "missing", "failed"))
        for r in count_rows(pa.table({"model": scores.column("model"), "task": scores.column("task"), "kind": kind}),
                         ["model", "task", "kind"]):
            self.kinds[r["model"]][r["kind"]] += r["n"]
            if r["kind"] == "missing":
                self.missing[f"{r['model']}/{r['task']}"] += r["n"]
        self.errors.update({r["error"]: r["n"] for r in count_rows(scores.filter(pc.equal(kind, "failed")), ["error"])})

    def failure(self, max_error_fraction: float) -> str | None:
        """Why a run that went through has no result to stand on: a model under test with no
        scored generation (every call failed, or none of its items is in its file), or more
        failed generations than ``max_error_fraction`` (items with no recorded response are not
        failures)."""
        errors = self.errors
        # ties by the error's text: which one is named must not depend on the order parts were read in
        common = f"; most common error: {min(errors, key=lambda e: (-errors[e], e))!r}" if errors else ""
        empty = [f"'{m}' ({c['failed']} failed, {c['missing']} with no recorded response)"
                 for m, c in sorted(self.kinds.items()) if not c["scored"]]
        if empty:
            return f"no generation could be scored for model {', '.join(empty)}{common}"
        failed = sum(errors.values())
        tried = failed + sum(c["scored"] for c in self.kinds.values())
        if failed > max_error_fraction * tried:
            return (f"{failed} of {tried} generations failed ({failed / tried:.0%}, more than max_error_fraction "
                    f"{max_error_fraction:g}){common}")
        return None


@dataclass
class Totals:
    metrics: list[MetricRecord]  # every benchmark's, in the order of the run's tasks
    counts: RowCounts
    calls: CallTally


def score_columns(tasks: Sequence[str]) -> list[str] | None:
    """The ``scores`` columns the aggregation reads: those the run's benchmarks name, with those
    ``RowCounts`` counts by; every column (None) if one names none."""
    wanted = [benchmark_of(t).score_columns for t in tasks]
    if any(w is None for w in wanted):
        return None
    compared = {c for t in tasks for c in benchmark_of(t).compare_columns}
    return sorted({"model", "task", "error", *compared, *(c for w in wanted for c in w or ())})


def tasks_by_benchmark(tasks: Sequence[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for t in tasks:
        out[benchmark_of(t).name].append(t)
    return out


def _own(tasks: list[str], scores: pa.Table) -> pa.Table:
    """The rows of ``tasks`` (a filter copies every column, prompts and atoms: not done when the
    benchmark has every row)."""
    mine = pc.is_in(scores.column("task"), pa.array(tasks, pa.string()))
    return scores if pc.all(mine).as_py() is not False else scores.filter(mine)


def benchmark_metrics(name: str, tasks: list[str], scores: pa.Table, read_table: Callable[..., pa.Table],
                      store: RunStore, options: BaseModel) -> list[MetricRecord]:
    """One call of a benchmark's metrics hook on ``scores`` (rows of any tasks: its own are
    handed over), with the benchmark's ``options``."""
    inputs = MetricInputs(tasks, _own(tasks, scores), read_table, store.read_items, options)
    return _checked(name, benchmark_of(tasks[0]).metrics(inputs))


def comparisons(name: str, tasks: list[str], compared: list[pa.Table], store: RunStore,
                options: BaseModel) -> list[MetricRecord]:
    """The benchmark's compare hook on the compared columns of every model's rows of its tasks."""
    compare = benchmark_of(tasks[0]).compare
    if compare is None or not compared:
        return []
    inputs = MetricInputs(tasks, pa.concat_tables(compared), store.read_table, store.read_items, options)
    return [replace(r, benchmark=r.benchmark or name) for r in _checked(name, compare(inputs))]


def merged(name: str, records: list[MetricRecord]) -> list[MetricRecord]:
    """The benchmark's records of the run from those its metrics calls returned, each tagged with
    it: records of one model, task and labels (their values but the declared figures) are one,
    where the first came, their figures merged by each one's aggregation (RAGTruth's corpus
    tables, which every per-model call repeats); then its groups' records, per model in id order."""
    bench = benchmarks()[name]
    figures = {f.key: f for f in bench.figures}
    alike: dict[str, list[MetricRecord]] = {}
    for r in _checked(name, records):
        tagged = r if r.benchmark is not None else replace(r, benchmark=name)
        labels = {k: v for k, v in tagged.values.items() if k not in figures}
        key = json.dumps([tagged.model, tagged.task, tagged.benchmark, labels], sort_keys=True, default=asdict)
        alike.setdefault(key, []).append(tagged)
    out = [same[0] if len(same) == 1 else replace(same[0], values={**same[0].values, **_figures(name, figures, same)})
           for same in alike.values()]
    merging = {k: f for k, f in figures.items() if f.aggregation is not None}
    for model in sorted({r.model for r in out}):
        mine = [r for r in out if r.model == model]
        for group in bench.groups:
            members = [r for r in mine if r.task in group.tasks]
            if members:
                out.append(MetricRecord(model, group.task, name, {**group.labels, "aggregate": True,
                                                                  "n_tasks": len(members),
                                                                  **_figures(name, merging, members)}))
    return out


def _figures(name: str, figures: dict[str, Figure], records: list[MetricRecord]) -> dict[str, object]:
    """Each of ``figures`` that a record holds, merged over ``records`` by its aggregation."""
    out = {}
    for key, figure in figures.items():
        if any(key in r.values for r in records):
            counts = [r.values.get(figure.over) for r in records] if figure.over is not None else []
            try:
                out[key] = figure.merge([r.values.get(key) for r in records], counts)
            except ValueError as e:
                raise RunError(f"benchmark '{name}': {e}") from None
    return out


def _checked(name: str, records: Sequence[object]) -> list[MetricRecord]:
    out = []
    for r in records:
        if not isinstance(r, MetricRecord):  # a plug-in's dicts would fail far from here
            raise RunError(f"benchmark '{name}': its metrics hook returned a {type(r).__name__}, not a "
                           "halluscope.contract.metrics.MetricRecord")
        out.append(r)
    return out


def aggregate(store: RunStore, tasks: Sequence[str], models: Sequence[ModelSpec],
              options_for: Callable[[str], BaseModel]) -> Totals:
    """Metrics, counts and the ledger's call tally of everything committed, a model at a time:
    the run's ``tasks`` and ``models``, each benchmark's metrics given its options (``options_for``)."""
    with store.unchanging():
        return _aggregate(store, tasks, models, options_for)


def _aggregate(store: RunStore, tasks: Sequence[str], models: Sequence[ModelSpec],
               options_for: Callable[[str], BaseModel]) -> Totals:
    columns = score_columns(tasks)
    groups = tasks_by_benchmark(tasks)
    per_model = [n for n, tasks in groups.items() if benchmark_of(tasks[0]).metrics_per_model]
    records: dict[str, list[MetricRecord]] = {n: [] for n in groups}
    compared: dict[str, list[pa.Table]] = {n: [] for n in groups}  # each model's rows, the compared columns
    counts, calls = RowCounts(), CallTally(models)
    parts = store.parts_by("model")
    listed = Counter(k for keys in parts.values() for k in keys)
    for model, keys in sorted(parts.items()):
        # a part of several models (Evaluate writes one per model and task) is read for each, filtered
        only = [("model", "==", model)] if any(listed[k] > 1 for k in keys) else None
        read = partial(_read, store, keys=keys, only=only)
        scores = read("scores", columns)
        counts.add(scores)
        if calls.counts_generations(model):
            calls.add_generations(read("generations", LEDGER_COLUMNS))
        calls.add_role_calls(read("role_calls"))
        for name in per_model:
            records[name] += benchmark_metrics(name, groups[name], scores, read, store, options_for(name))
            if benchmark_of(groups[name][0]).compare is not None:
                compared[name].append(_own(groups[name], scores).select(
                    ["model", "task", *benchmark_of(groups[name][0]).compare_columns]))
        del scores
    for name, tasks in groups.items():
        if name not in per_model:
            scores = store.read_table("scores", columns, filters=[("task", "in", tasks)])
            records[name] = benchmark_metrics(name, tasks, scores, store.read_table, store, options_for(name))
            compared[name] = [scores]
    metrics: list[MetricRecord] = []
    for name, group in groups.items():
        metrics += [*merged(name, records[name]),
                    *comparisons(name, group, compared[name], store, options_for(name))]
    return Totals(metrics, counts, calls)


def _read(store: RunStore, table: str, columns: list[str] | None = None, filters: list | None = None,
          keys: set[str] | None = None, only: list | None = None) -> pa.Table:
    """``RunStore.read_table`` of the parts ``keys`` names, rows also filtered by ``only``."""
    return store.read_table(table, columns, filters=[*(filters or []), *(only or [])] or None, keys=keys)


def count_rows(table: pa.Table, keys: list[str]) -> list[dict]:
    """Rows per distinct ``keys`` (as ``n``), counted by Arrow: a part has a row per generation."""
    counted = table.select(keys).group_by(keys, use_threads=False).aggregate([([], "count_all")])
    return counted.rename_columns(["n" if c == "count_all" else c for c in counted.column_names]).to_pylist()
