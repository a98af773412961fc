"""HALOGEN registered with the engine: its tasks (``tasks.py``), its ``benchmarks.halogen``
options, its metrics and the recorded steps of its released models."""

from __future__ import annotations

from halluscope.contract.benchmark import Benchmark, MetricInputs
from halluscope.contract.metrics import Figure, Group, MetricRecord
from halluscope.halogen.attribution.cli import add_parser as add_attribute_parser
from halluscope.halogen.metrics import AVG_REFUSAL, AVG_RESPONSE, CORRECTED, SCORE_COLUMNS, rule_set, task_metrics
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
    return [MetricRecord.from_json(r) for r in paired(inputs.scores, list(inputs.tasks), inputs.pairs)]


# R's better direction is the task's: answering on a response-based task, refusing on a refusal-based
# one. A group's record (below) is the unweighted mean of its tasks' figures, with their items and errors
FIGURES = (Figure("response_ratio", None, "mean"), Figure("hallucination_score", "lower", "mean"),
           Figure("hallucination_score_micro", "lower", "mean"), Figure("utility_score", "higher", "mean"),
           Figure("n_items", None, "sum"), Figure("n_errors", None, "sum"))
# Tables 2 and 3: each model's averages over its response- and over its refusal-based tasks, for each
# rule set (refusal before response, corrected before paper: the order the averages always came in)
GROUPS = tuple(Group(avg + (CORRECTED if rules == "corrected" else ""),
                     frozenset(t.name for t in TASKS if t.kind == kind and rule_set(t.name) == rules),
                     {"task_kind": kind})
               for kind, avg in (("refusal", AVG_REFUSAL), ("response", AVG_RESPONSE))
               for rules in ("corrected", "paper"))


BENCHMARK = Benchmark(NAME, TASKS, options=HalogenOptions, metrics=_metrics, metrics_per_model=True,
                      groups=GROUPS, score_columns=SCORE_COLUMNS, compare=_compare,
                      compare_columns=COMPARE_COLUMNS, figures=FIGURES,
                      stand_in=extract, describe_knowledge=describe_knowledge, moved=MOVED, report=sections,
                      recorded_steps=replies,
                      recorded_models=sorted({m for files in RECORDED_FILES.values() for m in files}),
                      commands=add_attribute_parser,  # halluscope attribute RUN: section 5's analysis
                      description="HALOGEN: nine domains, paper rules and corrected rules")
