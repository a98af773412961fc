"""FEWL's metrics hook reads the verdicts' evidence one model at a time: each model's record from
its own rows, and the evaluation from each question's first row (in model order) that scored the
labelled candidates."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from halluscope.contract.benchmark import MetricInputs
from halluscope.contract.metrics import MetricRecord
from halluscope.fewl import report

TASK = "fewl/score"


def _evidence(score: float, candidates: str | None = None) -> str:
    e = {"score": score, "truthfulness": score, "penalty": 0.0, "methods": {"fewl": score}}
    return json.dumps(e | ({"candidates": {"fewl": candidates}} if candidates else {}))


def test_each_model_from_its_own_evidence_and_the_evaluation_from_each_questions_first(monkeypatch):
    rows = [("m1", "q1", _evidence(0.5, "from m1")), ("m1", "q2", None),
            ("m2", "q1", _evidence(-0.5, "from m2")), ("m2", "q2", _evidence(0.25, "from m2"))]
    scores = pa.table({"gen_id": [f"{m}-{q}" for m, q, _ in rows], "model": [m for m, _, _ in rows],
                       "task": [TASK] * len(rows), "item_id": [q for _, q, _ in rows]})
    verdicts = scores.append_column("evidence", pa.array([e for _, _, e in rows], pa.string()))
    reads: list[list] = []

    def read_table(name: str, columns: list[str], filters: list) -> pa.Table:
        assert name == "verdicts"
        reads.append(filters)
        return verdicts.filter(pq.filters_to_expression(filters)).select(columns)

    firsts: list[dict] = []
    monkeypatch.setattr(report, "_evaluation_record",
                        lambda task, items, first: firsts.append(first) or {"model": report.EVALUATION, "task": task})
    items = pa.table({"item_id": ["q1", "q2"], "prompt": ["", ""], "fields": ["{}", "{}"]})
    records = report.metrics(MetricInputs([TASK], scores, read_table, lambda task: items, None))
    assert reads == [[("task", "==", TASK), ("model", "==", m)] for m in ("m1", "m2")]  # one model's evidence at a time
    by_model = {r.model: r.as_json() for r in records}
    assert (by_model["m1"]["scored"], by_model["m1"]["unscored"], by_model["m1"]["mean_score"]) == (1, 1, 0.5)
    assert by_model["m2"]["scored"] == 2 and by_model["m2"]["mean_score"] == pytest.approx(-0.125)
    assert [r.model for r in records] == ["m1", "m2", report.EVALUATION]
    (first,) = firsts  # q1 from m1, the first model that scored it; q2 from m2, the only one
    assert {q: e["candidates"]["fewl"] for q, e in first.items()} == {"q1": "from m1", "q2": "from m2"}


def test_two_models_following_the_questions_difficulty_are_told_apart_by_the_paired_error_alone():
    """Both models' scores follow each question's difficulty, one a little better everywhere: the
    paired error of the mean difference is scipy's paired t error (mean difference / ttest_rel's
    statistic), and it tells them apart where their errors taken as independent do not."""
    import math

    import numpy as np
    from scipy import stats

    from halluscope.contract.errorbars import Z95
    from halluscope.fewl.paired import paired

    rng = np.random.default_rng(4)
    ease = rng.normal(0, 0.3, 80)
    score = {"a": ease + rng.normal(0, 0.02, 80), "b": ease + 0.03 + rng.normal(0, 0.02, 80)}
    rows = [(m, f"q{i:02d}", _evidence(float(s))) for m, values in score.items() for i, s in enumerate(values)]
    rows.append(("b", "q80", _evidence(0.9)))  # a question only b had scored: left out of the pair
    scores = pa.table({"gen_id": [f"{m}-{q}" for m, q, _ in rows], "model": [m for m, _, _ in rows],
                       "task": [TASK] * len(rows), "item_id": [q for _, q, _ in rows]})
    verdicts = scores.append_column("evidence", pa.array([e for _, _, e in rows], pa.string()))

    def read_table(name: str, columns: list[str], filters: list) -> pa.Table:
        return verdicts.filter(pq.filters_to_expression(filters)).select(columns)

    (record,) = (r.as_json() for r in paired(MetricInputs([TASK], scores, read_table, lambda task: pa.table({}),
                                                          None)))
    (pair,) = record["pairs"]
    d = pair["mean_score"]
    assert (pair["a"], pair["b"], pair["n"]) == ("a", "b", 80)
    assert d["diff"] == pytest.approx(score["a"].mean() - score["b"].mean())
    assert d["stderr"] == pytest.approx(d["diff"] / stats.ttest_rel(score["a"], score["b"]).statistic)
    unpaired = math.hypot(stats.sem(score["a"]), stats.sem(score["b"]))
    assert abs(d["diff"]) > Z95 * d["stderr"] and abs(d["diff"]) < Z95 * unpaired
    assert record["ranks"]["mean_score"] == {"a": [1, 1], "b": [2, 2]}

    per_model = [{"model": m, "task": TASK, "mean_score": float(v.mean()), "stderr": {"mean_score": stats.sem(v)}}
                 for m, v in score.items()]
    parts = report.sections([MetricRecord.from_json(r) for r in [
        *({**r, "items": 80, "scored": 80, "unscored": 0, "mean_truthfulness": None, "mean_penalty": None,
           "share_above_zero": None, "methods": {}} for r in per_model), record]])[0].parts
    told = next(p for p in parts if p.title.startswith("Which neighbours"))
    assert told.rows[0][2] == 1  # paired: told apart (unpaired, they would not be)
    intervals = next(p for p in parts if p.title.startswith("Rank intervals"))
    assert intervals.rows == [["a", "1"], ["b", "2"]]
