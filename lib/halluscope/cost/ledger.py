"""The cost ledger of a run, from what was written: tokens per call, seconds per deployment.

Rows per (model, role, task, stage): generation by the models under test, and the abstain,
decompose and verify calls to the judge and extractor; a row per served deployment (stage
"serve": the GPU or CPU seconds it held); and the rows a caller adds (``extra_rows``: the run's
share of shared services' time, stage "shared", from ``halluscope.cost.shared``).

What prices a row (``usd``; ``note`` says why a row is 0 or unpriced):

- calls through ``backend: openai``: tokens at the API table's $/M tokens; unpriced (null)
  without a price for the model, unless a shared service serves the model: then its calls cost
  0 here, as the service's time is charged instead (a self-hosted endpoint bills hours, not tokens);
- calls to a model this run serves itself (scripted, hf, vllm): 0 here, its "serve" row carries
  the deployment's time; unpriced when no deployment time was recorded for it;
- recorded answers, and rows with no live call (cache hits only): 0;
- "serve" rows: resource-seconds at the per-GPU (per core for CPU) hour price.

A null ``usd`` is never read as 0: ``cost_record`` gives the run's total only when every row is
priced, and otherwise says how many rows are not and why.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from halluscope.config.schema import ModelSpec
from halluscope.contract.metrics import COSTS_TOTAL, MetricRecord
from halluscope.cost.prices import PriceTable
from halluscope.records import COSTS

# what the ledger reads of generations/ (never the prompts and responses)
LEDGER_COLUMNS = ["model", "task", "attempts", "cached", "error", "input_tokens", "output_tokens"]
_CALL_COUNTS = ("calls", "cached_calls", "failed_calls", "input_tokens", "output_tokens")
NO_PRICE_TABLE = "no price table (costs.price_table)"
IN_PROCESS = "a scripted stand-in answered in process: nothing deployed"


class CallTally:
    """Calls, cache hits, failures and tokens per (model, task, stage), summed part by part, so
    the ledger never holds a run's rows: generation by the live models under test (recorded
    generations cost this run nothing: only live models' rows are counted) and role calls."""

    def __init__(self, models: Sequence[ModelSpec]) -> None:
        self._live = frozenset(m.id for m in models if not m.replayed)
        self.acc: dict[tuple[str, str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))

    def counts_generations(self, model: str) -> bool:
        """Whether ``model``'s generations are counted (a live model's): the others need not be read."""
        return model in self._live

    def add_generations(self, generations: pa.Table) -> None:
        rows = generations.filter(pc.is_in(generations.column("model"), pa.array(sorted(self._live), pa.string())))
        if not rows.num_rows:
            return
        cached = rows.column("cached").fill_null(False)
        called = pc.invert(cached)
        zero = pa.scalar(0, pa.int64())
        flags = pa.table({
            "model": rows.column("model"), "task": rows.column("task"), "cached_calls": cached.cast(pa.int64()),
            "calls": called.cast(pa.int64()),
            "failed_calls": pc.and_(called, rows.column("error").is_valid()).cast(pa.int64()),
            **{k: pc.if_else(called, rows.column(k).cast(pa.int64()).fill_null(0), zero)
               for k in ("input_tokens", "output_tokens")}})
        self._add(flags.group_by(["model", "task"], use_threads=False).aggregate(
            [(k, "sum") for k in _CALL_COUNTS]), "model", stage="generate")

    def add_role_calls(self, role_calls: pa.Table) -> None:
        """One row per (generation, stage, role): summed by Arrow."""
        self._add(role_calls.group_by(["role_model", "task", "stage"], use_threads=False).aggregate(
            [(k, "sum") for k in _CALL_COUNTS]), "role_model")

    def _add(self, summed: pa.Table, model: str, stage: str | None = None) -> None:
        for r in summed.to_pylist():
            a = self.acc[(r[model], r["task"], stage or r["stage"])]
            for k in _CALL_COUNTS:
                a[k] += r[f"{k}_sum"]


def ledger(tally: CallTally, models: list[ModelSpec], deployments: list[dict], prices: PriceTable | None,
           extra_rows: Sequence[dict] | None = None) -> pa.Table:
    """The COSTS table of a run, from what a ``CallTally`` summed of its committed generations and
    role calls.

    ``extra_rows``: further rows in COSTS' shape (missing columns are null), appended as they are;
    a row may carry ``covers``, the ids of models whose call rows it prices (those rows get usd 0
    and a note naming it; ``covers`` is not written)."""
    specs = {m.id: m for m in models}
    extra = [dict(r) for r in extra_rows or ()]
    covered = {m: r["model"] for r in extra for m in r.pop("covers", ())}
    deployed = {d["model"] for d in deployments}
    acc = tally.acc
    rows = []
    for (model, task, stage), a in sorted(acc.items()):
        spec = specs[model]
        usd, note = _calls_usd(spec, a, prices, covered.get(model), model in deployed)
        rows.append({"model": model, "role": spec.role, "task": task, "stage": stage, "calls": a["calls"],
                     "cached_calls": a["cached_calls"], "failed_calls": a["failed_calls"],
                     "input_tokens": a["input_tokens"], "output_tokens": a["output_tokens"], "resource": None,
                     "resource_seconds": None, "usd": usd, "note": note})
    for d in deployments:
        usd = prices.hours_usd(d["resource"], d["resource_seconds"]) if prices else None
        note = None if usd is not None else (
            f"no price for resource '{d['resource']}' in the price table" if prices else NO_PRICE_TABLE)
        rows.append({"model": d["model"], "role": specs[d["model"]].role, "task": "*", "stage": "serve",
                     "calls": 0, "cached_calls": 0, "failed_calls": 0, "input_tokens": 0, "output_tokens": 0,
                     "resource": d["resource"], "resource_seconds": d["resource_seconds"], "usd": usd,
                     "note": note})
    rows += extra
    return pa.Table.from_pylist(rows, schema=COSTS)


def service_tokens_usd(spec: ModelSpec, prices: PriceTable | None, service: str, input_tokens: int,
                       output_tokens: int) -> tuple[float, str]:
    """A model listed under a shared service is priced by the service's time, unless the price
    table lists it per token: a hosted API is what it is, whatever service line names it."""
    usd = prices.tokens_usd(spec.api_model, input_tokens, output_tokens) if prices else None
    if usd is None:
        return 0.0, f"priced by the time of shared service '{service}' (stage shared)"
    return usd, f"a hosted API, priced per token although listed under shared service '{service}'"


def calls_usd(tally: CallTally, models: Sequence[ModelSpec], prices: PriceTable | None,
              services: Mapping[str, str]) -> float:
    """The dollars of the calls tallied so far, the unpriced left out: what a running run has
    spent on calls (its deployments' time is priced apart)."""
    specs = {m.id: m for m in models}
    return math.fsum(usd for (model, _, _), a in tally.acc.items()
                     for usd, _ in [_calls_usd(specs[model], a, prices, services.get(model), True)]
                     if usd is not None)


def _calls_usd(spec: ModelSpec, a: dict, prices: PriceTable | None, service: str | None,
               deployed: bool) -> tuple[float | None, str | None]:
    """The dollars of one (model, task, stage) row of calls, and why it is 0 or unpriced."""
    if service is not None:
        return service_tokens_usd(spec, prices, service, a["input_tokens"], a["output_tokens"])
    if spec.billing == "free" or a["calls"] == 0:
        return 0.0, None  # recorded answers and cache hits cost nothing
    if spec.billing == "in_process":
        return 0.0, IN_PROCESS
    if spec.billing == "deployment":
        if deployed:
            return 0.0, "priced by its deployment's time (stage serve)"
        return None, "served by this run, but no deployment time was recorded for it"
    if prices is None:
        return None, NO_PRICE_TABLE
    usd = prices.tokens_usd(spec.api_model, a["input_tokens"], a["output_tokens"])
    return usd, None if usd is not None else f"no price for API model '{spec.api_model}' in the price table"


def total_usd(costs: pa.Table) -> float | None:
    """Sum of the priced rows alone; None when no row is priced.

    A lower bound wherever a row is unpriced (usd null), never the run's cost by itself:
    ``cost_record`` says whether it is complete."""
    values = [v for v in costs.column("usd").to_pylist() if v is not None]
    return math.fsum(values) if values else None


def unpriced(costs: pa.Table) -> list[str]:
    """Why rows are unpriced, one "model (role) stage: why" per distinct reason, sorted."""
    notes = costs.column("note").to_pylist() if "note" in costs.column_names else [None] * costs.num_rows
    return sorted({f"{r['model']} ({r['role']}) {r['stage']}: {note or 'no price'}"
                   for r, note in zip(costs.select(["model", "role", "stage", "usd"]).to_pylist(), notes)
                   if r["usd"] is None})


def cost_record(costs: pa.Table) -> MetricRecord:
    """The run's total, as the metrics.json record with task "costs/total" (of no benchmark).

    ``usd`` is the run's cost only when every row is priced (``complete``); otherwise it is None,
    ``usd_priced`` sums the priced rows, ``unpriced_rows`` counts the others and ``unpriced``
    says why (one entry per distinct model, role, stage and reason)."""
    usd = costs.column("usd").to_pylist()
    priced = math.fsum(v for v in usd if v is not None)
    missing = sum(v is None for v in usd)
    return MetricRecord("*", COSTS_TOTAL, values={
        "aggregate": True, "usd": None if missing else priced, "complete": not missing, "usd_priced": priced,
        "unpriced_rows": missing, "unpriced": unpriced(costs), "calls": sum(costs.column("calls").to_pylist()),
        "input_tokens": sum(costs.column("input_tokens").to_pylist()),
        "output_tokens": sum(costs.column("output_tokens").to_pylist())})
