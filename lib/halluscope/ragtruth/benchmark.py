"""RAGTruth registered with the engine: its two tasks, options, metrics hook and report sections.

Metrics come from committed rows only, so a killed run's leftovers never reach them, and they are
the same however the work was batched. Every record names its ``table``:

- ``detection``: per detector (the model under test), task type and response model (``*``: all),
  response- and span-level counts and P/R/F1 (``metrics.score_rows``); ``Overall`` pools everything;
- ``detector_problems``: per detector, its replies' problems by reason;
- ``selection``: per detector and candidate set, the §6.3 experiment;
- ``corpus_tasks`` / ``corpus_models``: the corpus' Tables 2 and 3 (``model`` is ``*``), and
  ``corpus``: what was read and what was held out (invalid labels, quality);
- ``generation``: per model under test and task type (and ``Overall``), hallucination rate and
  density (detected spans per 100 words) of its answers as the judge saw them.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass, fields

import pyarrow as pa
import pyarrow.compute as pc

from halluscope.contract.benchmark import Benchmark, MetricInputs
from halluscope.contract.completion import Completion
from halluscope.contract.errorbars import bars, proportion_se, ratio_se
from halluscope.contract.metrics import Figure, MetricRecord
from halluscope.ragtruth import paired, report
from halluscope.ragtruth.corpus import Corpus
from halluscope.ragtruth.detectors import PromptDetector
from halluscope.ragtruth.intervals import detection_intervals
from halluscope.ragtruth.metrics import count, score_rows
from halluscope.ragtruth.selection import select
from halluscope.ragtruth.stats import count_stats, model_table, task_table
from halluscope.ragtruth.tasks import (
    DETECT,
    GENERATE,
    Detect,
    Generation,
    RagTruthOptions,
    candidate_sets,
    corpus_of,
    ragtruth_options,
)

OVERALL = "Overall"
SCORE_COLUMNS = ("gen_id", "task", "n_atoms", "error")  # what the metrics read of ``scores``


def _rows(inputs: MetricInputs, task: str) -> list[dict]:
    """Committed generations of ``task`` joined with their scores' atom counts."""
    gens = inputs.read_table("generations", ["gen_id", "model", "task", "item_id", "text", "error"],
                             filters=[("task", "==", task)])  # the store skips other tasks' parts
    scores = inputs.scores.filter(pc.equal(inputs.scores.column("task"), task))
    atoms = dict(zip(scores.column("gen_id").to_pylist(), scores.column("n_atoms").to_pylist()))
    errors = dict(zip(scores.column("gen_id").to_pylist(), scores.column("error").to_pylist()))
    return [g | {"n_atoms": atoms.get(g["gen_id"]), "score_error": errors.get(g["gen_id"])} for g in gens.to_pylist()]


def corpus_records(corpus: Corpus) -> list[dict]:
    """Tables 2 and 3 and the load's account, as records of no particular model."""
    base = {"model": "*", "task": DETECT, "aggregate": True}
    groups = count_stats(corpus.records)
    out = [base | {"table": "corpus", **corpus.manifest.model_dump(mode="json", include={
               "files", "n_sources", "n_responses", "n_records", "excluded", "label_problems"}),
                   "held_out": {k: v for k, v in corpus.excluded.items() if k != "split"},
                   "invalid_labels": [asdict(p) for p in corpus.problems]}]
    out += [base | {"table": "corpus_tasks", "task_type": r.pop("task"), **r} for r in task_table(groups)]
    out += [base | {"table": "corpus_models", "generator": r.pop("model"), "task_type": r.pop("task"), **r}
            for r in model_table(groups)]
    return out


_LAST: list[tuple[Corpus, list[dict]]] = []  # the corpus last counted and its records


def _corpus_records_once(corpus: Corpus) -> list[dict]:
    """``corpus_records``, counted once for a corpus: each per-model call of the metrics repeats
    them, and the engine keeps one of each (counting a 6,000-response corpus took 0.2 s a call)."""
    if not _LAST or _LAST[0][0] is not corpus:
        _LAST[:] = [(corpus, corpus_records(corpus))]
    return _LAST[0][1]


def detect_metrics(inputs: MetricInputs, options: RagTruthOptions) -> list[dict]:
    """The committed detector replies parsed by ``PromptDetector`` and scored against the corpus."""
    corpus = corpus_of(options)
    by_id = {r.id: r for r in corpus.records}
    rows = _rows(inputs, DETECT)
    detector = PromptDetector(unreadable=options.metrics.unreadable)
    out = list(_corpus_records_once(corpus))
    for model in sorted({r["model"] for r in rows}):
        mine = [r for r in rows if r["model"] == model]
        records = [by_id[r["item_id"]] for r in mine]
        output = detector.parse(records, [Completion(text=r["text"], error=r["error"]) for r in mine])
        base = {"model": model, "task": DETECT}
        errors = detection_intervals(records, output.predictions, options.metrics)
        out += [base | {"table": "detection", "task_type": s["task"], "generator": s["model"],
                        **{k: v for k, v in s.items() if k not in ("task", "model")},
                        **errors.get((s["task"], s["model"]), {})}
                for s in score_rows(count(records, output.predictions, options.metrics))]
        out.append(base | {"table": "detector_problems", "problems": dict(sorted(output.problem_counts().items()))})
        out += [base | {"table": "selection", **select(corpus.records, output.predictions, models,
                                                       options.selection.seed).as_dict()}
                for models in candidate_sets(options, corpus)]
    return out


@dataclass(frozen=True)
class RagCounts:
    """Additive counts of the RAG-generation benchmark per (model under test, task type)."""

    asked: int = 0  # sources the model was asked to answer (committed)
    generation_errors: int = 0  # no answer: not judged, not scored
    unpredicted: int = 0  # an answer, but the judge gave no usable prediction: not scored
    scored: int = 0
    hallucinated: int = 0  # scored answers with >= 1 detected span
    spans: int = 0  # detected spans (overlapping ones once, unlocated strings once each)
    words: int = 0  # whitespace words of the scored answers

    def __add__(self, other: RagCounts) -> RagCounts:
        return RagCounts(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


def _rag_counts(row: dict) -> RagCounts:
    if row["error"] is not None or row["text"] is None:
        return RagCounts(asked=1, generation_errors=1)
    if row["score_error"] is not None:
        return RagCounts(asked=1, unpredicted=1)
    return RagCounts(asked=1, scored=1, hallucinated=int(row["n_atoms"] > 0), spans=row["n_atoms"],
                     words=len(row["text"].split()))


MEAN_OVER_ANSWERS = "analytic standard error of a share of the scored answers (one answer per source)"
RATIO_OVER_ANSWERS = "delta-method standard error of spans per 100 words pooled over answers, clustered by answer"


def generate_metrics(inputs: MetricInputs) -> list[dict]:
    """Rate (share of scored answers with >= 1 detected span) and density (spans per 100 words)
    per model and task type, and per model over all of them, from summed integer counts."""
    task_types = {r["item_id"]: r["task_type"] for r in _item_fields(inputs.items(GENERATE))}
    acc: dict[tuple[str, str], list[RagCounts]] = defaultdict(list)  # an answer's counts each
    for r in _rows(inputs, GENERATE):
        acc[(r["model"], task_types[r["item_id"]])].append(_rag_counts(r))
    out = []
    for model in sorted({m for m, _ in acc}):
        types = sorted(t for m, t in acc if m == model)
        for task_type in [*types, OVERALL]:
            answers = [a for (m, t), v in sorted(acc.items()) if m == model and task_type in (OVERALL, t) for a in v]
            c = sum(answers, RagCounts())
            figures = {"hallucination_rate": c.hallucinated / c.scored if c.scored else None,
                       "density": 100 * c.spans / c.words if c.words else None}
            scored = [a for a in answers if a.scored]
            density_se = ratio_se([100.0 * a.spans for a in scored], [float(a.words) for a in scored])
            errors = {"hallucination_rate": proportion_se(c.hallucinated, c.scored), "density": density_se}
            out.append({"model": model, "task": GENERATE, "table": "generation", "task_type": task_type, **asdict(c),
                        **figures, **bars(figures, errors, {"hallucination_rate": MEAN_OVER_ANSWERS,
                                                            "density": RATIO_OVER_ANSWERS})})
    return out



def _item_fields(items: pa.Table) -> list[dict]:
    return [{"item_id": i, **json.loads(f)} for i, f in
            zip(items.column("item_id").to_pylist(), items.column("fields").to_pylist())]


def metrics(inputs: MetricInputs) -> list[MetricRecord]:
    """The engine's hook: the records of the run's RAGTruth tasks for the models whose rows it is
    given. Every figure is of one model (a detector, or a model under test answering sources), so
    the engine calls it once per model and the driver holds one model's answers at a time."""
    options = ragtruth_options(inputs.options)
    out = detect_metrics(inputs, options) if DETECT in inputs.tasks else []
    out += generate_metrics(inputs) if GENERATE in inputs.tasks else []
    return [MetricRecord.from_json(r) for r in out]


# a detector's figures, then those of a model under test answering sources
FIGURES = (*(Figure(f"{level}_{k}", "higher") for level in ("response", "span", "span_macro")
             for k in ("precision", "recall", "f1")), Figure("hallucination_rate", "lower"), Figure("density", "lower"))


BENCHMARK = Benchmark("ragtruth", [Detect(), Generation()], options=RagTruthOptions, metrics=metrics,
                      metrics_per_model=True, score_columns=SCORE_COLUMNS,
                      compare=paired.paired, compare_columns=paired.COMPARE_COLUMNS,
                      report=report.sections, figures=FIGURES,
                      description="RAGTruth: detectors scored on the annotated corpus, and RAG generation "
                                  "judged by a detector")
