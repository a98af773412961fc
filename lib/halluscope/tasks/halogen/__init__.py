"""HALOGEN's nine tasks, in the order of the paper's Table 1."""

from halluscope.tasks.halogen.biographies import Biographies
from halluscope.tasks.halogen.code import CodePackages
from halluscope.tasks.halogen.grounded import simplification, summarization
from halluscope.tasks.halogen.historical_events import HistoricalEvents
from halluscope.tasks.halogen.lists import FalsePresuppositions, RationalizationNumerical
from halluscope.tasks.halogen.rationalization_binary import RationalizationBinary
from halluscope.tasks.halogen.references import References

from halluscope.metrics.halogen import SCORE_COLUMNS, compute
from halluscope.tasks.benchmark import Benchmark, MetricInputs
from halluscope.tasks.halogen.paper import RULE_SETS

TASKS = [task(rules) for rules in RULE_SETS
         for task in (CodePackages, References, summarization, simplification, Biographies, HistoricalEvents,
                      FalsePresuppositions, RationalizationBinary, RationalizationNumerical)]


def _metrics(inputs: MetricInputs) -> list[dict]:
    return compute(inputs.scores)


BENCHMARK = Benchmark("halogen", TASKS, metrics=_metrics, score_columns=SCORE_COLUMNS,
                      description="HALOGEN: nine domains, paper rules and corrected rules")
