"""A metric record: what a benchmark's metrics hook returns, metrics.json holds and the report reads.

The engine reads only the typed fields: which model and task a record is of and which benchmark
made it. A benchmark's own figures stay in ``values``, whose keys only that benchmark's report
hook interprets (the generic report table shows their numbers)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

# the keys of a record's JSON object that are fields of MetricRecord rather than values
FIELDS = ("model", "task", "benchmark")
COSTS_TOTAL = "costs/total"  # the task of the engine's record of what the run cost, beside the benchmarks'
# a compare hook's record (``Benchmark.compare``), one per task, model "*", ``aggregate`` true (it
# spans models, so a reader of per-model records passes over it as over averages): ``table`` PAIRED,
# ``figures`` (its figure names), ``pairs`` [{a, b, n (items both answered), <figure>: {diff (a - b),
# stderr, ci95}}] and ``method``; the plan and `halluscope compare` read them in this shape
PAIRED = "paired"
# the engine's record of a judge's agreement with a benchmark's reference judge (pipeline/calibration.py),
# one per task and decision, model the judge's id, no benchmark, ``aggregate`` true: ``table``
# AGREEMENT, ``decision``, ``decisions``, ``accuracy``, ``kappa`` (with stderr, ci95, method),
# ``min_kappa`` and ``below_threshold``; the report opens with them
AGREEMENT = "judge_agreement"


@dataclass(frozen=True)
class Figure:
    """A figure a benchmark's records hold under ``key``, and which way is better: ``higher``,
    ``lower``, or None where it depends on the task (HALOGEN's response ratio: answering is right
    on a response-based task, refusing on a refusal-based one)."""

    key: str
    better: Literal["higher", "lower"] | None


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
    values: Mapping[str, Any] = field(default_factory=dict)  # the benchmark's own figures, JSON values

    def __post_init__(self) -> None:
        clash = [k for k in FIELDS if k in self.values]
        if clash:  # as_json would write one over the other
            raise ValueError(f"metric record of {self.model!r}, {self.task!r}: values hold {', '.join(clash)}, "
                             "which are fields of the record")

    def as_json(self) -> dict[str, Any]:
        """The flat object metrics.json holds: model, task, the values, then benchmark when there is one
        (the writer sorts the keys, so this order reaches only readers in memory)."""
        out = {"model": self.model, "task": self.task, **self.values}
        if self.benchmark is not None:
            out["benchmark"] = self.benchmark
        return out

    @classmethod
    def from_json(cls, raw: object) -> MetricRecord:
        """A record from its flat object: one read back from a stored metrics.json, or one a benchmark
        built as a dict. ValueError unless it is an object whose model and task are strings, and its
        benchmark too when it names one."""
        fields = raw if isinstance(raw, Mapping) else {}
        model, task, benchmark = fields.get("model"), fields.get("task"), fields.get("benchmark")
        if not isinstance(model, str) or not isinstance(task, str) or not isinstance(benchmark, (str, type(None))):
            raise ValueError("not an object with string fields model and task (and benchmark, when given)")
        return cls(model, task, benchmark, {k: v for k, v in fields.items() if k not in FIELDS})
