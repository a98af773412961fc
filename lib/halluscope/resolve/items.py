"""Where a run's items come from: the models under test, the data resolver, each (task, model)'s
test sets and each task's options, gathered in the run's one ``ItemSource``. Read from the config
alone, so the estimate, the plan and the workers load the same items."""

from __future__ import annotations

from pydantic import BaseModel

from halluscope.config.schema import ModelSpec, RunConfig
from halluscope.contract.task import Item, LoadedItems
from halluscope.sources import DataResolver
from halluscope.storage.fs import Location
from halluscope.task_registry import benchmark_of, get_task


def models_under_test(cfg: RunConfig) -> list[ModelSpec]:
    """Judges and extractors serve the verifiers; only role 'test' models are evaluated."""
    return [m for m in cfg.models if m.role == "test"]


def resolver_for(cfg: RunConfig) -> DataResolver:
    return DataResolver(cfg.data.dir, cfg.data.cache_dir, cfg.data.download)


def testset_locations(cfg: RunConfig) -> dict[tuple[str, str], tuple[Location, ...]]:
    """(task, model under test) -> the test sets its items come from (none for released data)."""
    return {(task, m.id): tuple(Location.from_url(u, cfg.storage) for u in cfg.testset_uris(task, m.id))
            for task in cfg.testsets for m in models_under_test(cfg)}


def task_options(cfg: RunConfig) -> dict[str, BaseModel]:
    """task -> its benchmark's validated options, as the workers receive them."""
    return {t: cfg.options_for(benchmark_of(t).name) for t in cfg.tasks}


class ItemSource:
    """A run's items per (task, model under test): the model's test sets for the task, else the
    task's released files or the files its benchmark's options name; the run's item limit
    applied. One per run (``ResolvedRun.items``): the loader of the run's plan, of its cost
    estimate and, shipped with what it loaded, of its workers, so the three read the same items
    of a (task, model), each source loaded once. A plain class (see ``workset.Expansion``)."""

    def __init__(self, resolver: DataResolver, limit: int | None,
                 testsets: dict[tuple[str, str], tuple[Location, ...]], options: dict[str, BaseModel]) -> None:
        self.resolver = resolver
        self.limit = limit
        self.testsets = testsets  # testset_locations
        self.options = options  # task -> its benchmark's validated options
        # (task, test set urls) -> its items, as loaded at the source's first use
        self.loaded: dict[tuple[str, tuple[str, ...]], LoadedItems] = {}

    def source(self, task: str, model: str) -> tuple[tuple[str, tuple[str, ...]], LoadedItems]:
        """The source of (task, model): its key (task, test set urls), shared by the models that
        read it, and all its items, loaded at its first use."""
        sets = self.testsets.get((task, model), ())
        key = (task, tuple(t.url for t in sets))
        if key not in self.loaded:
            self.loaded[key] = get_task(task).load_items(self.resolver, sets, self.options[task])
        return key, self.loaded[key]

    def item(self, task: str, model: str, item_id: str) -> Item:
        """The item a row of (task, model) names: rows carry item ids, the workers hold the items."""
        found = self.source(task, model)[1].by_id.get(item_id)
        if found is None:
            raise KeyError(f"task '{task}', model '{model}': no item '{item_id}' among its items")
        return found

    def limited(self, items: list[Item]) -> list[Item]:
        return items[:self.limit] if self.limit else items

    def items(self, task: str, model: str) -> list[Item]:
        """The items (task, model) generates in the run."""
        return self.limited(self.source(task, model)[1].items)


def item_source(cfg: RunConfig, resolver: DataResolver | None = None) -> ItemSource:
    return ItemSource(resolver or resolver_for(cfg), cfg.limits.max_items_per_task, testset_locations(cfg),
                      task_options(cfg))
