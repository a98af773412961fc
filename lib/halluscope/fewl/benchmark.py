"""FEWL registered with the engine: its task, its ``benchmarks.fewl`` options and its metrics."""

from pydantic import BaseModel

from halluscope.contract.benchmark import Benchmark
from halluscope.contract.metrics import Figure
from halluscope.fewl import paired, report
from halluscope.fewl.options import FewlOptions
from halluscope.fewl.task import FewlTask


def _role_models(options: BaseModel) -> list[tuple[str, str]]:
    assert isinstance(options, FewlOptions)  # the engine validated the section with FewlOptions
    return options.role_models()


BENCHMARK = Benchmark("fewl", [FewlTask()], options=FewlOptions, metrics=report.metrics,
                      score_columns=report.SCORE_COLUMNS, report=report.sections, role_models=_role_models,
                      compare=paired.paired, compare_columns=paired.COMPARE_COLUMNS,
                      figures=(Figure("mean_score", "higher"), Figure("mean_truthfulness", "higher"),
                               Figure("mean_penalty", "lower")),
                      description="FEWL: hallucination scores without gold answers, from weighted reference LLMs")
