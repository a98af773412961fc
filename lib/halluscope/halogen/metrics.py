"""HALOGEN's response ratio, hallucination score and utility score per (model, task).

Computed from the ``scores`` table read back from storage, with sums over rows (never means of
shard means). Generations that failed are excluded and counted as errors; items with no recorded
response (not in a replay file) are excluded and counted apart, as missing: they are not failures.

Each figure comes with its standard error and a 95% interval (``stderr``, ``ci95``, ``method``):
the response ratio, the hallucination score and the utility score are means over the items (one
generation per prompt: the prompt is the sampled unit), so their errors are the analytic ones of a
mean; the micro score is a ratio of sums over responses, whose error is the delta method's,
clustered by response. The averages over tasks (Tables 2 and 3) are the engine's: the groups
``benchmark.py`` declares, unweighted means of independent task means.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from halluscope.contract.errorbars import bars, mean_se, proportion_se, ratio_se
from halluscope.records import MISSING

AVG_RESPONSE = "halogen/avg-response"
AVG_REFUSAL = "halogen/avg-refusal"


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


MEAN_SE = "analytic standard error of a mean over items (one generation per prompt)"
RATIO_SE = "delta-method standard error of a ratio of sums, clustered by response"


TOP_UNITS = 30  # most frequent unsupported units kept per (model, task)


def _counted(scores: pa.Table) -> pa.ChunkedArray:
    """Rows scored without error that responded: they add their atoms, f and unsupported units."""
    return pc.and_(pc.is_null(scores.column("error")), scores.column("responded").fill_null(False))


def _sums(scores: pa.Table, counted: pa.ChunkedArray) -> dict[tuple[str, str], dict]:
    """Counts, atom totals and the f and g values per (model, task), summed by Arrow: scored rows
    (no error) are items, ``counted`` ones add their atoms and f."""
    error = scores.column("error")
    scored = pc.is_null(error)
    zero = pa.scalar(0, pa.int64())
    flags = pa.table({
        "model": scores.column("model"), "task": scores.column("task"),
        "n_missing": pc.equal(error, MISSING).fill_null(False), "n_items": scored,
        "n_errors": pc.not_equal(error, MISSING).fill_null(False), "n_responded": counted,
        **{k: pc.if_else(counted, scores.column(k).cast(pa.int64()), zero)
           for k in ("n_atoms", "n_unsupported", "n_unverified")},
        "g": pc.if_else(scored, scores.column("g"), None), "f": pc.if_else(counted, scores.column("f"), None),
        # per responded generation: its unsupported and its verified atoms, the micro score's clusters
        "u": pc.if_else(counted, scores.column("n_unsupported").cast(pa.int64()), None),
        "v": pc.if_else(counted, pc.subtract(scores.column("n_atoms").cast(pa.int64()),
                                             scores.column("n_unverified").cast(pa.int64())), None)})
    counts = ["n_items", "n_errors", "n_missing", "n_responded", "n_atoms", "n_unsupported", "n_unverified"]
    lists = ["g", "f", "u", "v"]
    grouped = flags.group_by(["model", "task"], use_threads=False).aggregate(
        [(k, "sum") for k in counts] + [(k, "list") for k in lists])
    return {(r["model"], r["task"]): {**{k: r[f"{k}_sum"] for k in counts},
                                      **{k: [v for v in r[f"{k}_list"] if v is not None] for k in lists}}
            for r in grouped.to_pylist()}


def _top_unsupported(scores: pa.Table, counted: pa.ChunkedArray) -> dict[tuple[str, str], list[list]]:
    """The ``TOP_UNITS`` units found unsupported in the most responses (a response counts a unit
    once) per (model, task), e.g. package names the PyPI snapshot lacks; ties by name, so the
    order rows were read in does not decide which are shown. Counted on integer codes of the
    units (617,288 of them in the demo, 136,955 distinct), not on the strings."""
    if "unsupported_atoms" not in scores.column_names:
        return {}
    named = pc.and_(counted, pc.greater(pc.list_value_length(scores.column("unsupported_atoms")), 0))
    rows = scores.filter(named)
    units = rows.column("unsupported_atoms").combine_chunks()
    flat = pc.list_flatten(units)
    valid = flat.is_valid()
    unit = flat.filter(valid).dictionary_encode()
    if not len(unit):
        return {}
    names, codes = unit.dictionary, unit.indices.to_numpy()
    model, task = (rows.column(c).combine_chunks().dictionary_encode() for c in ("model", "task"))
    group = model.indices.to_numpy().astype(np.int64) * len(task.dictionary) + task.indices.to_numpy()
    row = pc.list_parent_indices(units).filter(valid).to_numpy()
    n = len(names)
    named_once = np.unique(row.astype(np.int64) * n + codes)  # (response, unit), each once
    keys, counts = np.unique(group[named_once // n] * n + named_once % n, return_counts=True)
    key_group, key_unit = keys // n, keys % n
    by_name = np.empty(n, np.int64)
    by_name[pc.sort_indices(names).to_numpy()] = np.arange(n)
    order = np.lexsort((by_name[key_unit], -counts, key_group))
    ranked_group = key_group[order]
    starts = np.flatnonzero(np.r_[True, ranked_group[1:] != ranked_group[:-1]])
    rank = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    out: dict[tuple[str, str], list[list]] = defaultdict(list)
    models, tasks = model.dictionary.to_pylist(), task.dictionary.to_pylist()
    for i in order[rank < TOP_UNITS]:
        g = int(key_group[i])
        out[(models[g // len(tasks)], tasks[g % len(tasks)])].append([names[int(key_unit[i])].as_py(), int(counts[i])])
    return out


def task_metrics(scores: pa.Table) -> list[dict]:
    kinds = {r["task"]: r["task_kind"] for r in
             scores.select(["task", "task_kind"]).group_by(["task", "task_kind"], use_threads=False).aggregate(
                 []).to_pylist()}
    # per-generation f and g are summed exactly (math.fsum) so the result does not depend on the
    # order in which parts were written or read
    counted = _counted(scores)
    acc = _sums(scores, counted)
    top = _top_unsupported(scores, counted)
    out = []
    for (model, task), a in sorted(acc.items()):
        figures = {
            "response_ratio": _ratio(a["n_responded"], a["n_items"]),
            # macro, as the paper defines it: mean over responded generations of f(y)
            "hallucination_score": _ratio(math.fsum(a["f"]), a["n_responded"]),
            # micro: unsupported atoms over verified atoms, pooled over responded generations
            "hallucination_score_micro": _ratio(a["n_unsupported"], a["n_atoms"] - a["n_unverified"]),
            "utility_score": _ratio(math.fsum(a["g"]), a["n_items"]),
        }
        errors = {"response_ratio": proportion_se(int(a["n_responded"]), int(a["n_items"])),
                  "hallucination_score": mean_se(a["f"]),
                  "hallucination_score_micro": ratio_se(a["u"], a["v"]),
                  "utility_score": mean_se(a["g"])}
        out.append({
            "model": model, "task": task, "task_kind": kinds[task],
            "n_items": int(a["n_items"]), "n_errors": int(a["n_errors"]), "n_missing": int(a["n_missing"]),
            "n_responded": int(a["n_responded"]),
            "n_atoms": int(a["n_atoms"]), "n_unsupported": int(a["n_unsupported"]),
            "n_unverified": int(a["n_unverified"]),
            **figures,
            "top_unsupported": top.get((model, task), []),
            **bars(figures, errors, {k: RATIO_SE if k == "hallucination_score_micro" else MEAN_SE for k in figures}),
        })
    return out


CORRECTED = "@corrected"


def rule_set(task: str) -> str:
    """The rule set a task's name carries: ``halogen/code`` (paper) or ``halogen/code@corrected``."""
    return "corrected" if task.endswith(CORRECTED) else "paper"


# what task_metrics reads of the scores table
SCORE_COLUMNS = ("model", "task", "task_kind", "error", "responded", "n_atoms", "n_unsupported", "n_unverified",
                 "f", "g", "unsupported_atoms")

