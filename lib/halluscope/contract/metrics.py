"""A metric record: what a benchmark's metrics hook returns, metrics.json holds and the report reads.

The engine reads a record's typed fields (which model and task it is of, which benchmark made it)
and the values of the figures its benchmark declares (``Figure``): counts (ints) and
``Estimate``s (a rate or a mean with its error), which it merges by each figure's declared
aggregation where several records make one (records that per-model calls each return; a
``Group``'s record over tasks). Every other value is the benchmark's own JSON value, which only
its report hook interprets (the generic report table shows their numbers)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from halluscope.contract.errorbars import interval

# the keys of a record's JSON object that are fields of MetricRecord rather than values
FIELDS = ("model", "task", "benchmark")
# the objects of a record's JSON that hold its estimates' errors, intervals and methods, by figure
BARS = ("stderr", "ci95", "method")
COSTS_TOTAL = "costs/total"  # the task of the engine's record of what the run cost, beside the benchmarks'
# a compare hook's record (``Benchmark.compare``), one per task, model "*", ``aggregate`` true (it
# spans models, so a reader of per-model records passes over it as over averages): ``table``
# PAIRED, ``figures`` (its figure names), ``pairs`` [{a, b, n (items both answered), <figure>: {diff
# (a - b), stderr, ci95}}] and ``method``; where a reader asked for pairs (``MetricInputs.pairs``),
# ``values`` {model: {figure: value}} of their models; the plan and `halluscope compare` read them in this shape
PAIRED = "paired"
# the engine's record of a judge's agreement with a benchmark's reference judge (pipeline/calibration.py),
# one per task and decision, model the judge's id, no benchmark, ``aggregate`` true: ``table``
# AGREEMENT, ``decision``, ``decisions``, estimates ``accuracy`` and ``kappa``, ``min_kappa`` and
# ``below_threshold``; the report opens with them
AGREEMENT = "judge_agreement"
# the methods of the errors the engine's aggregations give
MEAN_SE = "standard error of an unweighted mean of independent task means"
POOLED_SE = "analytic standard error of a mean over the pooled units"


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclass(frozen=True)
class Estimate:
    """A figure measured on a sample (a rate is a mean of 0s and 1s): its value, standard error,
    95% interval and how the error was computed (None where undefined: 0/0, fewer than two
    units). metrics.json holds the value under the figure's key and the rest in the record's
    ``stderr``, ``ci95`` and ``method`` objects under the same key."""

    value: float | None
    se: float | None
    method: str
    ci95: tuple[float, float] | None = None

    @classmethod
    def normal(cls, value: float | None, se: float | None, method: str) -> Estimate:
        """With the normal 95% interval of the value and its error."""
        ci = interval(value, se)
        return cls(value, se, method, None if ci is None else (ci[0], ci[1]))


Aggregation = Literal["sum", "mean", "pooled"]


@dataclass(frozen=True)
class Figure:
    """A figure a benchmark's records hold under ``key``, which way is better, and how several
    records' values of it make one, as lm-evaluation-harness registers a metric's
    ``higher_is_better`` and ``aggregation``.

    ``better``: ``higher``, ``lower``, or None where neither is (a count) or it depends on the
    task (HALOGEN's response ratio: answering is right on a response-based task, refusing on a
    refusal-based one). ``aggregation``: ``sum`` adds counts; ``mean`` is the unweighted mean of
    the records' values (each record, a task, counts once; their errors independent); ``pooled``
    is one estimate over all the records' units, a mean weighted by the count ``over`` names (a
    figure of its own, summed); None: never combined (a group leaves it out, and records merged
    into one must agree on it)."""

    key: str
    better: Literal["higher", "lower"] | None
    aggregation: Aggregation | None = None
    over: str | None = None

    def __post_init__(self) -> None:
        if (self.aggregation == "pooled") != (self.over is not None):
            raise ValueError(f"figure {self.key!r}: a pooled figure, and only one, names the count it is over")

    def merge(self, values: Sequence[object], counts: Sequence[object] = ()) -> object:
        """One value of this figure from several records' (None: a record without one), all
        numbers or all ``Estimate``s; ``counts``: each record's ``over`` count, for ``pooled``.
        ValueError, naming the figure, for values its aggregation cannot merge."""
        if self.aggregation is None:
            if any(v != values[0] for v in values):
                raise ValueError(f"figure {self.key!r} differs between records that are one, and declares no "
                                 "aggregation to merge it by")
            return values[0]
        given = [v for v in values if v is not None]
        typed = any(isinstance(v, Estimate) for v in given)
        alike = all(isinstance(v, Estimate) for v in given) if typed else all(_number(v) for v in given)
        if not alike or (typed and self.aggregation == "sum"):
            kinds = " and ".join(sorted({type(v).__name__ for v in given}))
            wanted = "counts" if self.aggregation == "sum" else "numbers or halluscope.contract.metrics.Estimate values"
            raise ValueError(f"figure {self.key!r} ({self.aggregation}) merges {wanted}, not {kinds}")
        if self.aggregation == "sum":
            return sum(cast(int, v) for v in given)  # counts stay ints
        points = [(_value(v), v.se if isinstance(v, Estimate) else None) for v in values]
        if self.aggregation == "mean":
            return _mean(points, typed)
        if len(counts) != len(values) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                                 for n in counts):
            raise ValueError(f"figure {self.key!r} is pooled over {self.over!r}, which a record lacks or "
                             "holds as no count")
        return _pooled(points, [cast(int, n) for n in counts], typed)


Point = tuple[float | None, float | None]  # a record's value of a figure (None: none, or NaN) and its error


def _value(v: object) -> float | None:
    x = v.value if isinstance(v, Estimate) else v
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and not math.isnan(x) else None


def _mean(points: Sequence[Point], typed: bool) -> object:
    """The unweighted mean of the defined values; an estimate's error is that of a mean of
    independent means, sqrt(sum se^2) / n, where every one has an error."""
    used = [(x, se) for x, se in points if x is not None]
    mean = sum(x for x, _ in used) / len(used) if used else None
    if not typed:
        return mean
    ses = [se for _, se in used if se is not None]
    se = math.sqrt(math.fsum(s * s for s in ses)) / len(used) if used and len(ses) == len(used) else None
    return Estimate.normal(mean, se, MEAN_SE)


def _pooled(points: Sequence[Point], counts: Sequence[int], typed: bool) -> object:
    """The mean over every record's units, weighted by their counts; for estimates, the error of
    a mean over all of them from each record's mean and error (n_i units of variance
    s_i^2 = n_i se_i^2: the spread within the records plus that between their means), exact for
    means and rates."""
    used = [(x, se, n) for (x, se), n in zip(points, counts) if x is not None and n]
    total = sum(n for _, _, n in used)
    if not total:
        return Estimate.normal(None, None, POOLED_SE) if typed else None
    mean = math.fsum(x * n for x, _, n in used) / total
    if not typed:
        return mean
    if total < 2 or any(se is None and n > 1 for _, se, n in used):
        return Estimate.normal(mean, None, POOLED_SE)
    within = math.fsum((n - 1) * n * se * se for _, se, n in used if se is not None)
    between = math.fsum(n * (x - mean) ** 2 for x, _, n in used)
    return Estimate.normal(mean, math.sqrt((within + between) / (total - 1) / total), POOLED_SE)


@dataclass(frozen=True)
class Group:
    """A record the engine adds per model over that model's records of some of a benchmark's
    tasks, as lm-evaluation-harness aggregates a group of tasks: task ``task``, values
    ``labels``, ``aggregate`` true, ``n_tasks`` (the records it merges) and every figure with
    an aggregation, merged by it (HALOGEN's averages over its response- and refusal-based tasks)."""

    task: str
    tasks: frozenset[str]
    labels: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class MetricRecord:
    """One record of a run's metrics: of a model under test and a task, or an aggregate (``model``
    ``"*"`` or a label such as FEWL's ``(labelled candidates)``, ``task`` a group's name such as
    ``halogen/avg-response`` or the engine's ``costs/total``)."""

    model: str
    task: str
    # the benchmark whose metrics hook made it (the engine fills it in when the hook left it out);
    # None: the engine's own record (costs/total), or one stored before records named their benchmark
    benchmark: str | None = None
    # the benchmark's figures (counts, Estimates) and its other values, JSON values
    values: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        clash = [k for k in FIELDS if k in self.values]
        estimated = [k for k, v in self.values.items() if isinstance(v, Estimate)]
        if estimated:  # their errors go into the BARS objects, beside any the values hold
            clash += [k for k in BARS if k in estimated or (k in self.values and (
                not isinstance(self.values[k], Mapping) or any(e in self.values[k] for e in estimated)))]
        if clash:  # as_json would write one over the other
            raise ValueError(f"metric record of {self.model!r}, {self.task!r}: values hold {', '.join(clash)}, "
                             "which are fields of the record or hold its estimates' errors")

    def as_json(self) -> dict[str, Any]:
        """The flat object metrics.json holds: model, task, the values (an estimate's value under
        its key, its error, interval and method under that key of ``stderr``, ``ci95`` and
        ``method``), then benchmark when there is one (the writer sorts the keys, so this order
        reaches only readers in memory)."""
        out = {"model": self.model, "task": self.task,
               **{k: v.value if isinstance(v, Estimate) else v for k, v in self.values.items()}}
        estimates = {k: v for k, v in self.values.items() if isinstance(v, Estimate)}
        if estimates:
            parts: dict[str, dict[str, Any]] = {
                "stderr": {k: e.se for k, e in estimates.items()},
                "ci95": {k: None if e.ci95 is None else list(e.ci95) for k, e in estimates.items()},
                "method": {k: e.method for k, e in estimates.items()}}
            out.update({name: {**self.values.get(name, {}), **part} for name, part in parts.items()})
        if self.benchmark is not None:
            out["benchmark"] = self.benchmark
        return out

    @classmethod
    def from_json(cls, raw: object) -> MetricRecord:
        """A record from its flat object: one read back from a stored metrics.json, or one a benchmark
        built as a dict; a key with its error, interval and method in ``stderr``, ``ci95`` and
        ``method`` is an ``Estimate``. ValueError unless it is an object whose model and task are
        strings, and its benchmark too when it names one."""
        fields = raw if isinstance(raw, Mapping) else {}
        model, task, benchmark = fields.get("model"), fields.get("task"), fields.get("benchmark")
        if not isinstance(model, str) or not isinstance(task, str) or not isinstance(benchmark, (str, type(None))):
            raise ValueError("not an object with string fields model and task (and benchmark, when given)")
        return cls(model, task, benchmark, _estimated({k: v for k, v in fields.items() if k not in FIELDS}))


def _estimated(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with each figure that has its error, interval and method in the ``BARS`` objects
    as an ``Estimate``; what those objects hold of no such figure stays in them."""
    se, ci, method = (values.get(name) for name in BARS)
    if not (isinstance(se, Mapping) and isinstance(ci, Mapping) and isinstance(method, Mapping)):
        return values
    keys = [k for k in se if k in ci and k in method and k in values and k not in BARS
            and _an_estimate(values[k], se[k], ci[k], method[k])]
    if not keys:
        return values
    out = {k: v for k, v in values.items() if k not in BARS}
    out.update({k: Estimate(values[k], se[k], method[k], None if ci[k] is None else (ci[k][0], ci[k][1]))
                for k in keys})
    for name, part in zip(BARS, (se, ci, method)):
        rest = {k: v for k, v in part.items() if k not in keys}
        if rest:
            out[name] = rest
    return out


def _an_estimate(value: object, se: object, ci: object, method: object) -> bool:
    """Whether a figure's value and its entries in the ``BARS`` objects are an estimate's."""
    return ((value is None or _number(value)) and (se is None or _number(se)) and isinstance(method, str)
            and (ci is None or (isinstance(ci, list) and len(ci) == 2)))
