"""Paired differences of HalluLens' figures between two models, per task, over the prompts both
had scored (``contract.pairing``). The unit is the prompt: where a prompt comes back in several
trials, its trials are repeated measures of one item, so their counts are summed into the
prompt's numerator and denominator rather than counted as independent items.

Every figure is a ratio of sums over prompts: PreciseWikiQA's rates and the false refusal and
acceptance rates are counts over counts; LongWiki's precision, Recall@K and F1@K are means of
per-prompt values over the answered prompts (a prompt's value over the answered indicator), so
the delta method's paired error applies to each as it does to HALOGEN's H. NonExistentRefusal's
headline, the mean of the two subtasks' rates, pairs as the mean of their paired differences
(the subtasks' items are independent). Rates set by hand (``far_overrides``) are not sampled:
the pairs are of the measured rates."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from halluscope.contract.benchmark import MetricInputs
from halluscope.contract.errorbars import interval
from halluscope.contract.metrics import PAIRED, MetricRecord
from halluscope.contract.pairing import Parts, grid, record
from halluscope.hallulens import metrics as hm
from halluscope.hallulens.report import LABEL_VERDICTS, LONGWIKI, NONEXISTENT, PWQA, SCORE_COLUMNS, SUBTASKS, judged

# what the comparison reads of every model's scores, beside model and task
COMPARE_COLUMNS = tuple(c for c in SCORE_COLUMNS if c not in ("model", "task"))
_PWQA: Parts = {"false_refusal_rate": ("abstained", "scored"), "hallucination_rate": ("hallucinated", "answered"),
                "correct_rate": ("correct", "scored")}
_LONGWIKI: Parts = {"false_refusal_rate": ("refused", "scored"), "precision": ("precision", "answered"),
                    "recall_at_k": ("recall", "answered"), "f1_at_k": ("f1", "answered")}
_NONEXISTENT: Parts = {"false_acceptance_rate": ("accepted", "scored")}
SUBTASK_MEAN = ("the mean of the two subtasks' paired differences, its error sqrt(se_mixed^2 + se_generated^2) / 2 "
                "(their items independent); measured rates, before any set by hand")


def _qa(r: hm.QAJudged) -> dict[str, float] | None:
    if r.error is not None or r.abstained is None or (not r.abstained and r.verdict is None):
        return None
    answered = not r.abstained
    return {"scored": 1.0, "abstained": float(r.abstained), "answered": float(answered),
            "hallucinated": float(answered and r.verdict in (hm.INCORRECT, hm.UNVERIFIABLE)),
            "correct": float(answered and r.verdict == hm.CORRECT)}


def _longwiki(r: hm.LongFormJudged) -> dict[str, float] | None:
    """As ``metrics.longwiki`` with its defaults: a prompt without claims is a refusal."""
    decided = r.n_claims - r.n_unverified
    if r.error is not None or r.refused is None:
        return None
    if r.refused or r.n_claims == 0:
        return {"scored": 1.0, "refused": 1.0, "answered": 0.0, "precision": 0.0, "recall": 0.0, "f1": 0.0}
    if not decided:
        return None
    p, rec, f1 = hm.prompt_scores(r.n_supported, decided, hm.LONGWIKI_K)
    return {"scored": 1.0, "refused": 0.0, "answered": 1.0, "precision": p, "recall": rec, "f1": f1}


def _entity(r: hm.EntityJudged) -> dict[str, float] | None:
    return None if r.error is not None or r.believes is None else {"scored": 1.0, "accepted": float(r.believes)}


def _task(inputs: MetricInputs, task: str, labels: Mapping[str, str]) -> dict | None:
    rows = inputs.scores.filter(pc.equal(inputs.scores.column("task"), task)).sort_by(
        [("model", "ascending"), ("item_id", "ascending")])
    items = inputs.items(task).select(["item_id", "prompt", "fields"]).to_pylist()
    fields = {i["item_id"]: json.loads(i["fields"]) for i in items}
    prompts = {i["item_id"]: i["prompt"] for i in items}
    models, units = [], []
    parts: dict[str, list[float]] = defaultdict(list)
    for s in rows.to_pylist():
        j = judged(task, s, fields.get(s["item_id"], {}), labels.get(s["gen_id"]))
        counts = _qa(j) if task == PWQA else _longwiki(j) if task == LONGWIKI else _entity(j)
        if counts is not None:
            models.append(s["model"])
            units.append(prompts.get(s["item_id"], s["item_id"]))
            for k, v in counts.items():
                parts[k].append(v)
    if not models:
        return None
    table = grid(pa.chunked_array([models], pa.string()), pa.chunked_array([units], pa.string()),
                 {k: np.array(v) for k, v in parts.items()})
    return record(task, table, {PWQA: _PWQA, LONGWIKI: _LONGWIKI}.get(task, _NONEXISTENT), inputs.pairs)


def _headline(mixed: dict, generated: dict) -> dict:
    """NonExistentRefusal's false acceptance rate (the mean of the subtasks') for the pairs both
    subtasks hold."""
    key = "false_acceptance_rate"
    other = {(p["a"], p["b"]): p for p in generated["pairs"]}
    pairs = []
    for p in mixed["pairs"]:
        q = other.get((p["a"], p["b"]))
        if q is None:
            continue
        d1, d2 = p[key], q[key]
        diff = None if d1["diff"] is None or d2["diff"] is None else (d1["diff"] + d2["diff"]) / 2
        se = None if d1["stderr"] is None or d2["stderr"] is None else math.hypot(d1["stderr"], d2["stderr"]) / 2
        pairs.append({"a": p["a"], "b": p["b"], "n": p["n"] + q["n"],
                      key: {"diff": diff, "stderr": se, "ci95": interval(diff, se)}})
    out = {"model": "*", "task": NONEXISTENT, "aggregate": True, "table": PAIRED, "figures": [key], "pairs": pairs,
           "method": SUBTASK_MEAN}
    if "values" in mixed and "values" in generated:  # the models a reader asked about: the mean of their rates
        rates = {m: (v[key], generated["values"].get(m, {}).get(key)) for m, v in mixed["values"].items()}
        out["values"] = {m: {key: None if None in r else (r[0] + r[1]) / 2} for m, r in rates.items()}
    return out


def paired(inputs: MetricInputs) -> list[MetricRecord]:
    """The compare hook: per task, every two models (and those asked for) over the prompts both had
    scored; and NonExistentRefusal's headline where both subtasks ran."""
    verdicts = inputs.read_table("verdicts", **LABEL_VERDICTS)
    labels = {g: e for g, t, e in zip(*(verdicts.column(c).to_pylist() for c in ("gen_id", "task", "evidence")))
              if t == PWQA}
    out = {task: r for task in inputs.tasks if (r := _task(inputs, task, labels)) is not None}
    subtasks = [out.get(t) for t in SUBTASKS]
    if subtasks[0] is not None and subtasks[1] is not None:
        out[NONEXISTENT] = _headline(subtasks[0], subtasks[1])
    return [MetricRecord.from_json(r) for r in out.values()]
