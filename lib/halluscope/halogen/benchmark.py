"""HALOGEN registered with the engine: its nine tasks under each rule set, in the order of the
paper's Table 1, its ``benchmarks.halogen`` options and its metrics."""

from __future__ import annotations

from collections.abc import Sequence

from halluscope.contract.benchmark import Benchmark, MetricInputs
from halluscope.contract.metrics import MetricRecord
from halluscope.halogen.attribution.cli import add_parser as add_attribute_parser
from halluscope.halogen.biographies import Biographies
from halluscope.halogen.code import CodePackages
from halluscope.halogen.grounded import simplification, summarization
from halluscope.halogen.historical_events import HistoricalEvents
from halluscope.halogen.lists import FalsePresuppositions, RationalizationNumerical
from halluscope.halogen.metrics import SCORE_COLUMNS, averages, task_metrics
from halluscope.halogen.options import MOVED, NAME, HalogenOptions, describe_knowledge
from halluscope.halogen.paper import RULE_SETS
from halluscope.halogen.rationalization_binary import RationalizationBinary
from halluscope.halogen.references import References
from halluscope.halogen.report import sections
from halluscope.halogen.stand_in import extract

TASKS = [task(rules) for rules in RULE_SETS
         for task in (CodePackages, References, summarization, simplification, Biographies, HistoricalEvents,
                      FalsePresuppositions, RationalizationBinary, RationalizationNumerical)]


def _metrics(inputs: MetricInputs) -> list[MetricRecord]:
    return [MetricRecord.from_json(r) for r in task_metrics(inputs.scores)]


def _summarize(per_task: Sequence[MetricRecord]) -> list[MetricRecord]:
    """The per-task records, then each model's averages over its tasks (Tables 2 and 3)."""
    return [*per_task, *(MetricRecord.from_json(r) for r in averages([r.as_json() for r in per_task]))]


BENCHMARK = Benchmark(NAME, TASKS, options=HalogenOptions, metrics=_metrics, metrics_per_model=True,
                      summarize=_summarize, score_columns=SCORE_COLUMNS,
                      stand_in=extract, describe_knowledge=describe_knowledge, moved=MOVED, report=sections,
                      commands=add_attribute_parser,  # halluscope attribute RUN: section 5's analysis
                      description="HALOGEN: nine domains, paper rules and corrected rules")
