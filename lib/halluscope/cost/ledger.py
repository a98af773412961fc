"""The cost ledger of a run, from what was written: tokens per call, seconds per deployment.

Rows per (model, role, task, stage): generation by the models under test, and the abstain,
decompose and verify calls to the judge and extractor. Token totals are sums over the recorded calls; dollars are
tokens priced by the API table, plus deployment seconds priced per GPU (or CPU core) hour.
Calls answered from the cache cost nothing and are counted apart.
"""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa
import pyarrow.compute as pc

from halluscope.config import ModelSpec
from halluscope.cost.prices import PriceTable
from halluscope.records import COSTS

# what the ledger reads of generations/ (never the prompts and responses)
LEDGER_COLUMNS = ["model", "task", "attempts", "cached", "error", "input_tokens", "output_tokens"]
_CALL_COUNTS = ("calls", "cached_calls", "failed_calls", "input_tokens", "output_tokens")


def api_name(spec: ModelSpec) -> str:
    return getattr(spec.params, "model", None) or spec.id


def ledger(generations: pa.Table, models: list[ModelSpec], deployments: list[dict],
           prices: PriceTable | None, role_calls: pa.Table | None = None) -> pa.Table:
    specs = {m.id: m for m in models}
    acc: dict[tuple[str, str, str], dict] = defaultdict(lambda: defaultdict(int))
    # recorded generations cost this run nothing: only live models' rows are read
    live = pa.array([m for m, spec in specs.items() if spec.backend != "replay"], pa.string())
    for r in generations.filter(pc.is_in(generations.column("model"), live)).select(LEDGER_COLUMNS).to_pylist():
        a = acc[(r["model"], r["task"], "generate")]
        if r["cached"]:
            a["cached_calls"] += 1
            continue
        a["calls"] += 1
        a["failed_calls"] += r["error"] is not None
        a["input_tokens"] += r["input_tokens"] or 0
        a["output_tokens"] += r["output_tokens"] or 0
    if role_calls is not None:  # one row per (generation, stage, role): summed by Arrow
        summed = role_calls.group_by(["role_model", "task", "stage"], use_threads=False).aggregate(
            [(k, "sum") for k in _CALL_COUNTS])
        for r in summed.to_pylist():
            a = acc[(r["role_model"], r["task"], r["stage"])]
            for k in _CALL_COUNTS:
                a[k] += r[f"{k}_sum"]
    rows = []
    for (model, task, stage), a in sorted(acc.items()):
        spec = specs[model]
        usd = 0.0 if spec.backend == "recorded" else (
            prices.tokens_usd(api_name(spec), a["input_tokens"], a["output_tokens"])
            if prices and spec.backend == "openai" else None)
        rows.append({"model": model, "role": spec.role, "task": task, "stage": stage, "calls": a["calls"],
                     "cached_calls": a["cached_calls"], "failed_calls": a["failed_calls"],
                     "input_tokens": a["input_tokens"], "output_tokens": a["output_tokens"], "resource": None,
                     "resource_seconds": None, "usd": usd})
    for d in deployments:
        usd = prices.hours_usd(d["resource"], d["resource_seconds"]) if prices else None
        rows.append({"model": d["model"], "role": specs[d["model"]].role, "task": "*", "stage": "serve",
                     "calls": 0, "cached_calls": 0, "failed_calls": 0, "input_tokens": 0, "output_tokens": 0,
                     "resource": d["resource"], "resource_seconds": d["resource_seconds"], "usd": usd})
    return pa.Table.from_pylist(rows, schema=COSTS)


def total_usd(costs: pa.Table) -> float | None:
    """Sum of priced rows; None when nothing could be priced."""
    values = [v for v in costs.column("usd").to_pylist() if v is not None]
    return sum(values) if values else None


def cost_record(costs: pa.Table) -> dict:
    """The run's total, as the metrics.json record with task "costs/total"."""
    return {"model": "*", "task": "costs/total", "aggregate": True, "usd": total_usd(costs),
            "calls": sum(costs.column("calls").to_pylist()),
            "input_tokens": sum(costs.column("input_tokens").to_pylist()),
            "output_tokens": sum(costs.column("output_tokens").to_pylist())}
