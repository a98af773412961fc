"""Corpus statistics as the paper's Table 2 (per task) and Table 3 (per model and task).

Every figure is derived from additive counts (``GroupStats``, summed with ``+``), so a table built
from shards equals the table built from the whole corpus. Spans are the records' ``gold`` labels
(what the corpus' label filter keeps; all valid labels by default). Lengths are whitespace words
[spec §1.3, A]. A context is counted once per instance (source), however its responses were
sharded: ``contexts`` maps source id to context words and ``+`` unions it.

Density is 100 x spans / words pooled over responses (spec §4.3 [A]); ``density_mean`` is the
alternative mean over responses of each response's own density (responses without words skipped).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from halluscope.ragtruth.corpus import Record
from halluscope.ragtruth.taxonomy import LABEL_TYPES

StatsKey = tuple[str, str, str]  # (task type, source, model)
ALL = "*"


@dataclass(frozen=True)
class GroupStats:
    n_responses: int = 0
    n_hallucinated: int = 0  # responses with at least one gold span
    n_spans: int = 0
    n_words: int = 0  # response words, summed
    max_words: int = 0
    n_implicit_true: int = 0
    n_due_to_null: int = 0
    spans_by_type: tuple[int, ...] = (0,) * len(LABEL_TYPES)  # in LABEL_TYPES order
    density_sum: Fraction = Fraction(0)  # sum over responses with words of 100 * spans / words
    n_density: int = 0
    contexts: Mapping[str, int] = field(default_factory=dict)  # source id -> context words

    def __add__(self, other: GroupStats) -> GroupStats:
        return total([self, other])


def total(parts: Iterable[GroupStats]) -> GroupStats:
    """The sum of many parts in one pass (``a + b + ...`` would copy ``contexts`` every time)."""
    parts = list(parts)
    contexts: dict[str, int] = {}
    for p in parts:
        contexts.update(p.contexts)
    return GroupStats(
        n_responses=sum(p.n_responses for p in parts), n_hallucinated=sum(p.n_hallucinated for p in parts),
        n_spans=sum(p.n_spans for p in parts), n_words=sum(p.n_words for p in parts),
        max_words=max((p.max_words for p in parts), default=0),
        n_implicit_true=sum(p.n_implicit_true for p in parts), n_due_to_null=sum(p.n_due_to_null for p in parts),
        spans_by_type=tuple(map(sum, zip(*(p.spans_by_type for p in parts)))) if parts else GroupStats.spans_by_type,
        density_sum=sum((p.density_sum for p in parts), Fraction(0)), n_density=sum(p.n_density for p in parts),
        contexts=contexts)


def _words(text: str) -> int:
    return len(text.split())


def record_stats(record: Record) -> GroupStats:
    spans = record.gold
    words = _words(record.response)
    return GroupStats(
        n_responses=1, n_hallucinated=int(bool(spans)), n_spans=len(spans), n_words=words, max_words=words,
        n_implicit_true=sum(lb.implicit_true for lb in spans), n_due_to_null=sum(lb.due_to_null for lb in spans),
        spans_by_type=tuple(sum(lb.label_type is t for lb in spans) for t in LABEL_TYPES),
        density_sum=Fraction(100 * len(spans), words) if words else Fraction(0), n_density=int(words > 0),
        contexts={record.source_id: _words(record.source.context_text())})


def count_stats(records: Iterable[Record]) -> dict[StatsKey, GroupStats]:
    """Per (task type, source, model) counts; merge shards' results with ``merge_stats``."""
    groups: dict[StatsKey, list[GroupStats]] = {}
    for r in records:
        groups.setdefault((r.task_type.value, r.source.source, r.model), []).append(record_stats(r))
    return {key: total(parts) for key, parts in groups.items()}


def merge_stats(*parts: Mapping[StatsKey, GroupStats]) -> dict[StatsKey, GroupStats]:
    groups: dict[StatsKey, list[GroupStats]] = {}
    for part in parts:
        for key, value in part.items():
            groups.setdefault(key, []).append(value)
    return {key: total(values) for key, values in groups.items()}


def _ratio(num: float | Fraction, den: float) -> float | None:
    return float(num) / den if den else None


def _total(groups: Mapping[StatsKey, GroupStats], keep) -> GroupStats:
    return total(value for key, value in sorted(groups.items()) if keep(key))


def _common(g: GroupStats) -> dict:
    return {
        "n_responses": g.n_responses, "n_hallucinated": g.n_hallucinated,
        "hallucinated_pct": _ratio(100 * g.n_hallucinated, g.n_responses), "n_spans": g.n_spans,
        "n_implicit_true": g.n_implicit_true, "n_due_to_null": g.n_due_to_null,
        "spans_by_type": {t.value: n for t, n in zip(LABEL_TYPES, g.spans_by_type)},
    }


def task_table(groups: Mapping[StatsKey, GroupStats]) -> list[dict]:
    """Table 2: one row per task, one per source within a task that has several (the paper
    splits summarization into CNN/DM and recent news), and ``Overall``."""
    rows = []
    tasks = sorted({k[0] for k in groups})
    selections: list[tuple[str, str]] = []
    for task in tasks:
        selections.append((task, ALL))
        srcs = sorted({k[1] for k in groups if k[0] == task})
        if len(srcs) > 1:
            selections.extend((task, s) for s in srcs)
    selections.append(("Overall", ALL))
    for task, src in selections:
        g = _total(groups, lambda k, task=task, src=src: (task in ("Overall", k[0])) and src in (ALL, k[1]))
        ctx = list(g.contexts.values())
        rows.append({
            "task": task, "source": src, "n_instances": len(ctx),
            "context_words_mean": _ratio(sum(ctx), len(ctx)), "context_words_max": max(ctx, default=0),
            "response_words_mean": _ratio(g.n_words, g.n_responses), "response_words_max": g.max_words,
            **_common(g)})
    return rows


def model_table(groups: Mapping[StatsKey, GroupStats]) -> list[dict]:
    """Table 3 (and Table 10's flag counts): one row per (model, task) and per model overall."""
    rows = []
    for model in sorted({k[2] for k in groups}):
        for task in [*sorted({k[0] for k in groups if k[2] == model}), "Overall"]:
            g = _total(groups, lambda k, model=model, task=task: k[2] == model and task in ("Overall", k[0]))
            rows.append({
                "model": model, "task": task, **_common(g),
                "density": _ratio(100 * g.n_spans, g.n_words),
                "density_mean": _ratio(g.density_sum, g.n_density)})
    return rows
