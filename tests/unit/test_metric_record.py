"""The metric record of the contract: the flat object metrics.json holds, read back as it was written,
and the engine's tag of the benchmark that made it."""

import json

import pyarrow as pa
import pytest
from tests.support.totals import every_metric

from halluscope import records
from halluscope.config.load import parse_config
from halluscope.contract.metrics import MetricRecord
from halluscope.errors import DataError, RunError
from halluscope.pipeline import aggregate
from halluscope.report.sections import stored_records
from halluscope.task_registry import benchmark_of


def test_as_json_is_the_flat_object_and_from_json_reads_it_back():
    record = MetricRecord("m", "halogen/code", "halogen", {"n_items": 3, "summary": {"h": 0.5}, "aggregate": True})
    flat = record.as_json()
    assert flat == {"model": "m", "task": "halogen/code", "n_items": 3, "summary": {"h": 0.5}, "aggregate": True,
                    "benchmark": "halogen"}
    assert MetricRecord.from_json(json.loads(json.dumps(flat, sort_keys=True))) == record
    # the engine's own record names no benchmark, and its object has no such key
    total = MetricRecord("*", "costs/total", values={"usd": 0.0})
    assert "benchmark" not in total.as_json() and MetricRecord.from_json(total.as_json()) == total


@pytest.mark.parametrize("raw", [{"task": "t"}, {"model": "m", "task": 3}, {"model": "m", "task": "t", "benchmark": 1},
                                 ["m", "t"], None])
def test_from_json_refuses_what_is_not_a_record(raw):
    with pytest.raises(ValueError, match="string fields model and task"):
        MetricRecord.from_json(raw)
    with pytest.raises(DataError, match=r"metrics.json: record 1 is not an object"):
        stored_records([{"model": "m", "task": "t"}, raw], "file:///run/metrics.json")


def test_values_cannot_hold_a_field():
    with pytest.raises(ValueError, match="values hold benchmark"):
        MetricRecord("m", "t", values={"benchmark": "x"})


class _Store:
    def read_table(self, table: str, *args, **kwargs) -> pa.Table:
        return records.SCORES.empty_table()

    def read_items(self, task: str) -> pa.Table:
        return pa.table({"item_id": pa.array([], pa.string())})


def test_the_engine_tags_each_record_with_its_benchmark_and_refuses_a_dict(monkeypatch):
    cfg = parse_config({"tasks": ["halogen/code"], "models": [{"id": "m", "backend": "replay"}]})
    bench = benchmark_of("halogen/code")
    hooks = {"halogen": lambda inputs: [MetricRecord("m", "halogen/code", values={"n": 1}),
                                        MetricRecord("m", "halogen/x", "other", {})]}
    plain = type(bench)(bench.name, bench.tasks, metrics=lambda inputs: hooks["halogen"](inputs))
    monkeypatch.setattr(aggregate, "benchmark_of", lambda t: plain)
    monkeypatch.setattr(aggregate, "benchmarks", lambda: {"halogen": plain})
    scores = records.SCORES.empty_table()
    got = every_metric(cfg, _Store(), scores)
    assert [(r.task, r.benchmark) for r in got] == [("halogen/code", "halogen"), ("halogen/x", "other")]
    hooks["halogen"] = lambda inputs: [{"model": "m", "task": "halogen/code"}]
    with pytest.raises(RunError, match="benchmark 'halogen': its metrics hook returned a dict, not a"):
        every_metric(cfg, _Store(), scores)
