"""FEWL registered with the engine: its task, its ``benchmarks.fewl`` options and its metrics."""

from halluscope.fewl import report
from halluscope.fewl.options import FewlOptions
from halluscope.fewl.task import FewlTask
from halluscope.contract.benchmark import Benchmark

BENCHMARK = Benchmark("fewl", [FewlTask()], options=FewlOptions, metrics=report.metrics,
                      markdown=report.markdown, html=report.html, role_models=lambda o: o.role_models(),
                      description="FEWL: hallucination scores without gold answers, from weighted reference LLMs")
