"""HalluLens metrics of a run: its rows read back as judged records, per model, trial and task,
then the paper's rates per trial and their mean and standard deviation over trials.

NonExistentRefusal's two subtasks are two tasks of the run; their headline is the mean of the
subtask rates, reported under ``hallulens/nonexistent``. A model the options' ``far_overrides``
name (by default: Gemma, medicine, 0) gets that domain's rate set by hand, as in the paper; the
record lists each override applied with the measured rates, and the summary holds both.
"""

from __future__ import annotations

import json
from collections import defaultdict
from functools import partial
from typing import Any, Callable, Iterable

import pyarrow as pa

from halluscope.hallulens.options import HalluLensOptions
from halluscope.hallulens import judging, metrics as hm
from halluscope.contract.benchmark import MetricInputs

PWQA, LONGWIKI = "hallulens/precise_wikiqa", "hallulens/longwiki"
# the verdicts compute() reads: PreciseWikiQA's, whose evidence is the answer's correctness label
LABEL_VERDICTS = {"columns": ["gen_id", "task", "evidence"], "filters": [("task", "=", PWQA)]}
SUBTASKS = {"hallulens/nonexistent_mixed": "mixed", "hallulens/nonexistent_generated": "generated"}
NONEXISTENT = "hallulens/nonexistent"


def _judged(task: str, s: dict, fields: dict, label: str | None) -> Any:
    error, responded, b = s["error"], s["responded"], fields.get("bin")
    if task == PWQA:
        return hm.QAJudged(s["item_id"], None if error else not responded,
                           label if responded and label in judging.LABELS else None, b, error)
    if task == LONGWIKI:
        n_unverified = s["n_unverified"] if responded else 0
        n_supported = s["n_atoms"] - s["n_unsupported"] - n_unverified if responded else 0
        return hm.LongFormJudged(s["item_id"], None if error else not responded, s["n_atoms"] if responded else 0,
                                 n_supported, n_unverified, b, error)
    return hm.EntityJudged(s["item_id"], SUBTASKS[task], str(b), None if error else bool(responded), error)


def far_overrides(model: str, options: HalluLensOptions) -> list[hm.DomainOverride]:
    """The hand-set NonExistentRefusal rates that apply to a model (matched on its id, any case)."""
    return [hm.DomainOverride(o.subtask, o.domain, o.value, f"model id contains {o.model_contains!r}")
            for o in options.far_overrides if o.model_contains.lower() in model.lower()]


def _record(model: str, task: str, trials: list[dict], keys: tuple[str, ...]) -> dict:
    record = {"model": model, "task": task, "benchmark": "hallulens", "n_trials": len(trials),
              "summary": hm.over_trials(trials, keys), "trials": trials}
    applied = [{"trial": t["trial"], "task": f"hallulens/nonexistent_{o['subtask']}", **o}
               for t in trials for o in t.get("overrides", [])]
    if applied:  # the measured rates stay beside the ones the overrides changed
        record["overrides"] = applied
        subtasks = sorted({o["subtask"] for o in applied})
        record["summary"].update(hm.over_trials(trials, [
            "measured_false_acceptance_rate", *(f"subtasks.{s}.measured_false_acceptance_rate" for s in subtasks)]))
    return record


def compute(scores: pa.Table, verdicts: pa.Table, items: dict[str, pa.Table],
            options: HalluLensOptions = HalluLensOptions()) -> list[dict]:
    """One record per (model, HalluLens task): trial count, mean/std of the paper's metrics, and
    each trial's full breakdown (counts, per-bin and per-domain rates)."""
    fields = {(task, r["item_id"]): json.loads(r["fields"])
              for task, t in items.items() for r in t.select(["item_id", "fields"]).to_pylist()}
    # PreciseWikiQA's correctness label is the evidence of the answer's verdict
    labels = {v["gen_id"]: v["evidence"] for v in verdicts.select(["gen_id", "task", "evidence"]).to_pylist()
              if v["task"] == PWQA}
    per_trial: dict[tuple[str, str, int], list] = defaultdict(list)
    for s in scores.to_pylist():
        task = s["task"]
        if not task.startswith("hallulens/"):
            continue
        f = fields.get((task, s["item_id"]), {})
        group = NONEXISTENT if task in SUBTASKS else task
        per_trial[(s["model"], group, int(f.get("trial", 0)))].append(_judged(task, s, f, labels.get(s["gen_id"])))
    aggregate: dict[str, tuple[Callable[[Iterable], dict], tuple[str, ...]]] = {
        PWQA: (hm.precise_wikiqa, hm.PRECISE_WIKIQA_KEYS), LONGWIKI: (hm.longwiki, hm.LONGWIKI_KEYS),
        NONEXISTENT: (hm.nonexistent, hm.NONEXISTENT_KEYS)}
    grouped: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for (model, task, trial), records in sorted(per_trial.items()):
        rates = partial(hm.nonexistent, overrides=far_overrides(model, options)) if task == NONEXISTENT \
            else aggregate[task][0]
        grouped[(model, task)].append({"trial": trial, **rates(records)})
    return [_record(model, task, trials, aggregate[task][1]) for (model, task), trials in sorted(grouped.items())]


def metrics(inputs: MetricInputs) -> list[dict]:
    """The engine's hook: HalluLens records from the run's committed rows (only PreciseWikiQA's
    verdicts are read: evidence passages are the largest column)."""
    options = inputs.options
    assert isinstance(options, HalluLensOptions)
    return compute(inputs.scores, inputs.read_table("verdicts", **LABEL_VERDICTS),
                   {t: inputs.items(t) for t in inputs.tasks}, options)


def _cell(summary: dict, key: str) -> str:
    m = summary.get(key, {})
    if m.get("mean") is None:
        return "-"
    return f"{100 * m['mean']:.1f}" + (f" ± {100 * m['std']:.1f}" if m.get("std") is not None else "")


PREAMBLE = (
    "Each trial is one test set; a number is the mean over trials, ± their sample standard deviation (none "
    "with one trial). PreciseWikiQA: false refusal = share of questions the model declined; hallucination = "
    "share of its answers the judge did not find correct (lower is better); correct = share of all questions "
    "answered correctly. LongWiki: false refusal as above; precision = share of the answers' claims the "
    "judge found supported by the Wikipedia article; recall@K = supported claims over K (32 by default), "
    "capped at 1; F1@K their harmonic mean (higher is better). NonExistent FAR (false acceptance rate) = "
    "share of made-up names (mixed: real names recombined; generated: names written by a model) the model "
    "treats as real, per subtask and their mean (lower is better).")


def leaderboard_section(records: list[dict]) -> list[str]:
    """HalluLens in the layout of the paper's Table 2 (percent, mean ± sample std over trials)."""
    if not records:
        return []
    by_model: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in records:
        by_model[r["model"]][r["task"]] = r["summary"]
    lines = ["## HalluLens (percent; mean ± std over trials)", "", PREAMBLE, "",
             "| model | PWQA false refusal | PWQA hallucination | PWQA correct | LongWiki false refusal | "
             "LongWiki precision | LongWiki recall@32 | LongWiki F1@32 | NonExistent FAR mixed | "
             "NonExistent FAR generated | NonExistent FAR |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for model, tasks in sorted(by_model.items()):
        pw, lw, ne = tasks.get(PWQA, {}), tasks.get(LONGWIKI, {}), tasks.get(NONEXISTENT, {})
        cells = [_cell(pw, k) for k in hm.PRECISE_WIKIQA_KEYS] + [_cell(lw, k) for k in hm.LONGWIKI_KEYS] + \
                [_cell(ne, k) for k in hm.NONEXISTENT_KEYS[1:]] + [_cell(ne, hm.NONEXISTENT_KEYS[0])]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    notes = _override_notes(records)
    return lines + [""] + (["Set by hand, as in the paper:", "", *notes, ""] if notes else [])


def _override_notes(records: list[dict]) -> list[str]:
    """One line per model and overridden domain: the value set, and the rates it replaced."""
    out = []
    for r in records:
        measured: dict[tuple, list[str]] = defaultdict(list)
        for o in r.get("overrides", []):
            measured[(o["task"], o["domain"], o["value"], o["rule"])].append(f"{100 * o['measured']:.1f}")
        out += [f"- {r['model']}: {task} {domain} false acceptance rate set to {100 * value:.1f} ({rule}); "
                f"measured per trial: {', '.join(rates)}; NonExistent FAR as measured: "
                f"{_cell(r['summary'], 'measured_false_acceptance_rate')}"
                for (task, domain, value, rule), rates in measured.items()]
    return out
