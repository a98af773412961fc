"""A run resolves its config once: one item source whose every source is loaded once, however many
phases read items (the budget's estimate, the plan, the workers), and one parse of each
benchmark's options."""

from __future__ import annotations

from collections import Counter

from tests.unit.test_cli import _replay_config

from halluscope.cli import main
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
