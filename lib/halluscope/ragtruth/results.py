"""A RAGTruth run's committed parts read back and summed into its result documents.

A batch's parts count once its commit part exists (``counts`` for detection, ``rag_counts`` for
RAG generation); everything here reads committed parts only, so a killed run's leftovers never
reach a metric, and the sums are the same however the work was batched.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from halluscope.models.usage import Usage
from halluscope.ragtruth.corpus import Corpus
from halluscope.ragtruth.detectors import PromptDetector
from halluscope.ragtruth.metrics import MetricOptions, merge_counts, summarize
from halluscope.ragtruth.selection import select
from halluscope.ragtruth.spans import Prediction
from halluscope.ragtruth.stats import count_stats, model_table, task_table
from halluscope.ragtruth.tables import (CALLS, COUNTS, PREDICTIONS, RAG_COUNTS, RAG_GENERATIONS, RagCounts,
                                        read_counts, read_prediction, read_rag_counts)
from halluscope.storage.run import PART_PREFIX, RunStore

SCHEMAS = {"predictions": PREDICTIONS, "detect_calls": CALLS, "counts": COUNTS,
           "rag_generations": RAG_GENERATIONS, "rag_calls": CALLS, "rag_counts": RAG_COUNTS}


def read_committed(store: RunStore, table: str, commit: str, columns: list[str] | None = None,
                   keys: set[str] | None = None) -> pa.Table:
    """Rows of ``table`` from batches whose ``commit`` part exists (of those ``keys`` names)."""
    parts = []
    for key in sorted(store.part_keys(table) & (store.part_keys(commit) if keys is None else keys)):
        loc = store.loc.child(table, f"{PART_PREFIX}{key}.parquet")
        with loc.fs.open(loc.path, "rb") as f:
            parts.append(pq.read_table(f, columns=columns))
    schema = SCHEMAS[table]
    if not parts:
        return schema.empty_table().select(columns) if columns else schema.empty_table()
    return pa.concat_tables(parts)


def _undefined(row: dict, prefix: str) -> list[str]:
    """The level's ratios that were 0/0 (reported as 0), without the level's prefix."""
    return [u[len(prefix):] for u in row["undefined"] if u.startswith(prefix) and not u.startswith(prefix + "macro")]


def _level_rows(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """The response-level and the span-level (character) tables of ``summarize`` rows."""
    response = [{k: r[k] for k in ("task", "model", "n_responses", "unpredicted", "unreadable", "tp", "fp", "fn",
                                   "tn")}
                | {"precision": r["response_precision"], "recall": r["response_recall"], "f1": r["response_f1"],
                   "undefined": _undefined(r, "response_")}
                for r in rows]
    span = [{k: r[k] for k in ("task", "model", "gold_chars", "pred_chars", "tp_chars", "unlocated_spans",
                               "unlocated_chars", "type_recall")}
            | {"precision": r["span_precision"], "recall": r["span_recall"], "f1": r["span_f1"],
               "macro_precision": r["span_macro_precision"], "macro_recall": r["span_macro_recall"],
               "macro_f1": r["span_macro_f1"], "undefined": _undefined(r, "span_")}
            for r in rows]
    return response, span


def costs(calls: pa.Table, deployments: list[dict]) -> dict:
    """Calls per (model, role, stage) summed over the committed batches, and this invocation's
    deployments; cached answers are counted apart and cost nothing."""
    acc: dict[tuple[str, str, str], Usage] = {}
    for r in calls.to_pylist():
        key = (r["model"], r["role"], r["stage"])
        acc[key] = acc.get(key, Usage()) + Usage(**{k: r[k] for k in Usage().as_dict()})
    rows = [{"model": m, "role": role, "stage": stage, **u.as_dict()} for (m, role, stage), u in sorted(acc.items())]
    return {"calls": rows, "total": sum(acc.values(), Usage()).as_dict(), "deployments": deployments}


def rag_summary(counts: dict[tuple[str, str], RagCounts]) -> list[dict]:
    """Rate (share of scored responses with >= 1 detected span) and density (spans per 100 words)
    per model and task, and per model over all tasks, from the summed integer counts."""
    rows = []
    for model in sorted({m for _, m in counts}):
        tasks = sorted({t for t, m in counts if m == model})
        for task in [*tasks, "Overall"]:
            c = sum((v for (t, m), v in sorted(counts.items()) if m == model and task in ("Overall", t)), RagCounts())
            rows.append({"model": model, "task": task, **asdict(c),
                         "hallucination_rate": c.hallucinated / c.scored if c.scored else None,
                         "density": 100 * c.spans / c.words if c.words else None})
    return rows


def _predictions(store: RunStore) -> dict[str, Prediction | None]:
    table = read_committed(store, "predictions", "counts",
                           ["response_id", "predicted", "spans", "unlocated", "unreadable"])
    return {r["response_id"]: read_prediction(r) for r in table.to_pylist()}


def _problem_counts(store: RunStore, table: str, commit: str) -> dict[str, int]:
    rows = read_committed(store, table, commit, ["problems"]).column("problems").to_pylist()
    return dict(sorted(Counter(p["reason"] for ps in rows for p in ps).items()))


@dataclass(frozen=True)
class Setup:
    """What the result documents record of the run's configuration."""

    detector: str
    options: MetricOptions
    selection_sets: list[list[str]]
    seed: int | None
    generators: list[str]


def aggregate(setup: Setup, store: RunStore, corpus: Corpus, deployments: list[dict]) -> tuple[dict, dict | None]:
    """metrics.json, stats.json, selection.json (and rag_metrics.json) from the committed parts."""
    counts = merge_counts(*[{key: c} for key, c in read_counts(read_committed(store, "counts", "counts"))])
    rows = summarize(counts)
    response, span = _level_rows(rows)
    calls = pa.concat_tables([read_committed(store, "detect_calls", "counts"),
                              read_committed(store, "rag_calls", "rag_counts")])
    metrics = {
        "run_id": store.run_id, "detector": {"model": setup.detector, "template": PromptDetector.template_id},
        "options": setup.options.model_dump(mode="json"), "response_level": response, "span_level": span,
        "detection": rows, "detector_problems": _problem_counts(store, "predictions", "counts"),
        "costs": costs(calls, deployments),
    }
    store.write_json("metrics.json", metrics)
    groups = count_stats(corpus.records)
    store.write_json("stats.json", {"table2_tasks": task_table(groups), "table3_models": model_table(groups)})
    preds = _predictions(store)
    store.write_json("selection.json", [select(corpus.records, preds, models, setup.seed).as_dict()
                                        for models in setup.selection_sets])
    rag = None
    if setup.generators:
        rag_counts = read_rag_counts(read_committed(store, "rag_counts", "rag_counts"))
        rag = {"run_id": store.run_id, "detector": setup.detector, "models": setup.generators,
               "rows": rag_summary(rag_counts),
               "detector_problems": _problem_counts(store, "rag_generations", "rag_counts")}
        store.write_json("rag_metrics.json", rag)
    return metrics, rag
