"""HalluLens registered with the engine: its tasks, its ``benchmarks.hallulens`` options and its metrics."""

from __future__ import annotations

from halluscope.contract.benchmark import Benchmark
from halluscope.hallulens import report
from halluscope.hallulens.options import HalluLensOptions
from halluscope.hallulens.tasks import TASKS

BENCHMARK = Benchmark("hallulens", TASKS, options=HalluLensOptions, metrics=report.metrics,
                      markdown=lambda records: "\n".join(report.leaderboard_section(records)),
                      description="HalluLens: PreciseWikiQA, LongWiki, NonExistentRefusal")
