"""Standard errors and 95% intervals a benchmark puts beside each figure of a metric record
(``stderr``, ``ci95``, ``method``): the analytic ones of a mean over the sampled units, and the
delta method's for a ratio of sums clustered by unit."""

from __future__ import annotations

import math

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


def bars(values: dict[str, float | None], errors: dict[str, float | None], methods: dict[str, str]) -> dict:
    """``stderr``, ``ci95`` and ``method`` of a record's figures (None where a figure or its error is)."""
    def interval(value: float | None, se: float | None) -> list[float] | None:
        return None if value is None or se is None else [value - Z95 * se, value + Z95 * se]

    return {"stderr": errors, "ci95": {k: interval(v, errors.get(k)) for k, v in values.items()}, "method": methods}
