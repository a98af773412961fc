"""Paired differences of HALOGEN's figures between two models, per task, over the items both
answered: R, H and U of model a minus those of model b, each with its paired standard error and
95% interval, kept pairs and rank intervals as ``contract.pairing`` makes them; here, only which
parts of a scored item make each figure."""

from __future__ import annotations

from collections.abc import Collection

import pyarrow as pa
import pyarrow.compute as pc

from halluscope.contract.pairing import Grid, Parts, grid, record

# what the comparison reads of every model's scores, beside model and task
COMPARE_COLUMNS = ("item_id", "error", "responded", "f", "g")
# figure -> (its numerator, its denominator; None: one per item) among _grid's values
_PARTS: Parts = {"response_ratio": ("responded", None), "hallucination_score": ("f", "responded"),
                 "utility_score": ("g", None)}
FIGURES = tuple(_PARTS)


def _grid(rows: pa.Table) -> Grid:
    """The task's models, whether each answered each item (models x items), and per figure its
    numerator and denominator per model and item: R = responded / 1, H = f if responded /
    responded, U = g / 1."""
    responded = rows.column("responded").fill_null(False).to_numpy(zero_copy_only=False).astype(float)
    f = rows.column("f").fill_null(0.0).to_numpy(zero_copy_only=False) * responded
    g = rows.column("g").fill_null(0.0).to_numpy(zero_copy_only=False)
    return grid(rows.column("model"), rows.column("item_id"), {"responded": responded, "f": f, "g": g})


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
        if rows.num_rows:
            out.append(record(task, _grid(rows), _PARTS, wanted))
    return out
