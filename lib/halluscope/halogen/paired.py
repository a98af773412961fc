"""Paired differences of HALOGEN's figures between every two models, per task, over the items both
answered: R, H and U of model a minus those of model b, each with its paired standard error and
95% interval (``contract.errorbars.paired_difference``). Models answer the same prompts, so an
item's difficulty is common to both and cancels in the difference; the unpaired error (the two
models' errors combined as if independent) overstates it."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from halluscope.contract.errorbars import PAIRED_SE, interval, paired_difference
from halluscope.contract.metrics import PAIRED

# what the comparison reads of every model's scores, beside model and task
COMPARE_COLUMNS = ("item_id", "error", "responded", "f", "g")
# figure -> (its numerator, its denominator; None: one per item) among _grid's values
_PARTS: dict[str, tuple[str, str | None]] = {"response_ratio": ("responded", None),
                                             "hallucination_score": ("f", "responded"),
                                             "utility_score": ("g", None)}
FIGURES = tuple(_PARTS)


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


def paired(scores: pa.Table, tasks: list[str]) -> list[dict]:
    """A record per task: every two models' differences over the items both scored (no error)."""
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
        for a, b in combinations(range(len(models)), 2):  # models in sorted order
            both = present[a] & present[b]
            pairs.append({"a": models[a], "b": models[b], "n": int(both.sum()), **_pair(values, a, b, both)})
        out.append({"model": "*", "task": task, "aggregate": True, "table": PAIRED, "figures": list(FIGURES),
                    "pairs": pairs, "method": PAIRED_SE})
    return out
