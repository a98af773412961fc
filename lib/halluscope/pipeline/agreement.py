"""How far one judge's decisions agree with a reference judge's on the same units: observed
agreement (accuracy) and Cohen's kappa, with intervals from a cluster bootstrap.

A decision takes one of three values: True, False, or None (no readable decision: an unreadable
answer, a failed call). None is a category of its own, so a judge that answers nothing usable
disagrees rather than drops out. A response's decisions (its facts' verdicts) are not
independent, so the resampled unit is the response: each contributes its 3 x 3 table of counts.
Kappa is (p_o - p_e) / (1 - p_e); where both judges put every decision in one category (p_e = 1)
it is 1 when they agree throughout, 0 otherwise.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from halluscope.contract.errorbars import resampled_sums

CATEGORIES: tuple[bool | None, ...] = (True, False, None)
_INDEX = {c: i for i, c in enumerate(CATEGORIES)}
METHOD = "percentile bootstrap over responses (a response's decisions resampled together), seeded"


@dataclass(frozen=True)
class Agreement:
    decisions: int
    responses: int
    accuracy: float
    kappa: float
    accuracy_se: float | None
    kappa_se: float | None
    accuracy_ci95: list[float] | None
    kappa_ci95: list[float] | None
    confusion: list[list[int]]  # reference's category (rows) x the judge's (columns), CATEGORIES order


def _figures(tables: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of flattened 3 x 3 count tables -> (accuracy, kappa) per row."""
    m = tables.reshape(-1, 3, 3)
    total = m.sum(axis=(1, 2))
    safe = np.where(total > 0, total, 1)
    observed = np.trace(m, axis1=1, axis2=2) / safe
    expected = (m.sum(axis=2) * m.sum(axis=1)).sum(axis=1) / safe ** 2
    single = np.isclose(expected, 1.0)
    kappa = np.where(single, np.where(np.isclose(observed, 1.0), 1.0, 0.0),
                     (observed - expected) / np.where(single, 1.0, 1.0 - expected))
    return observed, kappa


def agreement(pairs: Iterable[tuple[str, bool | None, bool | None]], resamples: int = 1000,
              seed: int = 0) -> Agreement | None:
    """``pairs``: (response id, the reference's decision, the judge's) per decided unit. None when
    there is none."""
    per_response: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(9))
    for response, ref, judged in pairs:
        per_response[response][3 * _INDEX[ref] + _INDEX[judged]] += 1
    if not per_response:
        return None
    sums = np.stack([per_response[k] for k in sorted(per_response)])
    total = sums.sum(axis=0)
    acc, kap = (float(v[0]) for v in _figures(total[None, :]))
    bars: dict[str, tuple[float | None, list[float] | None]] = {"accuracy": (None, None), "kappa": (None, None)}
    if len(sums) > 1:
        boot = _figures(resampled_sums(sums, resamples, np.random.default_rng(seed)))
        for name, stats in zip(("accuracy", "kappa"), boot):
            lo, hi = np.percentile(stats, [2.5, 97.5])
            bars[name] = (float(stats.std(ddof=1)), [float(lo), float(hi)])
    return Agreement(int(total.sum()), len(sums), acc, kap, bars["accuracy"][0], bars["kappa"][0],
                     bars["accuracy"][1], bars["kappa"][1], total.reshape(3, 3).astype(int).tolist())
