"""The paper's selection experiment (§6.3, Table 7): use a detector to choose among responses.

For each instance (source) with a response from every candidate model, one response is chosen:
- ``random``: any candidate (the baseline);
- ``fewer_spans`` (S1): a candidate with the fewest detected spans, ties broken at random;
- ``no_spans`` (S2): a candidate with no detected span, at random if several; an instance where
  none qualifies is not valid for S2 (the paper's "valid response num").
The score is the share of chosen responses that have at least one gold span, and each strategy's
reduction is (random - strategy) / random.

Random choices: with ``seed=None`` (default) each strategy's rate is the exact expectation over its
uniform choices (no sampling noise, no seed to record). With a seed, one choice is drawn per
instance from a generator seeded by (seed, strategy, source id), so results do not depend on the
order of records or on how sources were sharded (an instance's responses must be in one call).
Detected spans are counted with ``Prediction.n_spans`` (overlapping spans once). Instances missing
a candidate's response or prediction are skipped and reported by reason; any number (>= 2) of
candidate models is supported.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from halluscope.errors import ConfigError, DataError
from halluscope.ragtruth.corpus import Record
from halluscope.ragtruth.spans import Prediction

STRATEGIES = ("random", "fewer_spans", "no_spans")


@dataclass(frozen=True)
class StrategyResult:
    valid: int  # instances where the strategy chose a response
    hallucinated: Fraction  # chosen responses with gold spans (an expectation when unseeded)
    rate: float | None  # hallucinated / valid
    reduction: float | None  # relative to random: (random - rate) / random


@dataclass(frozen=True)
class SelectionReport:
    models: tuple[str, ...]
    seed: int | None
    n_instances: int  # instances with every candidate's response and prediction
    skipped: dict[str, list[str]]  # reason -> source ids
    candidate_rates: dict[str, float | None]  # each model's own hallucination rate on those instances
    strategies: dict[str, StrategyResult]

    def as_dict(self) -> dict:
        return {
            "models": list(self.models), "seed": self.seed, "n_instances": self.n_instances,
            "skipped": {k: len(v) for k, v in self.skipped.items()}, "candidate_rates": dict(self.candidate_rates),
            "strategies": {name: {"valid": s.valid, "hallucinated": float(s.hallucinated), "rate": s.rate,
                                  "reduction": s.reduction} for name, s in self.strategies.items()},
        }


def _choices(strategy: str, n_spans: Sequence[int]) -> list[int]:
    if strategy == "random":
        return list(range(len(n_spans)))
    if strategy == "fewer_spans":
        low = min(n_spans)
        return [i for i, n in enumerate(n_spans) if n == low]
    return [i for i, n in enumerate(n_spans) if n == 0]


def select(records: Iterable[Record], predictions: Mapping[str, Prediction | None], models: Sequence[str],
           seed: int | None = None) -> SelectionReport:
    models = tuple(models)
    if len(set(models)) < 2 or len(set(models)) != len(models):
        raise ConfigError(f"selection needs at least two distinct candidate models, got {list(models)}")
    by_source: dict[str, dict[str, Record]] = {}
    for r in records:
        if r.model not in models:
            continue
        slot = by_source.setdefault(r.source_id, {})
        if r.model in slot:
            raise DataError(f"source {r.source_id} has two responses from {r.model}: {slot[r.model].id} and {r.id}")
        slot[r.model] = r

    skipped: dict[str, list[str]] = {}
    valid = dict.fromkeys(STRATEGIES, 0)
    hallucinated = dict.fromkeys(STRATEGIES, Fraction(0))
    model_hallucinated = dict.fromkeys(models, 0)
    n_instances = 0
    for source_id, slot in sorted(by_source.items()):
        if len(slot) < len(models):
            skipped.setdefault("missing_response", []).append(source_id)
            continue
        cands = [slot[m] for m in models]
        preds = [p for r in cands if (p := predictions.get(r.id)) is not None]
        if len(preds) < len(cands):
            skipped.setdefault("unpredicted", []).append(source_id)
            continue
        n_instances += 1
        gold = [bool(r.gold) for r in cands]
        for m, g in zip(models, gold):
            model_hallucinated[m] += g
        n_spans = [p.n_spans for p in preds]
        for strategy in STRATEGIES:
            chosen = _choices(strategy, n_spans)
            if not chosen:
                continue
            valid[strategy] += 1
            if seed is None:
                hallucinated[strategy] += Fraction(sum(gold[i] for i in chosen), len(chosen))
            else:
                pick = random.Random(f"{seed}:{strategy}:{source_id}").choice(chosen)
                hallucinated[strategy] += int(gold[pick])

    exact = {s: hallucinated[s] / valid[s] if valid[s] else None for s in STRATEGIES}
    base = exact["random"]
    results: dict[str, StrategyResult] = {}
    for s in STRATEGIES:
        rate = exact[s]
        results[s] = StrategyResult(valid[s], hallucinated[s], None if rate is None else float(rate),
                                    float((base - rate) / base) if base and rate is not None else None)
    return SelectionReport(
        models=models, seed=seed, n_instances=n_instances, skipped=skipped,
        candidate_rates={m: model_hallucinated[m] / n_instances if n_instances else None for m in models},
        strategies=results)
