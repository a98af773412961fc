"""What a run derives from its config, once, in the driver, and hands to every step after it: the
fingerprint that guards a resume, the price table, the estimate's options over the throughput
table, the call cache's place, the verifiers' knowledge and the run's one item source (each
benchmark's options are parsed once by the config itself, ``options_for``)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from halluscope.config.schema import DEFAULT_PRICE_TABLE, RunConfig
from halluscope.cost.prices import PriceTable, load_prices
from halluscope.knowledge.base import Knowledge
from halluscope.pipeline.workset import ItemSource, item_source, resolver_for
from halluscope.serving.throughput import PlanOptions, load_throughput
from halluscope.storage.fs import Location
from halluscope.storage.names import CALL_CACHE, INDEX_CACHE, shared_url
from halluscope.task_registry import benchmark_of, benchmarks, get_task


@dataclass(frozen=True)
class ResolvedRun:
    cfg: RunConfig
    fingerprint: str
    prices: PriceTable | None
    plan_options: PlanOptions
    cache: Location | None  # the call cache; None when it is off
    knowledge: Knowledge  # unloaded: each actor loads what its tasks use
    items: ItemSource  # each source loaded at its first use: the estimate's, the plan's, the workers'

    @classmethod
    def of(cls, cfg: RunConfig) -> ResolvedRun:
        return cls(cfg, cfg.fingerprint(), price_table(cfg), plan_options(cfg), cache_location(cfg), knowledge_for(cfg),
                   item_source(cfg))


def price_table(cfg: RunConfig) -> PriceTable | None:
    table = cfg.costs.price_table
    if table is None or (table == DEFAULT_PRICE_TABLE and not Path(table).exists()):
        return None
    return load_prices(table)


def plan_options(cfg: RunConfig, throughput_table: str | None = None) -> PlanOptions:
    """The estimate's options over ``throughput_table`` (`halluscope plan --throughput`), else the
    config's ``costs.throughput_table``, else the table found in the checkout."""
    path = throughput_table or cfg.costs.throughput_table
    return PlanOptions(table=load_throughput(path)) if path else PlanOptions()


def cache_location(cfg: RunConfig) -> Location | None:
    if not cfg.cache.enabled:
        return None
    return Location.from_url(cfg.cache.root or shared_url(cfg.storage.root, CALL_CACHE), cfg.storage)


def knowledge_for(cfg: RunConfig) -> Knowledge:
    """The verifiers' knowledge, unloaded: each actor loads what its tasks use, as their
    benchmarks' options name it. Passage indexes persist under <storage.root>/_cache/indexes,
    package and title indexes under data.cache_dir."""
    named = dict.fromkeys([*cfg.benchmarks, *(benchmark_of(t).name for t in cfg.tasks)])
    return Knowledge(resolver_for(cfg), Location.from_url(shared_url(cfg.storage.root, INDEX_CACHE), cfg.storage),
                     clients=cfg.concurrency.verify_actors, options={b: cfg.options_for(b) for b in named})


def knowledge_provenance(cfg: RunConfig, kb: Knowledge) -> dict:
    """Provenance of the knowledge the run's tasks use, for the manifest, as each benchmark
    describes the sources its tasks name (``Benchmark.describe_knowledge``). Loading them here, in
    the driver, fails a bad source before any model starts and builds shared indexes once. An
    entry two benchmarks describe differently is kept for each (the second as ``<key> (<name>)``)."""
    needed: dict[str, set[str]] = defaultdict(set)
    for t in cfg.tasks:
        needed[benchmark_of(t).name].update(get_task(t).knowledge)
    out: dict = {}
    for name, kinds in needed.items():
        describe = benchmarks()[name].describe_knowledge
        if not kinds or describe is None:
            continue
        for key, entry in describe(kb.options_for(name), kb, kinds).items():
            out[key if out.get(key, entry) == entry else f"{key} ({name})"] = entry
    return out
