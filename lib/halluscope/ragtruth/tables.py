"""The Arrow tables a RAGTruth run writes, and the integer counts that travel in them.

Counts go to Parquet exactly: integers as int64, per-type tuples as list<int64> and the macro
sums (exact ``Fraction``s) as "numerator/denominator" strings, so the driver's sum of parts is the
sum the workers computed, whatever the number or order of the parts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from fractions import Fraction
from typing import Iterable, Mapping, Sequence

import pyarrow as pa

from halluscope.models.usage import Usage
from halluscope.ragtruth.corpus import Label, Record
from halluscope.ragtruth.detectors import NO_PREDICTION, DetectorProblem
from halluscope.ragtruth.metrics import Counts, CountsKey
from halluscope.ragtruth.spans import Prediction, Span
from halluscope.ragtruth.taxonomy import parse_label_type

SPAN = pa.struct([("start", pa.int64()), ("end", pa.int64()), ("label", pa.string())])
PROBLEM = pa.struct([("reason", pa.string()), ("detail", pa.string())])

# what the detector said, shared by corpus predictions and RAG generations
_DETECTION = [
    ("detector", pa.string()),
    ("template", pa.string()),
    ("predicted", pa.bool_()),  # false: the detector gave no prediction (see ``problem``)
    ("spans", pa.list_(SPAN)),  # located predicted spans, character offsets, end exclusive
    ("unlocated", pa.list_(pa.string())),  # listed strings not found in the response (false-positive chars)
    ("n_spans", pa.int64()),  # Prediction.n_spans; null when not predicted
    ("problem", pa.string()),  # the reason that cost the prediction (call_error, unreadable), else null
    ("unreadable", pa.bool_()),  # the judge's answer was unreadable and is scored as an empty list
    ("problems", pa.list_(PROBLEM)),  # every problem, including those that did not cost it
    ("detector_answer", pa.string()),  # the judge's raw answer
    ("detector_cached", pa.bool_()),
]

PREDICTIONS = pa.schema([
    ("run_id", pa.string()),
    ("response_id", pa.string()),
    ("source_id", pa.string()),
    ("model", pa.string()),
    ("task", pa.string()),
    ("split", pa.string()),
    ("gold_spans", pa.list_(SPAN)),  # the scored gold (after the corpus' label filter)
    *_DETECTION,
])

RAG_GENERATIONS = pa.schema([
    ("run_id", pa.string()),
    ("gen_id", pa.string()),
    ("source_id", pa.string()),
    ("task", pa.string()),
    ("source", pa.string()),
    ("model", pa.string()),
    ("response", pa.string()),
    ("error", pa.string()),  # the generation failed: not detected, not scored
    ("input_tokens", pa.int64()),
    ("output_tokens", pa.int64()),
    ("cached", pa.bool_()),
    ("n_words", pa.int64()),
    *_DETECTION,
])

CALLS = pa.schema([
    ("model", pa.string()),
    ("role", pa.string()),  # detector | test
    ("stage", pa.string()),  # detect | generate | detect_generated
    *((f.name, pa.int64()) for f in fields(Usage)),
])


def _arrow_type(default: object) -> pa.DataType:
    if isinstance(default, Fraction):
        return pa.string()
    if isinstance(default, tuple):
        return pa.list_(pa.int64())
    return pa.int64()


COUNTS = pa.schema([("task", pa.string()), ("model", pa.string()),
                    *((f.name, _arrow_type(f.default)) for f in fields(Counts))])


def counts_table(counts: Mapping[CountsKey, Counts]) -> pa.Table:
    rows = []
    for (task, model), c in sorted(counts.items()):
        row: dict = {"task": task, "model": model}
        for f in fields(Counts):
            v = getattr(c, f.name)
            row[f.name] = str(v) if isinstance(v, Fraction) else list(v) if isinstance(v, tuple) else v
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=COUNTS)


def read_counts(table: pa.Table) -> list[tuple[CountsKey, Counts]]:
    """(key, Counts) per row; callers sum them (``metrics.merge_counts``)."""
    out = []
    for row in table.to_pylist():
        values = {}
        for f in fields(Counts):
            v = row[f.name]
            values[f.name] = Fraction(v) if isinstance(f.default, Fraction) else tuple(v) \
                if isinstance(f.default, tuple) else int(v)
        out.append(((row["task"], row["model"]), Counts(**values)))
    return out


@dataclass(frozen=True)
class RagCounts:
    """Additive counts of the RAG-generation benchmark per (task, model under test)."""

    asked: int = 0  # sources the model was asked to answer
    generation_errors: int = 0  # no response: not detected, not scored
    unpredicted: int = 0  # a response, but the detector gave no prediction: not scored
    scored: int = 0
    unreadable: int = 0  # scored responses whose detector answer was unreadable (an empty list)
    hallucinated: int = 0  # scored responses with >= 1 detected span
    spans: int = 0  # detected spans (overlapping ones once, unlocated strings once each)
    words: int = 0  # whitespace words of the scored responses

    def __add__(self, other: "RagCounts") -> "RagCounts":
        return RagCounts(**{k: v + getattr(other, k) for k, v in asdict(self).items()})


RAG_COUNTS = pa.schema([("task", pa.string()), ("model", pa.string()),
                        *((f.name, pa.int64()) for f in fields(RagCounts))])


def rag_counts_table(counts: Mapping[CountsKey, RagCounts]) -> pa.Table:
    return pa.Table.from_pylist([{"task": t, "model": m, **asdict(c)} for (t, m), c in sorted(counts.items())],
                                schema=RAG_COUNTS)


def read_rag_counts(table: pa.Table) -> dict[CountsKey, RagCounts]:
    out: dict[CountsKey, RagCounts] = {}
    names = [f.name for f in fields(RagCounts)]
    for row in table.to_pylist():
        key = (row["task"], row["model"])
        out[key] = out.get(key, RagCounts()) + RagCounts(**{n: row[n] for n in names})
    return out


def span_rows(spans: Iterable[Span | Label]) -> list[dict]:
    out = []
    for s in spans:
        label = s.label_type
        out.append({"start": s.start, "end": s.end, "label": None if label is None else label.value})
    return out


def detection_fields(detector: str, template: str, prediction: Prediction | None,
                     problems: Sequence[DetectorProblem], answer: str | None, cached: bool) -> dict:
    """The detector's columns for one response."""
    fatal = None if prediction else next((p.reason for p in problems if p.reason in NO_PREDICTION), None)
    return {
        "detector": detector, "template": template, "predicted": prediction is not None,
        "unreadable": bool(prediction and prediction.unreadable),
        "spans": span_rows(prediction.spans) if prediction else [],
        "unlocated": list(prediction.unlocated) if prediction else [],
        "n_spans": prediction.n_spans if prediction else None,
        "problem": fatal, "problems": [{"reason": p.reason, "detail": p.detail} for p in problems],
        "detector_answer": answer, "detector_cached": cached,
    }


def prediction_row(run_id: str, record: Record, detection: dict) -> dict:
    return {"run_id": run_id, "response_id": record.id, "source_id": record.source_id, "model": record.model,
            "task": record.task_type.value, "split": record.split, "gold_spans": span_rows(record.gold),
            **detection}


def read_prediction(row: Mapping) -> Prediction | None:
    """The ``Prediction`` a predictions/rag_generations row holds; None when there was none."""
    if not row["predicted"]:
        return None
    spans = tuple(Span(s["start"], s["end"], parse_label_type(s["label"])) for s in row["spans"])
    return Prediction(spans, tuple(row["unlocated"]), bool(row.get("unreadable")))
