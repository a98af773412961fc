"""HALOGEN's response ratio, hallucination score and utility score per (model, task).

Computed from the ``scores`` table read back from storage, with sums over rows (never means of
shard means). Generations that failed are excluded and counted as errors; items with no recorded
response (not in a replay file) are excluded and counted apart, as missing: they are not failures.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import pyarrow as pa

from halluscope.records import MISSING

AVG_RESPONSE = "halogen/avg-response"
AVG_REFUSAL = "halogen/avg-refusal"


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


TOP_UNITS = 30  # most frequent unsupported units kept per (model, task)


def task_metrics(scores: pa.Table) -> list[dict]:
    cols = ["model", "task", "task_kind", "error", "responded", "f", "g", "n_atoms", "n_unsupported", "n_unverified"]
    units = "unsupported_atoms" in scores.column_names
    acc: dict[tuple[str, str], dict] = defaultdict(lambda: defaultdict(float))
    # what was found unsupported, by responses naming it (e.g. package names the PyPI snapshot lacks)
    unsupported: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    # per-generation f and g, summed exactly (math.fsum) so the result does not depend on the
    # order in which parts were written or read
    fs: dict[tuple[str, str], list[float]] = defaultdict(list)
    gs: dict[tuple[str, str], list[float]] = defaultdict(list)
    kinds: dict[str, str] = {}
    for r in scores.select(cols + ["unsupported_atoms"] * units).to_pylist():
        a = acc[(r["model"], r["task"])]
        kinds[r["task"]] = r["task_kind"]
        if r["error"] is not None:
            a["n_missing" if r["error"] == MISSING else "n_errors"] += 1
            continue
        a["n_items"] += 1
        gs[(r["model"], r["task"])].append(r["g"])
        if r["responded"]:
            a["n_responded"] += 1
            fs[(r["model"], r["task"])].append(r["f"])
            a["n_atoms"] += r["n_atoms"]
            a["n_unsupported"] += r["n_unsupported"]
            a["n_unverified"] += r["n_unverified"]
            if units:
                unsupported[(r["model"], r["task"])].update(set(r["unsupported_atoms"]))
    out = []
    for (model, task), a in sorted(acc.items()):
        out.append({
            "model": model, "task": task, "task_kind": kinds[task],
            "n_items": int(a["n_items"]), "n_errors": int(a["n_errors"]), "n_missing": int(a["n_missing"]),
            "n_responded": int(a["n_responded"]),
            "n_atoms": int(a["n_atoms"]), "n_unsupported": int(a["n_unsupported"]),
            "n_unverified": int(a["n_unverified"]),
            "response_ratio": _ratio(a["n_responded"], a["n_items"]),
            # macro, as the paper defines it: mean over responded generations of f(y)
            "hallucination_score": _ratio(math.fsum(fs[(model, task)]), a["n_responded"]),
            # micro: unsupported atoms over verified atoms, pooled over responded generations
            "hallucination_score_micro": _ratio(a["n_unsupported"], a["n_atoms"] - a["n_unverified"]),
            "utility_score": _ratio(math.fsum(gs[(model, task)]), a["n_items"]),
            # ties by name: the order rows were read in must not decide which names are shown
            "top_unsupported": [[u, n] for u, n in sorted(unsupported[(model, task)].items(),
                                                          key=lambda kv: (-kv[1], kv[0]))[:TOP_UNITS]],
        })
    return out


CORRECTED = "@corrected"


def rule_set(task: str) -> str:
    """The rule set a task's name carries: ``halogen/code`` (paper) or ``halogen/code@corrected``."""
    return "corrected" if task.endswith(CORRECTED) else "paper"


def averages(per_task: list[dict]) -> list[dict]:
    """Unweighted means over a model's response-based and refusal-based tasks (as Tables 2-3),
    one set per rule set: the paper rules' under ``halogen/avg-*``, the corrected rules' under
    ``halogen/avg-*@corrected``."""
    groups: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for r in per_task:
        groups[(r["model"], r["task_kind"], rule_set(r["task"]))].append(r)
    out = []
    for (model, kind, rules), rows in sorted(groups.items()):
        task = AVG_RESPONSE if kind == "response" else AVG_REFUSAL
        rec = {"model": model, "task": task + (CORRECTED if rules == "corrected" else ""), "task_kind": kind,
               "aggregate": True, "n_tasks": len(rows), "n_items": sum(r["n_items"] for r in rows),
               "n_errors": sum(r["n_errors"] for r in rows)}
        for key in ("response_ratio", "hallucination_score", "hallucination_score_micro", "utility_score"):
            vals = [r[key] for r in rows if r[key] is not None and not math.isnan(r[key])]
            rec[key] = sum(vals) / len(vals) if vals else None
        out.append(rec)
    return out


def compute(scores: pa.Table) -> list[dict]:
    per_task = task_metrics(scores)
    return per_task + averages(per_task)
