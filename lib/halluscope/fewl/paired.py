"""Paired differences of FEWL's figures between two models, per task, over the questions both
had scored: each figure is a mean over questions (one answer per question), so the paired error
is the paired t error of the mean difference (``contract.pairing``). What a question's answer
scored is in its verdict's evidence, read a model at a time."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from halluscope.contract.benchmark import MetricInputs
from halluscope.contract.metrics import MetricRecord
from halluscope.contract.pairing import Parts, grid, record

COMPARE_COLUMNS = ("gen_id", "item_id")  # what the comparison reads of every model's scores
# figure -> its numerator per question (a mean: one per question)
_PARTS: Parts = {"mean_score": ("score", None), "mean_truthfulness": ("truthfulness", None),
                 "mean_penalty": ("penalty", None), "share_above_zero": ("above_zero", None)}


def evidence(inputs: MetricInputs, task: str, model: str) -> dict[str, dict]:
    """gen_id -> the verdict's evidence of one model's answers to a task."""
    verdicts = inputs.read_table("verdicts", columns=["gen_id", "evidence"],
                                 filters=[("task", "==", task), ("model", "==", model)])
    return {g: json.loads(e) for g, e in zip(verdicts.column("gen_id").to_pylist(),
                                             verdicts.column("evidence").to_pylist()) if e}


def paired(inputs: MetricInputs) -> list[MetricRecord]:
    """The compare hook: per task, every two models (and those asked for) over the questions both
    had scored."""
    out = []
    for task in inputs.tasks:
        rows = inputs.scores.filter(pc.equal(inputs.scores.column("task"), task)).select(
            ["model", *COMPARE_COLUMNS]).sort_by([("model", "ascending"), ("item_id", "ascending")])
        models, items = [], []
        parts: dict[str, list[float]] = defaultdict(list)
        for model in pc.unique(rows.column("model")).to_pylist():
            found = evidence(inputs, task, model)
            mine = rows.filter(pc.equal(rows.column("model"), model))
            for gen_id, item in zip(mine.column("gen_id").to_pylist(), mine.column("item_id").to_pylist()):
                e = found.get(gen_id, {})
                if "score" in e:
                    models.append(model)
                    items.append(item)
                    for name in ("score", "truthfulness", "penalty"):
                        parts[name].append(e[name])
                    parts["above_zero"].append(float(e["score"] > 0))
        if models:
            table = grid(pa.chunked_array([models], pa.string()), pa.chunked_array([items], pa.string()),
                         {k: np.array(v, float) for k, v in parts.items()})
            out.append(MetricRecord.from_json(record(task, table, _PARTS, inputs.pairs)))
    return out
