"""FEWL's metrics from a run's committed rows, and its leaderboard and report sections.

Per model under test: the mean FEWL score of its answers with the truthfulness and penalty terms,
and the mean under each of the paper's methods. Per task, once: the paper's evaluation of FEWL
as a measure (share of questions where the labelled true answer outscores the other, answers
ranked first, the baselines), from the labelled candidates each verdict scored; the candidates'
scores do not depend on the model whose row scored them, so each question's first row is used.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence

from halluscope.contract.benchmark import MetricInputs
from halluscope.contract.errorbars import bars, mean_se
from halluscope.contract.metrics import PAIRED, MetricRecord
from halluscope.contract.report import Sampled, Section, Table
from halluscope.contract.task import Item
from halluscope.fewl import paired
from halluscope.fewl.evaluate import default_pairs, tally
from halluscope.fewl.task import question_of
from halluscope.report import ranking

EVALUATION = "(labelled candidates)"  # the model column of the evaluation record
SCORE_COLUMNS = ("gen_id", "model", "task", "item_id")  # what the metrics read of ``scores``


def _mean(values: list[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


QUESTION_MEAN_SE = "analytic standard error of a mean over the scored questions (one answer per question)"


def _model_record(model: str, task: str, rows: list[dict], evidence: dict[str, dict]) -> dict:
    scored = [evidence[r["gen_id"]] for r in rows if "score" in evidence.get(r["gen_id"], {})]
    methods: dict[str, list[float]] = defaultdict(list)
    for e in scored:
        for m, s in e["methods"].items():
            if not isinstance(s, str):
                methods[m].append(s)
    per_item = {"mean_score": [e["score"] for e in scored], "mean_truthfulness": [e["truthfulness"] for e in scored],
                "mean_penalty": [e["penalty"] for e in scored],
                "share_above_zero": [float(e["score"] > 0) for e in scored]}
    figures = {k: _mean(v) for k, v in per_item.items()}
    return {"model": model, "task": task, "items": len(rows), "scored": len(scored),
            "unscored": len(rows) - len(scored), **figures,
            "methods": {m: _mean(v) for m, v in sorted(methods.items())},
            **bars(figures, {k: mean_se(v) for k, v in per_item.items()}, dict.fromkeys(figures, QUESTION_MEAN_SE))}


def _evaluation_record(task: str, items: list[Item], first: dict[str, dict]) -> dict:
    questions = [question_of(i) for i in items]
    candidates = {qid: e["candidates"] for qid, e in first.items()}
    setup = next(iter(first.values()), {}).get("setup")
    methods = sorted({m for c in candidates.values() for m in c}, key=lambda m: (m != "fewl", m))
    labels: dict[tuple[str, str], list[float]] = defaultdict(list)
    for q in questions:
        for m, by_key in candidates.get(q.question_id, {}).items():
            if isinstance(by_key, dict):
                for c in q.candidates:
                    labels[(m, str(c.label))].append(by_key[c.key])
    report = tally(questions, candidates, {m: setup or "" for m in methods}, default_pairs(questions))
    return {"model": EVALUATION, "task": task, "dataset": questions[0].dataset, "questions": len(questions),
            "scored_questions": len(first), "evaluation": report.to_dict(),
            "mean_by_label": [{"method": m, "label": label, "n": len(v), "mean": _mean(v)}
                              for (m, label), v in sorted(labels.items())]}


def metrics(inputs: MetricInputs) -> list[MetricRecord]:
    """The engine's hook: one record per model under test and task, and the task's evaluation.
    The verdicts' evidence is read one (task, model) at a time and, for the evaluation, only each
    question's first is kept: the driver holds one model's evidence, not the run's."""
    out: list[dict] = []
    rows = sorted(inputs.scores.select(list(SCORE_COLUMNS)).to_pylist(),
                  key=lambda r: (r["task"], r["model"], r["item_id"]))
    for task in inputs.tasks:
        by_model: dict[str, list[dict]] = defaultdict(list)
        for r in rows:
            if r["task"] == task:
                by_model[r["model"]].append(r)
        first: dict[str, dict] = {}
        for model, mine in sorted(by_model.items()):
            evidence = paired.evidence(inputs, task, model)
            out.append(_model_record(model, task, mine, evidence))
            for r in mine:
                e = evidence.get(r["gen_id"], {})
                if "candidates" in e:
                    first.setdefault(r["item_id"], e)
        table = inputs.items(task).to_pylist()
        items = [Item(task, i["item_id"], i["prompt"], json.loads(i["fields"])) for i in table]
        if items:
            out.append(_evaluation_record(task, items, first))
    return [MetricRecord.from_json(r) for r in out]


def _num(x: float | None, pct: bool = False) -> str:
    return "-" if x is None else (f"{100 * x:.1f}" if pct else f"{x:.4f}")


def _tables(records: list[dict]) -> Iterable[Table]:
    """FEWL's tables, cells as plain text."""
    models = [r for r in records if r["model"] != EVALUATION]
    if models:
        methods = sorted({m for r in models for m in r["methods"]}, key=lambda m: (m != "fewl", m))
        yield Table("FEWL scores of the models' answers (higher: less hallucinated)",
                    ["model", "task", "scored", "unscored", "FEWL", "truthfulness", "penalty", "share > 0 (%)",
                     *methods],
                    [[r["model"], r["task"], str(r["scored"]), str(r["unscored"]),
                      Sampled(_num(r["mean_score"]), r["model"], r["task"]),
                      _num(r["mean_truthfulness"]), _num(r["mean_penalty"]), _num(r["share_above_zero"], True),
                      *(_num(r["methods"].get(m)) for m in methods)] for r in models])
    for r in records:
        if r["model"] != EVALUATION:
            continue
        ev = r["evaluation"]
        where = f"{r['task']} on {r['dataset']}, {r['scored_questions']} of {r['questions']} questions scored"
        yield Table(f"Evaluation against the labelled answers ({where}): share of questions where the first "
                    "label scores above the second",
                    ["method", "pair", "wins", "ties", "losses", "share (%)", "skipped"],
                    [[t["method"], f"{t['positive']} > {t['negative']}", str(t["wins"]), str(t["ties"]),
                      str(t["losses"]), _num(t["share"], True),
                      ", ".join(f"{k} {v}" for k, v in t["skipped"].items()) or "-"] for t in ev["pairwise"]])
        yield Table("Ranked first", ["method", "label", "first", "compared"],
                    [[t["method"], t["label"], str(t["first"]), str(t["compared"])] for t in ev["ranked_first"]])
        yield Table("Mean score per label", ["method", "label", "n", "mean"],
                    [[m["method"], m["label"], str(m["n"]), _num(m["mean"])] for m in r["mean_by_label"]])


PREAMBLE = (
    "FEWL scores an answer without a gold answer: its agreement with the answers of the run's reference models, "
    "each weighted by how well that reference tells the corrected statements from the wrong ones the generator "
    "wrote (expertise), less a penalty when the answer merely echoes what the references say to similar "
    "questions (laziness). Higher is less hallucinated; the other columns are the paper's variants (single: one "
    "reference; multi: every reference at equal weight; with or without the penalty). The evaluation scores the "
    "dataset's labelled answers the same way: the share of questions where the first label (e.g. best) scores "
    "above the second (e.g. bad).")


SEPARATIONS = ("Adjacent models in each task's ranking by mean FEWL score, told apart when their difference exceeds "
               "its 95% interval: paired, over the questions both had scored (metrics.json holds the differences "
               "of every figure, table \"paired\"); where a run has no paired record, their errors taken as "
               "unpaired, which overstates it.")
INTERVALS = ("The ranks a model can hold on a task, given which of its paired differences in mean FEWL score exceed "
             "their 95% interval; rank 1 is the lowest score. A model with no scored question has no rank.")


def sections(records: Sequence[MetricRecord]) -> list[Section]:
    """The report hook: FEWL's section of leaderboard.md and report.html (read from the records' flat
    objects)."""
    every = [r.as_json() for r in records]
    compared = [r for r in every if r.get("table") == PAIRED]
    rows = [r for r in every if r.get("table") != PAIRED]
    told = [ranking.rank_separations([r for r in rows if r["model"] != EVALUATION], compared, "mean_score", "FEWL",
                                     [SEPARATIONS]),
            ranking.rank_intervals(compared, "mean_score", "Rank intervals by FEWL score (1: the lowest score, the "
                                                           "most hallucinated)", [INTERVALS])]
    return [Section("FEWL", [PREAMBLE], parts=[*_tables(rows), *(t for t in told if t is not None)])]
