"""HalluLens metrics of a run: its rows read back as judged records, per model, trial and task,
then the paper's rates per trial and their mean and standard deviation over trials; and its
sections of the run's report (``sections``).

NonExistentRefusal's two subtasks are two tasks of the run; their headline is the mean of the
subtask rates, reported under ``hallulens/nonexistent``. A model the options' ``far_overrides``
name (by default: Gemma, medicine, 0) gets that domain's rate set by hand, as in the paper; the
record lists each override applied with the measured rates, and the summary holds both.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any, Literal

import pyarrow as pa

from halluscope.contract.benchmark import MetricInputs
from halluscope.contract.metrics import PAIRED, MetricRecord
from halluscope.contract.report import Cell, Chart, Notes, Point, Sampled, Section, Series, Table
from halluscope.hallulens import judging
from halluscope.hallulens import metrics as hm
from halluscope.hallulens.options import HalluLensOptions
from halluscope.report import ranking

PWQA, LONGWIKI = "hallulens/precise_wikiqa", "hallulens/longwiki"
# the verdicts compute() reads: PreciseWikiQA's, whose evidence is the answer's correctness label
LABEL_VERDICTS = {"columns": ["gen_id", "task", "evidence"], "filters": [("task", "=", PWQA)]}
# what the metrics read of ``scores`` (``judged``): prompts and atoms are most of the table
SCORE_COLUMNS = ("gen_id", "model", "task", "item_id", "error", "responded", "n_atoms", "n_unsupported", "n_unverified")
SUBTASKS: dict[str, Literal["mixed", "generated"]] = {"hallulens/nonexistent_mixed": "mixed",
                                                      "hallulens/nonexistent_generated": "generated"}
NONEXISTENT = "hallulens/nonexistent"


def judged(task: str, s: dict, fields: dict, label: str | None) -> Any:
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
    record: dict[str, Any] = {"model": model, "task": task, "benchmark": "hallulens", "n_trials": len(trials),
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
        per_trial[(s["model"], group, int(f.get("trial", 0)))].append(judged(task, s, f, labels.get(s["gen_id"])))
    aggregate: dict[str, tuple[Callable[[Iterable], dict], tuple[str, ...]]] = {
        PWQA: (hm.precise_wikiqa, hm.PRECISE_WIKIQA_KEYS), LONGWIKI: (hm.longwiki, hm.LONGWIKI_KEYS),
        NONEXISTENT: (hm.nonexistent, hm.NONEXISTENT_KEYS)}
    grouped: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for (model, task, trial), records in sorted(per_trial.items()):
        rates = partial(hm.nonexistent, overrides=far_overrides(model, options)) if task == NONEXISTENT \
            else aggregate[task][0]
        grouped[(model, task)].append({"trial": trial, **rates(records)})
    return [_record(model, task, trials, aggregate[task][1]) for (model, task), trials in sorted(grouped.items())]


def metrics(inputs: MetricInputs) -> list[MetricRecord]:
    """The engine's hook: HalluLens records from the run's committed rows (only PreciseWikiQA's
    verdicts are read: evidence passages are the largest column)."""
    options = inputs.options
    assert isinstance(options, HalluLensOptions)
    rows = compute(inputs.scores, inputs.read_table("verdicts", **LABEL_VERDICTS),
                   {t: inputs.items(t) for t in inputs.tasks}, options)
    return [MetricRecord.from_json(r) for r in rows]


def _value(x: object) -> float | None:
    """A number to show or draw; None for a missing, NaN or non-numeric value."""
    if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x):
        return float(x)
    return None


def _pct(summary: dict, key: str) -> str | None:
    """Percent, mean ± sample std over trials (no ± with one trial); None: no mean."""
    m = summary.get(key) or {}
    mean, std = _value(m.get("mean")), _value(m.get("std"))
    if mean is None:
        return None
    return f"{100 * mean:.1f}" + (f" ± {100 * std:.1f}" if std is not None else "")


PREAMBLE = (
    "Each trial is one test set; a number is the mean over trials, ± their sample standard deviation (none "
    "with one trial). PreciseWikiQA: false refusal = share of questions the model declined; hallucination = "
    "share of its answers the judge did not find correct (lower is better); correct = share of all questions "
    "answered correctly. LongWiki: false refusal as above; precision = share of the answers' claims the "
    "judge found supported by the Wikipedia article; recall@K = supported claims over K (32 by default), "
    "capped at 1; F1@K their harmonic mean (higher is better). NonExistent FAR (false acceptance rate) = "
    "share of made-up names (mixed: real names recombined; generated: names written by a model) the model "
    "treats as real, per subtask and their mean (lower is better).")


def _longwiki_k(records: list[dict]) -> str:
    ks = {t.get("k") for r in records if r["task"] == LONGWIKI for t in r.get("trials", [])} - {None}
    return "/".join(str(k) for k in sorted(ks)) or "K"


def leaderboard_section(records: list[dict]) -> Section:
    """HalluLens in the layout of the paper's Table 2 (percent, mean ± sample std over trials)."""
    k = _longwiki_k(records)
    by_model: dict[str, dict[str, dict]] = defaultdict(dict)
    trials: dict[str, set[int]] = defaultdict(set)
    for r in records:
        by_model[r["model"]][r["task"]] = r.get("summary") or {}
        trials[r["model"]].add(int(r.get("n_trials") or 0))
    columns = ["model", "trials", "PWQA false refusal", "PWQA hallucination", "PWQA correct",
               "LongWiki false refusal", "LongWiki precision", f"LongWiki recall@{k}", f"LongWiki F1@{k}",
               "NonExistent FAR mixed", "NonExistent FAR generated", "NonExistent FAR"]
    rows: list[list[Cell]] = []
    for model, tasks in sorted(by_model.items()):
        pw, lw, ne = tasks.get(PWQA, {}), tasks.get(LONGWIKI, {}), tasks.get(NONEXISTENT, {})
        row: list[Cell] = [model, "/".join(map(str, sorted(trials[model])))]
        row += [Sampled(_pct(pw, key), model, PWQA) for key in hm.PRECISE_WIKIQA_KEYS]
        row += [Sampled(_pct(lw, key), model, LONGWIKI) for key in hm.LONGWIKI_KEYS]
        # each subtask's rate links to its own responses; their mean has none of its own
        rows.append(row + [Sampled(_pct(ne, f"subtasks.{sub}.false_acceptance_rate"), model, task)
                           for task, sub in SUBTASKS.items()] + [_pct(ne, hm.NONEXISTENT_KEYS[0])])
    notes = _override_notes(records)
    return Section("HalluLens", [PREAMBLE], parts=[
        Table("PreciseWikiQA, LongWiki, NonExistentRefusal (percent; mean ± std over trials)", columns, rows),
        *([Notes("Set by hand, as in the paper:", notes)] if notes else [])])


def _override_notes(records: list[dict]) -> list[str]:
    """One line per model and overridden domain: the value set, and the rates it replaced."""
    out = []
    for r in records:
        measured: dict[tuple, list[str]] = defaultdict(list)
        for o in r.get("overrides", []):
            measured[(o["task"], o["domain"], o["value"], o["rule"])].append(f"{100 * o['measured']:.1f}")
        out += [f"{r['model']}: {task} {domain} false acceptance rate set to {100 * value:.1f} ({rule}); "
                f"measured per trial: {', '.join(rates)}; NonExistent FAR as measured: "
                f"{_pct(r['summary'], 'measured_false_acceptance_rate') or '-'}"
                for (task, domain, value, rule), rates in measured.items()]
    return out


def _mean(summary: dict, key: str) -> float | None:
    return _value((summary.get(key) or {}).get("mean"))


def _one_minus(v: object) -> float | None:
    v = _value(v)
    return None if v is None else 1.0 - v


def refusal_scatter(records: list[dict]) -> Section | None:
    """False refusal rate against hallucination, a panel each for PreciseWikiQA and LongWiki."""
    panels: list[tuple[str, str, str, Callable[[dict], float | None]]] = [
        (PWQA, "HalluLens PreciseWikiQA", "hallucination rate when answered", lambda s: _mean(s, "hallucination_rate")),
        (LONGWIKI, "HalluLens LongWiki", "1 − precision (unsupported claims)",
         lambda s: _one_minus(_mean(s, "precision")))]
    charts = []
    for task, title, y_label, y_of in panels:
        points = sorted((Point(r["model"], _mean(r.get("summary") or {}, "false_refusal_rate"),
                               y_of(r.get("summary") or {})) for r in records if r["task"] == task),
                        key=lambda p: p.name)
        if points:
            charts.append(Chart("scatter", title, points=points, x_label="refusal rate (1 − response ratio)",
                                y_label=y_label))
    return Section("Refusal versus hallucination", [
        "HalluLens: refusing a PreciseWikiQA or LongWiki question is a false refusal. NonExistentRefusal is not "
        "drawn: there the refusal rate is 1 − the false acceptance rate."], parts=charts) if charts else None


def _bin_key(b: str) -> tuple[int, str]:
    return len(b), b  # "2" before "10", as hallulens.metrics orders bins


def difficulty_series(records: list[dict], metric: str) -> tuple[list[str], list[Series]]:
    """Per model the mean over trials of the metric in each bin; None where no trial defines it."""
    # bins are ints in memory and strings once read back from metrics.json
    by_bin = {id(t): {str(b): v or {} for b, v in (t.get("by_bin") or {}).items()}
              for r in records for t in r.get("trials", [])}
    bins = sorted({b for per_bin in by_bin.values() for b in per_bin}, key=_bin_key)
    series = []
    for r in sorted(records, key=lambda r: r["model"]):
        values: list[float | None] = []
        for b in bins:
            vals = [v for t in r.get("trials", []) if (v := _value(by_bin[id(t)].get(b, {}).get(metric))) is not None]
            values.append(math.fsum(vals) / len(vals) if vals else None)
        series.append(Series(r["model"], values))
    return bins, series


CURVES = ((PWQA, "hallucination_rate", "PreciseWikiQA: hallucination rate when answered"),
          (PWQA, "false_refusal_rate", "PreciseWikiQA: false refusal rate"),
          (LONGWIKI, "precision", "LongWiki: precision"),
          (LONGWIKI, "false_refusal_rate", "LongWiki: false refusal rate"))


def difficulty_curves(records: list[dict]) -> Section | None:
    charts = []
    for task, metric, title in CURVES:
        bins, series = difficulty_series([r for r in records if r["task"] == task], metric)
        if bins:
            charts.append(Chart("lines", title, bins, series, x_label="difficulty bin (by harmonic centrality; "
                                "0 = hardest)", y_label=metric.replace("_", " ")))
    return Section("Per-difficulty curves (HalluLens)", [
        "Mean over trials of each bin's rate; a gap is a bin where no trial scored an item."],
        parts=charts) if charts else None


RANKED = (("hallucination_rate", "PreciseWikiQA hallucination rate"), ("f1_at_k", "LongWiki F1@K"),
          ("false_acceptance_rate", "false acceptance rate"))


def rankings(records: list[dict], paired: list[dict]) -> Section | None:
    """Which models the paired differences tell apart (``report.ranking``), by each task's headline
    figure: a record's figure is its mean over trials."""
    flat = [{"model": r["model"], "task": r["task"], **{k: v.get("mean") for k, v in r.get("summary", {}).items()}}
            for r in records]
    tables = []
    for key, name in RANKED:
        tables += [ranking.rank_separations(flat, paired, key, name, [
                       f"Adjacent models in each task's ranking by {name}, told apart when their paired difference "
                       "exceeds its 95% interval, over the prompts both had scored, a prompt's trials summed "
                       "(metrics.json: table \"paired\"); a dot where the run has no paired record."]),
                   ranking.rank_intervals(paired, key, f"Rank intervals by {name} (1: the lowest)", [
                       f"The ranks a model can hold on a task, given which of its paired differences in {name} "
                       "exceed their 95% interval."])]
    parts = [t for t in tables if t is not None]
    return Section("HalluLens: which models differ", parts=parts) if parts else None


def sections(records: Sequence[MetricRecord]) -> list[Section]:
    """The report hook: the leaderboard, then the charts (read from the records' flat objects)."""
    every = [r.as_json() for r in records]
    rows = [r for r in every if r.get("table") != PAIRED]
    return [s for s in (leaderboard_section(rows), rankings(rows, [r for r in every if r.get("table") == PAIRED]),
                        refusal_scatter(rows), difficulty_curves(rows)) if s is not None]
