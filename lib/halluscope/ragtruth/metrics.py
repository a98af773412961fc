"""RAGTruth detection metrics (spec §4): response-level and character-level P/R/F1.

Everything is computed from integer counts (``Counts``) that shards sum with ``+``; ratios are
taken only at the end, so 1 shard and N shards give identical results (never averaged ratios).

Decisions (the paper leaves them open, spec §4.2 / §9.1):
- Response level: gold-positive iff the response keeps >= 1 gold span after the label filter;
  predicted-positive iff the detector listed >= 1 span (located or not). P/R/F1 of the positive class.
- Character level, micro (default): Σ|P_r ∩ G_r| / Σ|P_r| and / Σ|G_r| pooled over responses,
  where P_r and G_r are unions of ``[start, end)`` character sets: overlapping spans (predicted or
  gold) never count a character twice. A listed string that could not be located adds its length
  to Σ|P_r| as false-positive characters (and to ``unlocated_*``).
- Character level, macro per response (the spec's alternative): precision averaged over
  responses with predicted characters, recall over responses with gold characters, F1 averaged
  over responses with either (F1_r = 2|P∩G| / (|P|+|G|)). Responses with neither are left out:
  a 0/0 there says nothing about the detector. Sums are exact fractions, so they add across shards.
- Per-type recall (Fig. 4): Σ|P_r ∩ G_r^t| / Σ|G_r^t|; detectors do not type spans, so no per-type precision.
- Pooled ("Overall") means micro over all responses, never the mean of the task scores.
- 0/0 is 0, logged, and named in ``Scores.undefined``.
- A judge answer with no readable list is scored as an empty list (spec §5.1, the authors' code
  after its retries) and counted in ``unreadable``; ``unreadable="exclude"`` leaves it without a
  prediction instead (the detector reads this option: ``PromptDetector(unreadable=...)``).
- A response without a prediction (the judge call failed, or an unreadable answer under
  ``unreadable="exclude"``) is counted in ``unpredicted`` and, by default, scored nowhere;
  ``unpredicted="empty"`` scores it as an empty list too.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from fractions import Fraction
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from halluscope.ragtruth.corpus import Record
from halluscope.ragtruth.detectors import Unreadable
from halluscope.ragtruth.spans import Prediction, merge, overlap, size
from halluscope.ragtruth.taxonomy import LABEL_TYPES

logger = logging.getLogger(__name__)

CountsKey = tuple[str, str]  # (task type, model)
ALL = "*"
OVERALL = "Overall"
_NO_TYPES = (0,) * len(LABEL_TYPES)


class MetricOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    unreadable: Unreadable = "empty"  # a judge answer with no readable list: an empty list (spec §5.1) or left out
    unpredicted: Literal["exclude", "empty"] = "exclude"  # no prediction at all: left out or an empty list
    # the bootstrap of the detection figures' errors (intervals.py): resamples and the seed they are drawn from
    bootstrap_resamples: int = Field(default=1000, ge=100)
    bootstrap_seed: int = 0


@dataclass(frozen=True)
class Counts:
    """Additive counts behind every RAGTruth detection score."""

    n_responses: int = 0  # responses scored
    unpredicted: int = 0  # responses the detector gave no prediction for (see MetricOptions)
    unreadable: int = 0  # responses scored as empty lists because the judge's answer was unreadable
    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0
    gold_chars: int = 0
    pred_chars: int = 0  # includes unlocated characters
    tp_chars: int = 0
    unlocated_spans: int = 0
    unlocated_chars: int = 0
    type_gold_chars: tuple[int, ...] = _NO_TYPES  # in LABEL_TYPES order
    type_tp_chars: tuple[int, ...] = _NO_TYPES
    macro_p_sum: Fraction = Fraction(0)
    macro_p_n: int = 0
    macro_r_sum: Fraction = Fraction(0)
    macro_r_n: int = 0
    macro_f1_sum: Fraction = Fraction(0)
    macro_f1_n: int = 0

    def __add__(self, other: Counts) -> Counts:
        if not isinstance(other, Counts):
            return NotImplemented
        values: dict[str, Any] = {}  # field name -> summed value, whatever the field's type
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            values[f.name] = tuple(x + y for x, y in zip(a, b)) if isinstance(a, tuple) else a + b
        return Counts(**values)

    def __radd__(self, other: object) -> Counts:
        """So ``sum(counts)`` works (it starts from 0)."""
        if other == 0:
            return self
        return NotImplemented


def response_counts(record: Record, prediction: Prediction) -> Counts:
    """Counts for one response and one prediction."""
    gold = merge((lb.start, lb.end) for lb in record.gold)
    pred = merge((s.start, s.end) for s in prediction.spans)
    hit = overlap(pred, gold)
    unlocated = sum(len(s) for s in prediction.unlocated)
    g, p = size(gold), size(pred) + unlocated
    is_gold, is_pred = bool(record.gold), prediction.positive
    type_gold, type_hit = [], []
    for t in LABEL_TYPES:
        gt = merge((lb.start, lb.end) for lb in record.gold if lb.label_type is t)
        type_gold.append(size(gt))
        type_hit.append(overlap(pred, gt))
    return Counts(
        n_responses=1, unreadable=int(prediction.unreadable), tp=int(is_gold and is_pred),
        fp=int(is_pred and not is_gold),
        fn=int(is_gold and not is_pred), tn=int(not is_gold and not is_pred),
        gold_chars=g, pred_chars=p, tp_chars=hit, unlocated_spans=len(prediction.unlocated),
        unlocated_chars=unlocated, type_gold_chars=tuple(type_gold), type_tp_chars=tuple(type_hit),
        macro_p_sum=Fraction(hit, p) if p else Fraction(0), macro_p_n=int(p > 0),
        macro_r_sum=Fraction(hit, g) if g else Fraction(0), macro_r_n=int(g > 0),
        macro_f1_sum=Fraction(2 * hit, p + g) if p + g else Fraction(0), macro_f1_n=int(p + g > 0))


def count(records: Iterable[Record], predictions: Mapping[str, Prediction | None],
          options: MetricOptions | None = None) -> dict[CountsKey, Counts]:
    """Counts per (task type, model); a shard's result, merged with ``merge_counts``.

    A record whose id is absent from ``predictions`` (or maps to None) had no prediction."""
    opts = options or MetricOptions()
    out: dict[CountsKey, Counts] = {}
    for r in records:
        pred = predictions.get(r.id)
        key = (r.task_type.value, r.model)
        if pred is None:
            missing = Counts(unpredicted=1)
            out[key] = out.get(key, Counts()) + missing
            if opts.unpredicted == "exclude":
                continue
            pred = Prediction()
        out[key] = out.get(key, Counts()) + response_counts(r, pred)
    return out


def merge_counts(*parts: Mapping[CountsKey, Counts]) -> dict[CountsKey, Counts]:
    out: dict[CountsKey, Counts] = {}
    for part in parts:
        for key, value in part.items():
            out[key] = out.get(key, Counts()) + value
    return out


@dataclass(frozen=True)
class PRF:
    precision: float
    recall: float
    f1: float


@dataclass(frozen=True)
class Scores:
    response: PRF
    span: PRF  # character level, micro
    span_macro: PRF  # character level, mean over responses
    type_recall: dict[str, float]  # character-level recall per label type
    undefined: tuple[str, ...]  # ratios that were 0/0 and reported as 0
    counts: Counts

    def as_dict(self) -> dict:
        c = self.counts
        out: dict[str, Any] = {
            "n_responses": c.n_responses, "unpredicted": c.unpredicted, "unreadable": c.unreadable,
            "tp": c.tp, "fp": c.fp, "fn": c.fn,
            "tn": c.tn, "gold_chars": c.gold_chars, "pred_chars": c.pred_chars, "tp_chars": c.tp_chars,
            "unlocated_spans": c.unlocated_spans, "unlocated_chars": c.unlocated_chars,
        }
        for name in ("response", "span", "span_macro"):
            prf: PRF = getattr(self, name)
            out.update({f"{name}_precision": prf.precision, f"{name}_recall": prf.recall, f"{name}_f1": prf.f1})
        out["type_recall"] = dict(self.type_recall)
        out["undefined"] = list(self.undefined)
        return out


def scores(counts: Counts, label: str = "") -> Scores:
    """Ratios from counts; 0/0 becomes 0, is logged and is listed in ``undefined``."""
    undefined: list[str] = []

    def ratio(name: str, num: int | Fraction, den: int | Fraction) -> float:
        if den == 0:
            undefined.append(name)
            return 0.0
        return float(Fraction(num) / den)

    def prf(name: str, p_num, p_den, r_num, r_den) -> PRF:
        p, r = ratio(f"{name}_precision", p_num, p_den), ratio(f"{name}_recall", r_num, r_den)
        if p + r == 0:
            undefined.append(f"{name}_f1")
            return PRF(p, r, 0.0)
        return PRF(p, r, 2 * p * r / (p + r))

    c = counts
    response = prf("response", c.tp, c.tp + c.fp, c.tp, c.tp + c.fn)
    span = prf("span", c.tp_chars, c.pred_chars, c.tp_chars, c.gold_chars)
    macro_p = ratio("span_macro_precision", c.macro_p_sum, c.macro_p_n)
    macro_r = ratio("span_macro_recall", c.macro_r_sum, c.macro_r_n)
    macro = PRF(macro_p, macro_r, ratio("span_macro_f1", c.macro_f1_sum, c.macro_f1_n))
    type_recall = {t.value: ratio(f"recall[{t.value}]", hit, gold)
                   for t, hit, gold in zip(LABEL_TYPES, c.type_tp_chars, c.type_gold_chars)}
    if undefined:
        logger.info("RAGTruth metrics%s: 0/0 reported as 0 for %s", f" ({label})" if label else "",
                    ", ".join(undefined))
    return Scores(response, span, macro, type_recall, tuple(undefined), counts)


def score_rows(counts: Mapping[CountsKey, Counts]) -> list[dict]:
    """Rows per (task, model), per task over all models, and ``Overall`` (pooled over everything)."""
    rows = []
    tasks = sorted({k[0] for k in counts})
    for task in [*tasks, OVERALL]:
        in_task = {k: v for k, v in counts.items() if task in (OVERALL, k[0])}
        for model in [ALL, *sorted({k[1] for k in in_task})]:
            total = sum((v for k, v in sorted(in_task.items()) if model in (ALL, k[1])), Counts())
            rows.append({"task": task, "model": model, **scores(total, f"{task}/{model}").as_dict()})
    return rows
