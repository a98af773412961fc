"""The tables and store a run's costs are read from: its price table, the estimate's options over
its throughput table, and its call cache's place. Read from the config alone."""

from __future__ import annotations

from pathlib import Path

from halluscope.config.schema import DEFAULT_PRICE_TABLE, RunConfig
from halluscope.cost.prices import PriceTable, load_prices
from halluscope.serving.throughput import PlanOptions, load_throughput
from halluscope.storage.fs import Location
from halluscope.storage.names import CALL_CACHE, shared_url


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
