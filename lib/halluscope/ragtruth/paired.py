"""Paired differences of RAGTruth's figures between two models of a task (the compare hook's
contract.metrics ``PAIRED`` records).

- ragtruth/detect: detectors read the same corpus responses, so two of them pair by response. Their
  figures (P/R/F1 at the response level, and over characters pooled over responses, micro and
  macro) are ratios of pooled counts, F1 with no per-response term to linearise: the error is a
  paired bootstrap over sources (``errorbars.paired_bootstrap``), a source's responses resampled
  together as ``intervals`` resamples them for one detector, both detectors' counts of a source
  drawn together. Rank intervals count every two detectors told apart by it.
- ragtruth/generate: models answer the same sources, one answer each, so they pair by source: the
  hallucination rate (a mean over the scored answers) and the density (spans per 100 words, a
  ratio of sums) take the delta method's paired error (``contract.pairing``), as their own
  errors do.
"""

from __future__ import annotations

from collections.abc import Collection
from itertools import combinations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from halluscope.contract.benchmark import MetricInputs
from halluscope.contract.completion import Completion
from halluscope.contract.errorbars import PAIRED_BOOTSTRAP, paired_bootstrap
from halluscope.contract.metrics import PAIRED, MetricRecord
from halluscope.contract.pairing import RANKS, Parts, asked, grid, kept, record
from halluscope.ragtruth.detectors import PromptDetector
from halluscope.ragtruth.intervals import FIGURES as POOLED
from halluscope.ragtruth.intervals import pooled_figures, pooled_ratio
from halluscope.ragtruth.metrics import response_counts
from halluscope.ragtruth.spans import Prediction
from halluscope.ragtruth.tasks import DETECT, GENERATE, corpus_of, ragtruth_options

COMPARE_COLUMNS = ("gen_id", "item_id", "n_atoms", "error")  # what the comparison reads of every model's scores
DETECTION = (*POOLED, "span_macro_precision", "span_macro_recall", "span_macro_f1")
# a response's counts: those of ``pooled_figures``, then each macro figure's sum and count
_COUNTS = ("tp", "fp", "fn", "tp_chars", "pred_chars", "gold_chars", "macro_p_sum", "macro_p_n",
           "macro_r_sum", "macro_r_n", "macro_f1_sum", "macro_f1_n")
_GENERATION: Parts = {"hallucination_rate": ("hallucinated", "scored"), "density": ("spans", "words")}


def detection_figures(t: np.ndarray) -> np.ndarray:
    """Rows of summed counts (``_COUNTS`` order) -> rows of ``DETECTION`` (0/0 as 0)."""
    return np.hstack([pooled_figures(t[:, :6]), pooled_ratio(t[:, 6::2], t[:, 7::2])])


def _replies(inputs: MetricInputs, task: str, model: str) -> list[dict]:
    """A model's committed generations of a task (those its scores rows name), in item order, each
    with its score's ``n_atoms`` and ``score_error``."""
    mine = inputs.scores.filter(pc.and_(pc.equal(inputs.scores.column("task"), task),
                                        pc.equal(inputs.scores.column("model"), model)))
    scored = {r["gen_id"]: r for r in mine.select(["gen_id", "n_atoms", "error"]).to_pylist()}
    gens = inputs.read_table("generations", ["gen_id", "item_id", "text", "error"],
                             filters=[("task", "==", task), ("model", "==", model)])
    return sorted((g | {"n_atoms": scored[g["gen_id"]]["n_atoms"], "score_error": scored[g["gen_id"]]["error"]}
                   for g in gens.to_pylist() if g["gen_id"] in scored), key=lambda g: g["item_id"])


def _models(inputs: MetricInputs, task: str) -> list[str]:
    rows = inputs.scores.filter(pc.equal(inputs.scores.column("task"), task))
    return sorted(pc.unique(rows.column("model")).to_pylist())


def _detection_counts(inputs: MetricInputs) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """The detectors, whether each scored each response (models x responses), each one's counts
    per response (models x responses x ``_COUNTS``) and each response's source (its index)."""
    options = ragtruth_options(inputs.options)
    corpus = corpus_of(options)
    by_id = {r.id: r for r in corpus.records}
    detector = PromptDetector(unreadable=options.metrics.unreadable)
    models = _models(inputs, DETECT)
    per_model = []
    for model in models:
        rows = _replies(inputs, DETECT, model)
        records = [by_id[r["item_id"]] for r in rows]
        found = detector.parse(records, [Completion(text=r["text"], error=r["error"]) for r in rows]).predictions
        counts = {}
        for r in records:
            pred = found.get(r.id)
            if pred is None:
                if options.metrics.unpredicted == "exclude":
                    continue
                pred = Prediction()
            c = response_counts(r, pred)
            counts[r.id] = [float(getattr(c, k)) for k in _COUNTS]
        per_model.append(counts)
    responses = sorted({i for counts in per_model for i in counts})
    index = {r: i for i, r in enumerate(responses)}
    present = np.zeros((len(models), len(responses)), bool)
    values = np.zeros((len(models), len(responses), len(_COUNTS)))
    for m, counts in enumerate(per_model):
        for rid, row in counts.items():
            present[m, index[rid]] = True
            values[m, index[rid]] = row
    _, source = np.unique([by_id[r].source_id for r in responses], return_inverse=True)
    return models, present, values, source.reshape(-1)


def _bootstrap_pair(values: np.ndarray, present: np.ndarray, source: np.ndarray, a: int, b: int,
                    resamples: int, seed: int) -> dict:
    """The pair's record entry over the responses both scored, summed per source."""
    both = present[a] & present[b]
    _, cluster = np.unique(source[both], return_inverse=True)
    sums = np.zeros((2, int(cluster.max(initial=-1)) + 1, len(_COUNTS)))
    for k, m in enumerate((a, b)):
        np.add.at(sums[k], cluster.reshape(-1), values[m, both])
    out: dict = {"n": int(both.sum())}
    if len(sums[0]) < 2:  # one source: no spread to resample
        diff = detection_figures(sums[0].sum(0, keepdims=True))[0] - detection_figures(sums[1].sum(0, keepdims=True))[0]
        return out | {f: {"diff": float(d), "stderr": None, "ci95": None} for f, d in zip(DETECTION, diff)}
    diff, se, ci = paired_bootstrap(sums[0], sums[1], detection_figures, resamples, seed)
    return out | {f: {"diff": float(d), "stderr": float(s), "ci95": [float(lo), float(hi)]}
                  for f, d, s, (lo, hi) in zip(DETECTION, diff, se, ci)}


def _ranks(pairs: dict[tuple[int, int], dict], models: list[str], ranked: np.ndarray) -> dict:
    """Per figure each ranked model's [lowest, highest] rank (``RANKS``), a pair told apart where
    its bootstrap interval excludes 0."""
    out = {}
    for figure in DETECTION:
        lower, higher = np.zeros(len(models), int), np.zeros(len(models), int)
        for (a, b), pair in pairs.items():
            ci = pair[figure]["ci95"]
            if ci is not None and (ci[0] > 0 or ci[1] < 0):
                above, below = (a, b) if ci[0] > 0 else (b, a)
                lower[above] += 1
                higher[below] += 1
        n = int(ranked.sum())
        out[figure] = {models[i]: [1 + int(lower[i]), n - int(higher[i])] for i in np.flatnonzero(ranked)}
    return out


def detection_record(inputs: MetricInputs, wanted: Collection[tuple[str, str]] = ()) -> dict:
    """ragtruth/detect's paired record (of one detector at least). Every two detectors are
    bootstrapped for the rank intervals (the work grows with their square: detectors are few);
    the pairs kept are those ``contract.pairing.kept`` keeps."""
    metrics = ragtruth_options(inputs.options).metrics
    models, present, values, source = _detection_counts(inputs)
    ranked = present.sum(axis=1) > 0
    own = detection_figures(np.stack([values[m, present[m]].sum(0) for m in range(len(models))]))
    figures = {f: np.where(ranked, own[:, k], np.nan) for k, f in enumerate(DETECTION)}
    every = {(a, b): _bootstrap_pair(values, present, source, a, b, metrics.bootstrap_resamples,
                                     metrics.bootstrap_seed)
             for a, b in combinations(np.flatnonzero(ranked).tolist(), 2)}
    pairs = [{"a": models[a], "b": models[b], **every[(a, b)]} for a, b in kept(figures, models, wanted)
             if (a, b) in every]
    out = {"model": "*", "task": DETECT, "aggregate": True, "table": PAIRED, "figures": list(DETECTION),
           "pairs": pairs, "method": f"{PAIRED_BOOTSTRAP}; clusters: sources; {metrics.bootstrap_resamples} resamples",
           "ranks": _ranks(every, models, ranked), "ranks_method": RANKS}
    return out | ({"values": asked(figures, models, wanted)} if wanted else {})


def generation_record(inputs: MetricInputs, wanted: Collection[tuple[str, str]] = ()) -> dict | None:
    """ragtruth/generate's paired record over the sources both models' answers were scored on."""
    models, units = [], []
    parts: dict[str, list[float]] = {"scored": [], "hallucinated": [], "spans": [], "words": []}
    for model in _models(inputs, GENERATE):
        for r in _replies(inputs, GENERATE, model):
            if r["error"] is not None or r["text"] is None or r["score_error"] is not None:
                continue  # no answer, or no usable judgement: not scored, as in the run's figures
            models.append(model)
            units.append(r["item_id"])
            for k, v in (("scored", 1.0), ("hallucinated", float(r["n_atoms"] > 0)), ("spans", 100.0 * r["n_atoms"]),
                         ("words", float(len(r["text"].split())))):
                parts[k].append(v)
    if not models:
        return None
    table = grid(pa.chunked_array([models], pa.string()), pa.chunked_array([units], pa.string()),
                 {k: np.array(v) for k, v in parts.items()})
    return record(GENERATE, table, _GENERATION, wanted)


def paired(inputs: MetricInputs) -> list[MetricRecord]:
    """The compare hook: per task, every two models (and those asked for) over what both scored."""
    out = []
    if DETECT in inputs.tasks and _models(inputs, DETECT):
        out.append(detection_record(inputs, inputs.pairs))
    if GENERATE in inputs.tasks and (r := generation_record(inputs, inputs.pairs)) is not None:
        out.append(r)
    return [MetricRecord.from_json(r) for r in out]
