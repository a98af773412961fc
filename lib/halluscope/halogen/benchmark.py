"""HALOGEN registered with the engine: its tasks (``tasks.py``), its ``benchmarks.halogen``
options, its metrics and the recorded steps of its released models."""

from __future__ import annotations

from collections.abc import Sequence

from halluscope.contract.benchmark import Benchmark, MetricInputs
from halluscope.contract.metrics import Figure, MetricRecord
from halluscope.halogen.attribution.cli import add_parser as add_attribute_parser
from halluscope.halogen.metrics import SCORE_COLUMNS, averages, task_metrics
from halluscope.halogen.options import MOVED, NAME, HalogenOptions, describe_knowledge
from halluscope.halogen.paired import COMPARE_COLUMNS, paired
from halluscope.halogen.recorded import replies
from halluscope.halogen.report import sections
from halluscope.halogen.stand_in import extract
from halluscope.halogen.steps import RECORDED_FILES
from halluscope.halogen.tasks import TASKS


def _metrics(inputs: MetricInputs) -> list[MetricRecord]:
    return [MetricRecord.from_json(r) for r in task_metrics(inputs.scores)]


def _compare(inputs: MetricInputs) -> list[MetricRecord]:
    return [MetricRecord.from_json(r) for r in paired(inputs.scores, list(inputs.tasks))]


def _summarize(per_task: Sequence[MetricRecord]) -> list[MetricRecord]:
    """The per-task records, then each model's averages over its tasks (Tables 2 and 3)."""
    return [*per_task, *(MetricRecord.from_json(r) for r in averages([r.as_json() for r in per_task]))]


# R's better direction is the task's: answering on a response-based task, refusing on a refusal-based one
FIGURES = (Figure("response_ratio", None), Figure("hallucination_score", "lower"),
           Figure("hallucination_score_micro", "lower"), Figure("utility_score", "higher"))


BENCHMARK = Benchmark(NAME, TASKS, options=HalogenOptions, metrics=_metrics, metrics_per_model=True,
                      summarize=_summarize, score_columns=SCORE_COLUMNS, compare=_compare,
                      compare_columns=COMPARE_COLUMNS, figures=FIGURES,
                      stand_in=extract, describe_knowledge=describe_knowledge, moved=MOVED, report=sections,
                      recorded_steps=replies,
                      recorded_models=sorted({m for files in RECORDED_FILES.values() for m in files}),
                      commands=add_attribute_parser,  # halluscope attribute RUN: section 5's analysis
                      description="HALOGEN: nine domains, paper rules and corrected rules")
