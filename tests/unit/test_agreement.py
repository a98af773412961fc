"""A judge's agreement with a reference judge: accuracy and Cohen's kappa over three categories
(True, False, None), with a cluster bootstrap over responses."""

from __future__ import annotations

import random

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score

from halluscope.contract.metrics import AGREEMENT, Estimate, MetricRecord
from halluscope.pipeline.agreement import agreement
from halluscope.report.agreement import TITLE, agreement_section
from halluscope.report.leaderboard import leaderboard
from halluscope.report.sections import by_benchmark


def _pairs(n: int, flip: float, seed: int = 0) -> list[tuple[str, bool | None, bool | None]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ref = rng.random() < 0.6
        judged: bool | None = (not ref) if rng.random() < flip else ref
        if rng.random() < 0.05:
            judged = None
        out.append((f"r{i // 4}", ref, judged))
    return out


def test_accuracy_and_kappa_are_sklearns_over_the_three_categories():
    pairs = _pairs(400, 0.2)
    a = agreement(pairs)
    assert a is not None
    label = {True: "yes", False: "no", None: "none"}
    ref, judged = [label[p[1]] for p in pairs], [label[p[2]] for p in pairs]
    assert a.kappa == pytest.approx(cohen_kappa_score(ref, judged))
    assert a.accuracy == pytest.approx(np.mean([x == y for x, y in zip(ref, judged)]))
    assert (a.decisions, a.responses) == (400, 100)
    assert sum(map(sum, a.confusion)) == 400
    assert a.kappa_ci95[0] < a.kappa < a.kappa_ci95[1] and a.kappa_se > 0


def test_a_judge_that_agrees_throughout_has_kappa_one_even_with_one_category():
    same = agreement([(f"r{i}", v, v) for i, v in enumerate([True, False] * 10)])
    assert (same.accuracy, same.kappa, same.kappa_ci95) == (1.0, 1.0, [1.0, 1.0])
    only_yes = agreement([(f"r{i}", True, True) for i in range(5)])
    assert (only_yes.accuracy, only_yes.kappa) == (1.0, 1.0)


def test_a_judge_that_answers_one_way_whatever_the_reference_says_has_kappa_zero():
    a = agreement([(f"r{i}", v, True) for i, v in enumerate([True, False] * 20)])
    assert a.accuracy == 0.5 and a.kappa == pytest.approx(0.0)


def test_the_interval_is_seeded_and_clustered_by_response():
    pairs = _pairs(400, 0.3)
    assert agreement(pairs, seed=1) == agreement(pairs, seed=1)
    # the same decisions counted as one response each: a narrower interval than by 4-unit responses
    apart = agreement([(f"u{i}", r, j) for i, (_, r, j) in enumerate(pairs)])
    together = agreement([(resp, r, j) for resp, r, j in pairs])
    assert apart.kappa == together.kappa
    assert agreement([]) is None


def _record(kappa: float) -> MetricRecord:
    return MetricRecord("tiny-judge", "halogen/historical_events", None, {
        "table": AGREEMENT, "aggregate": True, "decision": "responded", "reference": "halogen-recorded-judge",
        "decisions": 28, "responses": 28, "accuracy": Estimate(0.5, None, "bootstrap"),
        "kappa": Estimate(kappa, 0.1, "bootstrap", (kappa - 0.2, kappa + 0.2)),
        "min_kappa": 0.4, "below_threshold": kappa < 0.4, "items_per_model": 2})


def test_the_leaderboard_opens_with_the_agreement_and_warns_below_the_threshold():
    halogen = MetricRecord("m", "halogen/code", "halogen", {"hallucination_score": 0.1, "response_ratio": 1.0,
                                                           "utility_score": 0.9, "n_items": 3})
    board = leaderboard([_record(0.05), halogen], "r")
    head = board.split(TITLE, 1)
    assert len(head) == 2 and "halogen" not in head[0].lower()
    assert "WARNING: the judge 'tiny-judge' agrees with the reference below the threshold (kappa below 0.4)" in board
    assert "not to be trusted" in board
    ok = agreement_section([_record(0.8)])
    assert ok is not None and not any("WARNING" in p for p in ok.preamble)
    # no benchmark's report hook sees the engine's agreement records
    groups, unplaced = by_benchmark([_record(0.8), halogen])
    assert groups == {"halogen": [halogen]} and unplaced == 0
