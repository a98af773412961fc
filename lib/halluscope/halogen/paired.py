"""Paired differences of HALOGEN's figures between two models, per task, over the items both
answered: R, H and U of model a minus those of model b, each with its paired standard error and
95% interval (``contract.errorbars.paired_difference``). Models answer the same prompts, so an
item's difficulty is common to both and cancels in the difference; the unpaired error (the two
models' errors combined as if independent) overstates it.

What a run keeps grows linearly with its models: every two models' differences up to
``ALL_PAIRS_UP_TO`` models, beyond that the neighbours in each figure's ranking; and, per figure,
each model's rank interval, counted over every two models (computed, not kept). Any other pair is
computed when a reader asks for it (``wanted``: `halluscope compare`). 2,000 models kept every
pair: a metrics.json of 1.08 GB."""

from __future__ import annotations

from collections.abc import Collection
from itertools import combinations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from halluscope.contract.errorbars import PAIRED_SE, Z95, interval, paired_difference
from halluscope.contract.metrics import PAIRED

# what the comparison reads of every model's scores, beside model and task
COMPARE_COLUMNS = ("item_id", "error", "responded", "f", "g")
# figure -> (its numerator, its denominator; None: one per item) among _grid's values
_PARTS: dict[str, tuple[str, str | None]] = {"response_ratio": ("responded", None),
                                             "hallucination_score": ("f", "responded"),
                                             "utility_score": ("g", None)}
FIGURES = tuple(_PARTS)
ALL_PAIRS_UP_TO = 16  # models of a task whose every two are kept (120 pairs); beyond, neighbours only
_BLOCK = 64  # models compared with every other at once in ``_ranks`` (a block x models x items array)
RANKS = ("rank 1: the lowest value; a model's interval runs from 1 + the models whose value is lower "
         "beyond the 95% interval of their paired difference to the models ranked less those higher beyond it")


def _grid(rows: pa.Table) -> tuple[list[str], np.ndarray, dict[str, np.ndarray]]:
    """The task's models, whether each answered each item (models x items), and per figure its
    numerator and denominator per model and item: R = responded / 1, H = f if responded /
    responded, U = g / 1."""
    model = pc.dictionary_encode(rows.column("model")).combine_chunks()
    item = pc.dictionary_encode(rows.column("item_id")).combine_chunks()
    m, i = model.indices.to_numpy(), item.indices.to_numpy()
    shape = (len(model.dictionary), len(item.dictionary))
    present = np.zeros(shape, bool)
    present[m, i] = True
    responded = rows.column("responded").fill_null(False).to_numpy(zero_copy_only=False).astype(float)
    f = rows.column("f").fill_null(0.0).to_numpy(zero_copy_only=False) * responded
    g = rows.column("g").fill_null(0.0).to_numpy(zero_copy_only=False)
    values = {}
    for name, v in (("responded", responded), ("f", f), ("g", g)):
        values[name] = np.zeros(shape)
        values[name][m, i] = v
    return model.dictionary.to_pylist(), present, values


def _pair(values: dict[str, np.ndarray], a: int, b: int, both: np.ndarray) -> dict:
    ones = np.ones(int(both.sum()))
    out: dict = {}
    for figure, (num, den) in _PARTS.items():
        den_a = ones if den is None else values[den][a, both]
        den_b = ones if den is None else values[den][b, both]
        diff, se = paired_difference(values[num][a, both], den_a, values[num][b, both], den_b)
        out[figure] = {"diff": diff, "stderr": se, "ci95": interval(diff, se)}
    return out


def _values(values: dict[str, np.ndarray], present: np.ndarray) -> dict[str, np.ndarray]:
    """Per figure each model's value over the items it answered (NaN where it is undefined)."""
    out = {}
    with np.errstate(invalid="ignore", divide="ignore"):
        for figure, (num, den) in _PARTS.items():
            total = present.sum(1) if den is None else values[den].sum(1)
            out[figure] = np.where(total > 0, values[num].sum(1) / np.where(total > 0, total, 1), np.nan)
    return out


def _ranks(values: dict[str, np.ndarray], present: np.ndarray, models: list[str]) -> dict[str, dict[str, list[int]]]:
    """Per figure, each ranked model's [lowest, highest] rank (``RANKS``), from its paired
    difference with every other model: ``paired_difference`` for a block of models against all
    at once, so the work is models^2 x items but nothing of it is kept."""
    out: dict[str, dict[str, list[int]]] = {}
    n_models = len(models)
    for figure, (num_key, den_key) in _PARTS.items():
        num = values[num_key]
        den = present.astype(float) if den_key is None else values[den_key]
        defined = den.sum(1) > 0
        lower = np.zeros(n_models, int)  # models told apart from each with a lower value
        higher = np.zeros(n_models, int)
        for start in range(0, n_models, _BLOCK):
            a = slice(start, min(start + _BLOCK, n_models))
            both = present[a, None, :] & present[None, :, :]  # block x models x items
            n = both.sum(2)
            na, da = num[a, None, :] * both, den[a, None, :] * both
            nb, db = num[None, :, :] * both, den[None, :, :] * both
            ta, tb = da.sum(2), db.sum(2)
            with np.errstate(invalid="ignore", divide="ignore"):
                ra, rb = na.sum(2) / ta, nb.sum(2) / tb
                z = (na - ra[..., None] * da) / ta[..., None] - (nb - rb[..., None] * db) / tb[..., None]
                se = np.sqrt(n / (n - 1) * np.nansum(z * z, 2))
            diff = ra - rb
            usable = (ta > 0) & (tb > 0) & (np.count_nonzero(da, 2) >= 2) & (np.count_nonzero(db, 2) >= 2)
            told = usable & (np.abs(diff) > Z95 * se)
            lower[a] += (told & (diff > 0)).sum(1)  # b's value below a's
            higher[a] += (told & (diff < 0)).sum(1)
        ranked = int(defined.sum())
        out[figure] = {models[i]: [1 + int(lower[i]), ranked - int(higher[i])] for i in np.flatnonzero(defined)}
    return out


def _kept(values: dict[str, np.ndarray], models: list[str],
          wanted: Collection[tuple[str, str]]) -> list[tuple[int, int]]:
    """The pairs a run keeps (``ALL_PAIRS_UP_TO``), and those asked for, as (a, b) indices in model order."""
    index = {m: i for i, m in enumerate(models)}
    if len(models) <= ALL_PAIRS_UP_TO:
        keep = set(combinations(range(len(models)), 2))
    else:
        keep = set()
        for value in values.values():
            order = sorted((i for i in range(len(models)) if not np.isnan(value[i])),
                           key=lambda i: (value[i], models[i]))
            keep.update((min(x, y), max(x, y)) for x, y in zip(order, order[1:]))
    for a, b in wanted:
        if a in index and b in index and a != b:
            keep.add((min(index[a], index[b]), max(index[a], index[b])))
    return sorted(keep)


def paired(scores: pa.Table, tasks: list[str], wanted: Collection[tuple[str, str]] = ()) -> list[dict]:
    """A record per task: the kept pairs' differences over the items both scored (no error), each
    figure's rank intervals, and the ``wanted`` pairs (model ids, either order) when both answered."""
    scored = scores.filter(pc.is_null(scores.column("error")))
    out = []
    for task in tasks:
        # in a fixed order, so the sums (and the last bits of the errors) do not depend on the
        # order in which the parts were read
        rows = scored.filter(pc.equal(scored.column("task"), task)).sort_by([("model", "ascending"),
                                                                             ("item_id", "ascending")])
        if not rows.num_rows:
            continue
        models, present, values = _grid(rows)
        pairs = []
        for a, b in _kept(_values(values, present), models, wanted):
            both = present[a] & present[b]
            pairs.append({"a": models[a], "b": models[b], "n": int(both.sum()), **_pair(values, a, b, both)})
        out.append({"model": "*", "task": task, "aggregate": True, "table": PAIRED, "figures": list(FIGURES),
                    "pairs": pairs, "method": PAIRED_SE, "ranks": _ranks(values, present, models),
                    "ranks_method": RANKS})
    return out
