"""Typed figures and the engine's merge: an Estimate is the flat keys metrics.json holds and is read
back from them; several records' figures merge by each figure's declared aggregation (a pooled
rate is the rate of every unit, a mean of task means has their independent errors), and a plug-in's
plain values merge too, or stop the run naming the figure."""

from __future__ import annotations

import json
import math

import pytest

from halluscope.contract.benchmark import Benchmark
from halluscope.contract.errorbars import Z95, mean_se, proportion_se
from halluscope.contract.metrics import MEAN_SE, POOLED_SE, Estimate, Figure, Group, MetricRecord
from halluscope.errors import RunError
from halluscope.pipeline import aggregate


def test_an_estimate_is_the_flat_keys_and_reads_back_from_them():
    record = MetricRecord("m", "t", "b", {"n": 4, "rate": Estimate.normal(0.25, 0.1, "analytic"),
                                          "ratio": Estimate(0.5, None, "bootstrap", (0.4, 0.7)),
                                          "stderr": {"by_bin": 0.2}})  # an error of no figure stays as given
    flat = record.as_json()
    assert flat == {"model": "m", "task": "t", "benchmark": "b", "n": 4, "rate": 0.25, "ratio": 0.5,
                    "stderr": {"by_bin": 0.2, "rate": 0.1, "ratio": None},
                    "ci95": {"rate": [0.25 - Z95 * 0.1, 0.25 + Z95 * 0.1], "ratio": [0.4, 0.7]},
                    "method": {"rate": "analytic", "ratio": "bootstrap"}}
    assert MetricRecord.from_json(json.loads(json.dumps(flat))) == record
    # a method that is no object (a compare hook's record) holds no estimates
    paired = {"model": "*", "task": "t", "table": "paired", "stderr": {"x": 0.1}, "ci95": {"x": None}, "method": "d",
              "x": 1.0}
    assert MetricRecord.from_json(paired).values["x"] == 1.0


def test_an_estimate_and_an_error_given_beside_it_clash():
    with pytest.raises(ValueError, match="values hold stderr"):
        MetricRecord("m", "t", values={"rate": Estimate(0.5, 0.1, "a"), "stderr": {"rate": 0.2}})
    with pytest.raises(ValueError, match="values hold method"):
        MetricRecord("m", "t", values={"rate": Estimate(0.5, 0.1, "a"), "method": "one method for all"})


def test_a_pooled_rate_is_the_rate_of_every_unit():
    rate = Figure("rate", "lower", "pooled", over="n")
    parts = [(3, 10), (12, 30)]  # (hallucinated, scored) of two models
    got = rate.merge([Estimate.normal(k / n, proportion_se(k, n), "analytic") for k, n in parts], [n for _, n in parts])
    assert got.value == pytest.approx(15 / 40) and got.se == pytest.approx(proportion_se(15, 40))
    assert got.ci95 == pytest.approx((15 / 40 - Z95 * got.se, 15 / 40 + Z95 * got.se)) and got.method == POOLED_SE


def test_a_pooled_mean_is_the_mean_of_every_unit():
    a, b = [0.1, 0.5, 0.9, 0.2], [1.0, 0.0, 0.4]
    got = Figure("score", "higher", "pooled", over="n").merge(
        [Estimate.normal(math.fsum(v) / len(v), mean_se(v), "analytic") for v in (a, b)], [len(a), len(b)])
    assert got.value == pytest.approx(math.fsum(a + b) / 7) and got.se == pytest.approx(mean_se(a + b))


def test_a_mean_counts_each_record_once_and_skips_undefined_ones():
    h = Figure("h", "lower", "mean")
    got = h.merge([Estimate.normal(0.2, 0.03, "x"), Estimate.normal(0.4, 0.04, "x"), Estimate(None, None, "x"), None])
    assert got.value == pytest.approx(0.3) and got.se == pytest.approx(0.05 / 2) and got.method == MEAN_SE
    assert h.merge([Estimate.normal(0.2, 0.03, "x"), Estimate.normal(0.4, None, "x")]).se is None
    assert h.merge([0.2, 0.4, None]) == pytest.approx(0.3)  # plain numbers: a plain mean


def test_figures_declare_what_they_are_merged_by():
    with pytest.raises(ValueError, match="a pooled figure, and only one, names the count"):
        Figure("rate", "lower", "pooled")
    with pytest.raises(ValueError, match="figure 'rate' is pooled over 'n', which must be a figure of its own"):
        Benchmark("plug", [], figures=[Figure("rate", "lower", "pooled", over="n")])


def _plug(monkeypatch, figures=(), groups=()) -> Benchmark:
    """A plug-in benchmark the engine finds by its name."""
    bench = Benchmark("plug", [], figures=figures, groups=groups)
    monkeypatch.setattr(aggregate, "benchmarks", lambda: {"plug": bench})
    return bench


FIGURES = (Figure("n", None, "sum"), Figure("rate", "lower", "pooled", over="n"), Figure("score", "higher", "mean"),
           Figure("note", None))


def _record(model: str, task: str, k: int, n: int, score: float, **labels) -> MetricRecord:
    return MetricRecord(model, task, values={"n": n, "rate": Estimate.normal(k / n, proportion_se(k, n), "analytic"),
                                             "score": Estimate.normal(score, 0.1, "analytic"), "note": "same",
                                             **labels})


def test_records_the_per_model_calls_each_return_are_merged_by_their_figures(monkeypatch):
    _plug(monkeypatch, FIGURES)
    # each call gives its model's record and a record over "every model" it saw, of its model alone
    calls = [[_record("a", "plug/t", 3, 10, 0.2), _record("*", "plug/t", 3, 10, 0.2, table="overall")],
             [_record("b", "plug/t", 12, 30, 0.6), _record("*", "plug/t", 12, 30, 0.6, table="overall")]]
    got = aggregate.merged("plug", [r for call in calls for r in call])
    assert [(r.model, r.benchmark) for r in got] == [("a", "plug"), ("*", "plug"), ("b", "plug")]
    overall = got[1].values
    assert overall["table"] == "overall" and overall["n"] == 40 and overall["note"] == "same"
    assert overall["rate"].value == pytest.approx(15 / 40) and overall["rate"].se == pytest.approx(proportion_se(15, 40))
    assert overall["score"].value == pytest.approx(0.4) and overall["score"].se == pytest.approx(math.sqrt(0.02) / 2)
    # records that differ in a value that is no figure stay apart
    assert len(aggregate.merged("plug", [_record("*", "plug/t", 1, 2, 0.5, table="x"),
                                         _record("*", "plug/t", 1, 2, 0.5, table="y")])) == 2


def test_a_group_record_merges_a_models_tasks_by_each_figures_aggregation(monkeypatch):
    _plug(monkeypatch, FIGURES, [Group("plug/avg", frozenset({"plug/t1", "plug/t2"}), {"kind": "response"})])
    got = aggregate.merged("plug", [_record("a", "plug/t1", 3, 10, 0.2), _record("a", "plug/t2", 12, 30, 0.6),
                                    _record("a", "plug/other", 1, 1, 1.0), _record("b", "plug/other", 1, 1, 1.0)])
    (group,) = [r for r in got if r.task == "plug/avg"]
    assert group.model == "a" and group.benchmark == "plug"
    assert {k: v for k, v in group.values.items() if not isinstance(v, Estimate)} == {
        "kind": "response", "aggregate": True, "n_tasks": 2, "n": 40}  # "note" declares no aggregation
    assert group.values["rate"].value == pytest.approx(15 / 40) and group.values["score"].value == pytest.approx(0.4)
    assert group.values["score"].method == MEAN_SE


def test_a_plug_ins_plain_values_pass_or_merge_and_a_figure_that_cannot_is_named(monkeypatch):
    # the worked example's kind of record: plain values, no figures declared
    _plug(monkeypatch)
    plain = [MetricRecord("m", "plug/t", values={"n": 8, "response_ratio": 7 / 8, "wrong_answer_rate": None}),
             MetricRecord("*", "plug/t", values={"n": 8}), MetricRecord("*", "plug/t", values={"n": 8})]
    assert aggregate.merged("plug", plain) == [MetricRecord(r.model, r.task, "plug", r.values) for r in plain[:2]]
    # declared figures of plain numbers merge as numbers
    _plug(monkeypatch, FIGURES)
    calls = [MetricRecord("*", "plug/t", values={"n": n, "rate": r, "score": s}) for n, r, s in ((10, 0.3, 1), (30, 0.4, 2))]
    (one,) = aggregate.merged("plug", calls)
    assert one.values == {"n": 40, "rate": pytest.approx(15 / 40), "score": 1.5}
    with pytest.raises(RunError, match="benchmark 'plug': figure 'rate' \\(pooled\\) merges numbers or "
                                       "halluscope.contract.metrics.Estimate values, not str"):
        aggregate.merged("plug", [MetricRecord("*", "plug/t", values={"n": 1, "rate": "high"})] * 2)
    with pytest.raises(RunError, match="figure 'note' differs between records that are one"):
        aggregate.merged("plug", [MetricRecord("*", "plug/t", values={"note": x}) for x in "ab"])
    with pytest.raises(RunError, match="figure 'n' \\(sum\\) merges counts, not Estimate"):
        aggregate.merged("plug", [MetricRecord("*", "plug/t", values={"n": Estimate(1.0, None, "x")})] * 2)
