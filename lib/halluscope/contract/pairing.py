"""Paired differences between the models of a task over the units both answered, for any
benchmark whose figures are ratios of sums over units (a mean: a denominator of one per unit):
a figure of model a minus the same figure of model b, with its paired standard error and 95%
interval (``errorbars.paired_difference``). Models answer the same prompts, so a unit's
difficulty is common to both and cancels in the difference; the unpaired error (the two models'
errors combined as if independent) overstates it.

A benchmark builds a grid (``grid``: per model and unit each part's sum) and names each figure's
numerator and denominator among its parts (``Parts``); ``record`` makes the task's record
(contract.metrics ``PAIRED``). What it keeps grows linearly with the models: every two models'
differences up to ``ALL_PAIRS_UP_TO`` models, beyond that the neighbours in each figure's
ranking; and, per figure, each model's rank interval, counted over every two models (computed,
not kept). Any other pair is computed when a reader asks for it (``wanted``: `halluscope
compare`). 2,000 models kept every pair: a metrics.json of 1.08 GB."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from itertools import combinations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from halluscope.contract.errorbars import PAIRED_SE, Z95, interval, paired_difference
from halluscope.contract.metrics import PAIRED

# figure -> (its numerator, its denominator; None: one per unit) among a grid's parts
Parts = Mapping[str, tuple[str, str | None]]
Grid = tuple[list[str], np.ndarray, dict[str, np.ndarray]]  # models, answered (models x units), parts
ALL_PAIRS_UP_TO = 16  # models of a task whose every two are kept (120 pairs); beyond, neighbours only
_BLOCK = 64  # models compared with every other at once in ``ranks`` (a block x models x units array)
RANKS = ("rank 1: the lowest value; a model's interval runs from 1 + the models whose value is lower "
         "beyond the 95% interval of their paired difference to the models ranked less those higher beyond it")


def grid(model: pa.ChunkedArray, unit: pa.ChunkedArray,
         parts: Mapping[str, np.ndarray]) -> Grid:
    """The models (in order of first appearance), whether each answered each unit, and each
    part summed per model and unit: rows of one unit are one measure of it (several trials of a
    prompt are repeated measures of one item, not independent items)."""
    models = pc.dictionary_encode(model).combine_chunks()
    units = pc.dictionary_encode(unit).combine_chunks()
    m, i = models.indices.to_numpy(), units.indices.to_numpy()
    shape = (len(models.dictionary), len(units.dictionary))
    present = np.zeros(shape, bool)
    present[m, i] = True
    values = {}
    for name, v in parts.items():
        values[name] = np.zeros(shape)
        np.add.at(values[name], (m, i), v)
    return models.dictionary.to_pylist(), present, values


def _pair(values: dict[str, np.ndarray], parts: Parts, a: int, b: int, both: np.ndarray) -> dict:
    ones = np.ones(int(both.sum()))
    out: dict = {}
    for figure, (num, den) in parts.items():
        den_a = ones if den is None else values[den][a, both]
        den_b = ones if den is None else values[den][b, both]
        diff, se = paired_difference(values[num][a, both], den_a, values[num][b, both], den_b)
        out[figure] = {"diff": diff, "stderr": se, "ci95": interval(diff, se)}
    return out


def _values(values: dict[str, np.ndarray], present: np.ndarray, parts: Parts) -> dict[str, np.ndarray]:
    """Per figure each model's value over the units it answered (NaN where it is undefined)."""
    out = {}
    with np.errstate(invalid="ignore", divide="ignore"):
        for figure, (num, den) in parts.items():
            total = present.sum(1) if den is None else values[den].sum(1)
            out[figure] = np.where(total > 0, values[num].sum(1) / np.where(total > 0, total, 1), np.nan)
    return out


def ranks(values: dict[str, np.ndarray], present: np.ndarray, models: list[str],
          parts: Parts) -> dict[str, dict[str, list[int]]]:
    """Per figure, each ranked model's [lowest, highest] rank (``RANKS``), from its paired
    difference with every other model: ``paired_difference`` for a block of models against all
    at once, so the work is models^2 x units but nothing of it is kept."""
    out: dict[str, dict[str, list[int]]] = {}
    n_models = len(models)
    for figure, (num_key, den_key) in parts.items():
        num = values[num_key]
        den = present.astype(float) if den_key is None else values[den_key]
        defined = den.sum(1) > 0
        lower = np.zeros(n_models, int)  # models told apart from each with a lower value
        higher = np.zeros(n_models, int)
        for start in range(0, n_models, _BLOCK):
            a = slice(start, min(start + _BLOCK, n_models))
            both = present[a, None, :] & present[None, :, :]  # block x models x units
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


def kept(values: dict[str, np.ndarray], models: list[str],
         wanted: Collection[tuple[str, str]]) -> list[tuple[int, int]]:
    """The pairs a run keeps (``ALL_PAIRS_UP_TO``), and those asked for, as (a, b) indices in
    model order; ``values``: per figure each model's value (NaN: none)."""
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


def asked(values: Mapping[str, np.ndarray], models: list[str],
          wanted: Collection[tuple[str, str]]) -> dict[str, dict[str, float | None]]:
    """Each model of the ``wanted`` pairs with its value of each figure (``values``: per figure
    each model's, NaN: none), which a reader shows beside the difference it asked for (the
    record's ``values``). A run asks for no pair, so its records hold none."""
    index = {m: i for i, m in enumerate(models)}
    named = sorted({m for pair in wanted for m in pair if m in index})
    return {m: {f: None if np.isnan(v[index[m]]) else float(v[index[m]]) for f, v in values.items()} for m in named}


def record(task: str, table: Grid, parts: Parts, wanted: Collection[tuple[str, str]] = (),
           method: str = PAIRED_SE) -> dict:
    """The task's paired record: the kept pairs' differences over the units both answered, each
    figure's rank intervals, and the ``wanted`` pairs (model ids, either order) with their models'
    values."""
    models, present, values = table
    figures = _values(values, present, parts)
    pairs = []
    for a, b in kept(figures, models, wanted):
        both = present[a] & present[b]
        pairs.append({"a": models[a], "b": models[b], "n": int(both.sum()), **_pair(values, parts, a, b, both)})
    out = {"model": "*", "task": task, "aggregate": True, "table": PAIRED, "figures": list(parts),
           "pairs": pairs, "method": method, "ranks": ranks(values, present, models, parts), "ranks_method": RANKS}
    return out | ({"values": asked(figures, models, wanted)} if wanted else {})
