"""A run resolves its config once: one item source whose every source is loaded once, however many
phases read items (the budget's estimate, the plan, the workers), and one parse of each
benchmark's options."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import typing
from collections import Counter

from tests.unit.test_cli import _replay_config

from halluscope.cli import main
from halluscope.config.schema import RunConfig
from halluscope.contract.benchmark import Benchmark
from halluscope.resolve import items
from halluscope.task_registry import get_task


def test_a_run_has_one_item_source_loads_each_source_once_and_parses_options_once(tmp_path, monkeypatch):
    sources, loads, parses = [], Counter(), Counter()
    real_init, real_parse = items.ItemSource.__init__, Benchmark.parse_options
    task = type(get_task("halogen/code"))
    real_load = task.load_items

    def init(self, *args, **kwargs):
        sources.append(self)
        real_init(self, *args, **kwargs)

    def load(self, resolver, testsets, options):
        loads[self.name] += 1
        return real_load(self, resolver, testsets, options)

    def parse(self, raw):
        parses[self.name] += 1
        return real_parse(self, raw)

    monkeypatch.setattr(items.ItemSource, "__init__", init)
    monkeypatch.setattr(task, "load_items", load)
    monkeypatch.setattr(Benchmark, "parse_options", parse)
    # a budget: the estimate reads the items before the plan does
    path = _replay_config(tmp_path, ["p0", "p1"], costs={"price_table": None, "budget_usd": 5.0})
    assert main(["run", str(path), "--run-id", "r1", "--quiet"]) == 0
    assert len(sources) == 1
    assert loads == {"halogen/code": 1}
    assert parses == {"halogen": 1}


def _callables(module):
    """The functions and methods ``module`` defines (a class's own methods, properties' getters,
    a dataclass's generated ``__init__``)."""
    for obj in vars(module).values():
        if getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isfunction(obj):
            yield obj.__qualname__, obj
        elif inspect.isclass(obj):
            for name, attr in vars(obj).items():
                attr = attr.fget if isinstance(attr, property) else attr
                attr = attr.__func__ if isinstance(attr, (staticmethod, classmethod)) else attr
                if inspect.isfunction(attr):
                    yield f"{obj.__qualname__}.{name}", attr


def _names_config(hint) -> bool:
    if hint is RunConfig:
        return True
    if isinstance(hint, str):  # an annotation the module only names for types
        return re.search(r"\bRunConfig\b", hint) is not None
    return any(_names_config(a) for a in typing.get_args(hint))


def test_no_function_of_the_pipeline_takes_a_run_config():
    """Every phase takes the resolved run (``resolve.run.ResolvedRun``), or the parts it needs:
    what a phase derives from the config is derived once, before it, in ``halluscope.resolve``."""
    import halluscope.pipeline

    found, checked = [], 0
    for info in pkgutil.walk_packages(halluscope.pipeline.__path__, "halluscope.pipeline."):
        module = importlib.import_module(info.name)
        for name, fn in _callables(module):
            try:
                hints = typing.get_type_hints(fn)
            except NameError:  # a name imported for type checking only: the annotations as written
                hints = dict(fn.__annotations__)
            params = inspect.signature(fn).parameters
            checked += 1
            found += [f"{info.name}.{name}({p})" for p in params
                      if _names_config(hints.get(p)) or _names_config(fn.__annotations__.get(p))]
    assert checked > 150
    assert found == []


def test_the_check_sees_a_run_config_in_a_union_or_a_string(tmp_path):
    def takes(cfg: RunConfig | None, other: int) -> None: ...

    def named(cfg: RunConfig) -> None: ...

    assert _names_config(typing.get_type_hints(takes)["cfg"]) and not _names_config(int)
    assert _names_config(named.__annotations__["cfg"])
