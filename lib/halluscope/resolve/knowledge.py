"""The verifiers' knowledge a run's tasks use: built unloaded from the config (each actor loads what
its tasks use), and described for the manifest."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from pydantic import BaseModel

from halluscope.config.schema import StorageSpec
from halluscope.knowledge.base import Knowledge
from halluscope.sources import DataResolver
from halluscope.storage.fs import Location
from halluscope.storage.names import INDEX_CACHE, shared_url
from halluscope.task_registry import benchmark_of, benchmarks, get_task


def knowledge_for(resolver: DataResolver, storage: StorageSpec, clients: int,
                  options: Mapping[str, BaseModel]) -> Knowledge:
    """The verifiers' knowledge, unloaded: each actor loads what its tasks use, as their
    benchmarks' ``options`` name it. Passage indexes persist under <storage.root>/_cache/indexes,
    package and title indexes under data.cache_dir."""
    return Knowledge(resolver, Location.from_url(shared_url(storage.root, INDEX_CACHE), storage),
                     clients=clients, options=dict(options))


def knowledge_provenance(tasks: Iterable[str], kb: Knowledge) -> dict:
    """Provenance of the knowledge the run's ``tasks`` use, for the manifest, as each benchmark
    describes the sources its tasks name (``Benchmark.describe_knowledge``). Loading them here, in
    the driver, fails a bad source before any model starts and builds shared indexes once. An
    entry two benchmarks describe differently is kept for each (the second as ``<key> (<name>)``)."""
    needed: dict[str, set[str]] = defaultdict(set)
    for t in tasks:
        needed[benchmark_of(t).name].update(get_task(t).knowledge)
    out: dict = {}
    for name, kinds in needed.items():
        describe = benchmarks()[name].describe_knowledge
        if not kinds or describe is None:
            continue
        for key, entry in describe(kb.options_for(name), kb, kinds).items():
            out[key if out.get(key, entry) == entry else f"{key} ({name})"] = entry
    return out
