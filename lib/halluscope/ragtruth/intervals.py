"""Bootstrap errors of RAGTruth's detection figures, which are not means: response-level and
character-level (micro) precision, recall and F1, ratios of counts pooled over responses.

The sampled unit is the source: the corpus asks every generator about the same sources, so a
source's responses are resampled together (a cluster bootstrap). Each resample draws as many
sources as the group has, with replacement, from one seeded generator, and recomputes the figures
from the resampled sums (0/0 as 0, as ``metrics.scores`` does); the error is the resamples'
standard deviation and the interval their 2.5 and 97.5 percentiles. The sums are one matrix
product per group (resamples x sources times sources x counts), so the work grows with the
corpus, not with resamples x responses.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

import numpy as np

from halluscope.contract.errorbars import resampled_sums
from halluscope.ragtruth.corpus import Record
from halluscope.ragtruth.metrics import ALL, OVERALL, MetricOptions, response_counts
from halluscope.ragtruth.spans import Prediction

BOOTSTRAP = "percentile bootstrap over sources (a source's responses resampled together), seeded"
FIGURES = ("response_precision", "response_recall", "response_f1", "span_precision", "span_recall", "span_f1")
_COUNTS = ("tp", "fp", "fn", "tp_chars", "pred_chars", "gold_chars")


def pooled_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den elementwise, 0/0 as 0 (as ``metrics.scores`` reports it)."""
    return np.divide(num, den, out=np.zeros_like(num, dtype=float), where=den != 0)


def pooled_figures(t: np.ndarray) -> np.ndarray:
    """Rows of summed counts (``_COUNTS`` order) -> rows of ``FIGURES``."""
    tp, fp, fn, hit, pred, gold = t.T
    out = []
    for p_num, p_den, r_num, r_den in ((tp, tp + fp, tp, tp + fn), (hit, pred, hit, gold)):
        p, r = pooled_ratio(p_num, p_den), pooled_ratio(r_num, r_den)
        out += [p, r, pooled_ratio(2 * p * r, p + r)]
    return np.stack(out, axis=1)


def cluster_bootstrap(sums: np.ndarray, resamples: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Per figure the standard error and the (2.5, 97.5) percentile interval, resampling the rows of
    ``sums`` (one per source: its responses' counts)."""
    stats = pooled_figures(resampled_sums(sums, resamples, rng))
    return stats.std(axis=0, ddof=1), np.percentile(stats, [2.5, 97.5], axis=0).T


def detection_intervals(records: Iterable[Record], predictions: Mapping[str, Prediction | None],
                        options: MetricOptions) -> dict[tuple[str, str], dict]:
    """(task type, generator) as ``metrics.score_rows`` keys its rows, ``Overall`` and ``*`` included
    -> ``stderr``, ``ci95`` and ``method`` of its figures; a group of fewer than two sources has none."""
    per_source: dict[tuple[str, str, str], np.ndarray] = defaultdict(lambda: np.zeros(len(_COUNTS)))
    for r in records:
        pred = predictions.get(r.id)
        if pred is None:
            if options.unpredicted == "exclude":
                continue
            pred = Prediction()
        c = response_counts(r, pred)
        per_source[(r.task_type.value, r.model, r.source_id)] += [getattr(c, k) for k in _COUNTS]
    tasks = sorted({t for t, _, _ in per_source})
    rng = np.random.default_rng(options.bootstrap_seed)
    out: dict[tuple[str, str], dict] = {}
    for task in [*tasks, OVERALL]:
        models = sorted({m for t, m, _ in per_source if task in (OVERALL, t)})
        for model in [ALL, *models]:
            sums: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(len(_COUNTS)))
            for (t, m, source), counts in sorted(per_source.items()):
                if task in (OVERALL, t) and model in (ALL, m):
                    sums[source] = sums[source] + counts
            if len(sums) < 2:
                continue
            se, ci = cluster_bootstrap(np.stack([sums[s] for s in sorted(sums)]), options.bootstrap_resamples, rng)
            out[(task, model)] = {"stderr": dict(zip(FIGURES, se.tolist())),
                                  "ci95": {f: [lo, hi] for f, (lo, hi) in zip(FIGURES, ci.tolist())},
                                  "method": dict.fromkeys(FIGURES, f"{BOOTSTRAP}, {options.bootstrap_resamples} "
                                                                   "resamples")}
    return out
