"""A run's totals computed the plain way, from whole tables: what the engine's per-model, part
by part aggregation must equal, and the tally a ledger prices, built from tables."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from halluscope.config.schema import ModelSpec, RunConfig
from halluscope.contract.metrics import MetricRecord
from halluscope.cost.ledger import CallTally
from halluscope.pipeline.aggregate import benchmark_metrics, comparisons, merged, tasks_by_benchmark


def every_metric(cfg: RunConfig, store, scores: pa.Table) -> list[MetricRecord]:
    """Every benchmark's metrics from one table of rows, in the order of the run's tasks.
    ``store``: what the hooks read besides the scores (``read_table``, ``read_items``)."""
    out: list[MetricRecord] = []
    for name, tasks in tasks_by_benchmark(cfg.tasks).items():
        out += merged(name, benchmark_metrics(name, tasks, scores, store.read_table, store, cfg.options_for(name)))
        out += comparisons(name, tasks, [scores], store, cfg.options_for(name))
    return out


def tally(models: Sequence[ModelSpec], generations: pa.Table, role_calls: pa.Table | None = None) -> CallTally:
    out = CallTally(models)
    out.add_generations(generations)
    if role_calls is not None:
        out.add_role_calls(role_calls)
    return out


def with_groups(benchmark: str, per_task: Sequence[dict]) -> list[dict]:
    """A benchmark's records (flat objects) with its groups' records the engine adds (HALOGEN's
    averages over tasks), as metrics.json holds them."""
    records = [MetricRecord.from_json(r) for r in per_task]
    return [r.as_json() for r in merged(benchmark, records)]
