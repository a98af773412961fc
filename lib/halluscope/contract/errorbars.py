"""Standard errors and 95% intervals a benchmark puts beside each figure of a metric record
(``stderr``, ``ci95``, ``method``): the analytic ones of a mean over the sampled units, and the
delta method's for a ratio of sums clustered by unit; and those of the difference of two models
that answered the same units, the pairing kept."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

Z95 = 1.959963984540054  # the normal quantile of a two-sided 95% interval


def mean_se(values: list[float]) -> float | None:
    """s / sqrt(n), s the sample standard deviation; None below two values. Sums are correctly
    rounded (``math.fsum``), so the result does not depend on the order of the values."""
    n = len(values)
    if n < 2:
        return None
    mean = math.fsum(values) / n
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1) / n)


def proportion_se(k: int, n: int) -> float | None:
    """``mean_se`` of n values of which k are 1 and the rest 0."""
    return math.sqrt(k / n * (1 - k / n) / (n - 1)) if n > 1 else None


def ratio_se(num: list[float], den: list[float]) -> float | None:
    """Of sum(num) / sum(den) over n clusters: sqrt(n / (n - 1) * sum((num_i - R den_i)^2)) / sum(den)."""
    n, total = len(num), math.fsum(den)
    if n < 2 or not total:
        return None
    r = math.fsum(num) / total
    return math.sqrt(n / (n - 1) * math.fsum((x - r * y) ** 2 for x, y in zip(num, den, strict=True))) / total


def interval(value: float | None, se: float | None) -> list[float] | None:
    """The normal 95% interval of a figure; None where it or its error is."""
    return None if value is None or se is None else [value - Z95 * se, value + Z95 * se]


def resampled_sums(sums: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """A cluster bootstrap's resampled totals: ``sums`` holds a row of counts per cluster (a unit
    whose parts are resampled together); each of ``resamples`` rows of the result sums as many
    clusters drawn with replacement. One matrix product (resamples x clusters times clusters x
    counts), so the work grows with the clusters, not with resamples x rows."""
    n = len(sums)
    picks = rng.integers(0, n, (resamples, n))  # clusters drawn with replacement, as scipy.stats.bootstrap draws
    weights = np.bincount(np.repeat(np.arange(resamples) * n, n) + picks.ravel(), minlength=resamples * n)
    return weights.reshape(resamples, n).astype(float) @ sums


PAIRED_BOOTSTRAP = ("percentile bootstrap of the difference over clusters of the units both models answered, "
                    "both models' counts of a cluster resampled together (the same draws), seeded")


def paired_bootstrap(sums_a: np.ndarray, sums_b: np.ndarray, figures: Callable[[np.ndarray], np.ndarray],
                     resamples: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A paired cluster bootstrap of figures that are functions of pooled counts (an F1 of summed
    characters: no per-unit term to linearise). ``sums_a`` and ``sums_b`` hold a row per cluster
    (the same clusters, in one order) of two models' counts; ``figures`` maps rows of summed counts
    to rows of figures. Both models' rows of a cluster are drawn together, so what a cluster does
    to both cancels in the difference. Per figure: a - b on the whole sample, the resampled
    differences' standard deviation and their (2.5, 97.5) percentiles. A generator seeded afresh
    per call: a pair's numbers do not depend on which other pairs were drawn before it."""
    k = sums_a.shape[1]
    drawn = resampled_sums(np.hstack([sums_a, sums_b]), resamples, np.random.default_rng(seed))
    spread = figures(drawn[:, :k]) - figures(drawn[:, k:])
    diff = figures(sums_a.sum(0, keepdims=True))[0] - figures(sums_b.sum(0, keepdims=True))[0]
    return diff, spread.std(axis=0, ddof=1), np.percentile(spread, [2.5, 97.5], axis=0).T


def bars(values: dict[str, float | None], errors: dict[str, float | None], methods: dict[str, str]) -> dict:
    """``stderr``, ``ci95`` and ``method`` of a record's figures (None where a figure or its error is)."""
    return {"stderr": errors, "ci95": {k: interval(v, errors.get(k)) for k, v in values.items()}, "method": methods}


PAIRED_SE = ("delta-method standard error of the difference of two ratios of sums over the items both models "
             "answered, each item's two linearised terms subtracted before squaring (a mean: its paired t error)")


def paired_difference(num_a: np.ndarray, den_a: np.ndarray, num_b: np.ndarray, den_b: np.ndarray
                      ) -> tuple[float | None, float | None]:
    """sum(num_a) / sum(den_a) - sum(num_b) / sum(den_b) over the same n units (a mean's den is
    all ones) and its standard error sqrt(n / (n - 1) * sum(z_i^2)), z_i = (num_a_i - R_a den_a_i) /
    sum(den_a) - (num_b_i - R_b den_b_i) / sum(den_b): what ``ratio_se`` is for one ratio, with a
    unit's terms of both models together, so what the two share (an item's difficulty) cancels.
    (None, None) when a ratio is undefined; an error of None where either ratio has fewer than two
    units in its denominator (one responded item: no spread to linearise)."""
    n, total_a, total_b = len(num_a), float(den_a.sum()), float(den_b.sum())
    if not total_a or not total_b:
        return None, None
    ra, rb = float(num_a.sum()) / total_a, float(num_b.sum()) / total_b
    if min(np.count_nonzero(den_a), np.count_nonzero(den_b)) < 2:
        return ra - rb, None
    z = (num_a - ra * den_a) / total_a - (num_b - rb * den_b) / total_b
    return ra - rb, math.sqrt(n / (n - 1) * float(np.dot(z, z)))
