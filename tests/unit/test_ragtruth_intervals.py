"""RAGTruth's bootstrap errors, checked against scipy.stats.bootstrap on the same draws."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from halluscope.ragtruth.intervals import FIGURES, cluster_bootstrap, pooled_figures

RNG = np.random.default_rng(5)


def _units(n: int) -> np.ndarray:
    """Counts per unit in the order tp, fp, fn, tp_chars, pred_chars, gold_chars."""
    gold, pred = RNG.random(n) < 0.4, RNG.random(n) < 0.5
    hit = RNG.integers(0, 30, n) * (gold & pred)
    return np.stack([gold & pred, pred & ~gold, gold & ~pred, hit, hit + RNG.integers(0, 20, n) * pred,
                     hit + RNG.integers(0, 20, n) * gold], axis=1).astype(float)


@pytest.mark.parametrize("figure", FIGURES)
def test_one_response_per_source_is_scipys_percentile_bootstrap_on_the_same_draws(figure):
    units, k = _units(120), FIGURES.index(figure)
    se, ci = cluster_bootstrap(units, 1000, np.random.default_rng(3))
    ref = stats.bootstrap((np.arange(len(units)),), lambda i, axis: pooled_figures(units[i].sum(axis=-2))[..., k],
                          vectorized=True, n_resamples=1000, method="percentile", random_state=np.random.default_rng(3))
    assert se[k] == pytest.approx(ref.standard_error)
    assert ci[k].tolist() == pytest.approx([ref.confidence_interval.low, ref.confidence_interval.high])


def test_responses_of_one_source_resampled_together_spread_more_than_taken_apart():
    """Three generators that err alike on each source: a source is one unit, and resampling its
    responses one by one would understate the error."""
    sources = _units(60)
    together, _ = cluster_bootstrap(3 * sources, 2000, np.random.default_rng(1))
    apart, _ = cluster_bootstrap(np.repeat(sources, 3, axis=0), 2000, np.random.default_rng(1))
    assert (together > 1.4 * apart).all()  # about sqrt(3) times


def test_every_detection_group_carries_its_errors_and_a_rerun_draws_the_same():
    from halluscope.ragtruth.corpus import Label, Record, Source
    from halluscope.ragtruth.intervals import detection_intervals
    from halluscope.ragtruth.metrics import MetricOptions
    from halluscope.ragtruth.spans import Prediction, Span
    from halluscope.ragtruth.taxonomy import LabelType, Quality, TaskType

    records, predictions = [], {}
    for i in range(20):
        src = Source(f"s{i}", TaskType.QA, "X", {"question": "q", "passages": "p"}, "prompt", 1)
        for model in ("m1", "m2"):
            text = f"The sky over town {i} is blue."
            start = text.index("blue")
            gold = (Label(start, start + 4, "blue", LabelType.EVIDENT_CONFLICT),) if (i + (model == "m2")) % 3 == 0 \
                else ()
            records.append(Record(f"{i}-{model}", src.source_id, model, None, "test", Quality.GOOD, text, gold, gold,
                                  src, 1))
            predictions[f"{i}-{model}"] = Prediction((Span(start, start + 4),)) if i % 2 == 0 else Prediction()
    found = detection_intervals(records, predictions, MetricOptions(bootstrap_resamples=200))
    assert set(found) == {(task, model) for task in ("QA", "Overall") for model in ("*", "m1", "m2")}
    for errors in found.values():
        assert set(errors["stderr"]) == set(errors["ci95"]) == set(errors["method"]) == set(FIGURES)
    assert detection_intervals(records, predictions, MetricOptions(bootstrap_resamples=200)) == found
