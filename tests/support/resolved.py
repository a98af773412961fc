"""Resolved runs with some of their parts given, for tests that price or plan a config under a
table, options or cache of their own."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from halluscope.config.schema import RunConfig
from halluscope.cost.prices import PriceTable
from halluscope.pipeline.estimate import plan
from halluscope.pipeline.plan_view import Plan
from halluscope.pipeline.token_stats import TokenStats
from halluscope.records import GenerationIds
from halluscope.resolve.run import ResolvedRun
from halluscope.serving.throughput import PlanOptions
from halluscope.storage.fs import Location


def resolved(cfg: RunConfig, **parts: Any) -> ResolvedRun:
    """``ResolvedRun.of(cfg)`` with ``parts`` (its fields: prices, plan_options, cache, items...)
    in place of what it derives; a given cache is the only one looked at."""
    run = ResolvedRun.of(cfg, cache=parts["cache"]) if "cache" in parts else ResolvedRun.of(cfg)
    return replace(run, **parts)


def planned(cfg: RunConfig, prices: PriceTable | None, stats: TokenStats | None = None, *,
            options: PlanOptions | None = None, cache: Location | None = None,
            done: GenerationIds | None = None, **parts: Any) -> Plan:
    """The estimate of ``cfg`` priced by ``prices`` over ``options`` (the default options when
    None), the call cache looked in only when ``cache`` is given."""
    return plan(resolved(cfg, prices=prices, plan_options=options or PlanOptions(), cache=cache, **parts),
                stats, done=done)
