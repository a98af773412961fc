"""What a run derives from its config, once, in the driver, and hands to every phase after it: the
fingerprint that guards a resume, the price table, the estimate's options over the throughput
table, the call cache's place, the storage root, each benchmark's parsed options, the models by
id, the data resolver, the verifiers' knowledge, the run's one item source and its cluster
layout. The phases read these rather than derive them again from the config."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from types import EllipsisType

from pydantic import BaseModel

from halluscope.config.schema import ModelSpec, RunConfig
from halluscope.cost.prices import PriceTable
from halluscope.knowledge.base import Knowledge
from halluscope.resolve.cluster import layout
from halluscope.resolve.items import ItemSource, item_source, models_under_test, resolver_for
from halluscope.resolve.knowledge import knowledge_for
from halluscope.resolve.nodes import Layout
from halluscope.resolve.tables import cache_location, plan_options, price_table
from halluscope.serving.throughput import PlanOptions
from halluscope.sources import DataResolver
from halluscope.storage.fs import Location
from halluscope.task_registry import benchmark_of


@dataclass(frozen=True)
class ResolvedRun:
    """A run's config and what it derives from it, built once by whoever runs or plans it
    (``of``); the cheap parts at once, the knowledge, storage root and layout at first use."""

    cfg: RunConfig  # read-only: its fields, for what is not derived here
    fingerprint: str
    prices: PriceTable | None
    plan_options: PlanOptions
    cache: Location | None  # the call cache; None when it is off
    options: Mapping[str, BaseModel]  # benchmark -> its validated options, the run's tasks' benchmarks
    specs: Mapping[str, ModelSpec]  # every model of the run by id
    tested: list[ModelSpec]  # the models under test (role 'test'), in config order
    resolver: DataResolver
    items: ItemSource  # each source loaded at its first use: the estimate's, the plan's, the workers'

    @classmethod
    def of(cls, cfg: RunConfig, throughput_table: str | None = None,
           cache: Location | None | EllipsisType = ...) -> ResolvedRun:
        """``throughput_table``: the estimate's table instead of the config's (`plan --throughput`);
        ``cache``: the call cache instead of the config's (None: not looked in)."""
        named = dict.fromkeys([*cfg.benchmarks, *(benchmark_of(t).name for t in cfg.tasks)])
        options = {b: cfg.options_for(b) for b in named}
        resolver = resolver_for(cfg)
        return cls(cfg, cfg.fingerprint(), price_table(cfg), plan_options(cfg, throughput_table),
                   cache_location(cfg) if cache is ... else cache, options, {m.id: m for m in cfg.models},
                   models_under_test(cfg), resolver, item_source(cfg, resolver))

    @cached_property
    def knowledge(self) -> Knowledge:
        """The verifiers' knowledge, unloaded: each actor loads what its tasks use. Built at its
        first use: a plan needs none (nor the storage credentials its index cache asks for)."""
        cfg = self.cfg
        return knowledge_for(self.resolver, cfg.storage, cfg.concurrency.verify_actors, self.options)

    @cached_property
    def root(self) -> Location:
        """``storage.root``, where the run's store and the shared caches are."""
        return Location.from_url(self.cfg.storage.root, self.cfg.storage)

    @cached_property
    def _nodes(self) -> Layout | None:
        return layout(self.cfg)

    def layout(self) -> Layout | None:
        """The nodes ``cluster.nodes`` describes, the service's and the roles' replicas placed
        (``cluster.layout``), or None; a fresh copy each call: the waves and the estimate each
        place their models on their own."""
        nodes = self._nodes
        return None if nodes is None else nodes.copy()

    def options_for(self, benchmark: str) -> BaseModel:
        """``benchmarks.<benchmark>``'s validated options (its defaults when absent)."""
        found = self.options.get(benchmark)
        return found if found is not None else self.cfg.options_for(benchmark)
