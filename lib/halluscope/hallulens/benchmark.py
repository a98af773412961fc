"""HalluLens registered with the engine: its tasks, its ``benchmarks.hallulens`` options and its metrics."""

from __future__ import annotations

from collections.abc import Iterator

from halluscope.contract.benchmark import Benchmark
from halluscope.contract.metrics import Figure
from halluscope.hallulens import paired, report
from halluscope.hallulens.options import HalluLensOptions
from halluscope.hallulens.tasks import TASKS, describe_knowledge


def _testsets(job_uri: str) -> Iterator[tuple[str, str]]:
    """Builds a job's test sets (one per trial seed), Wikipedia sampled afresh."""
    from halluscope.hallulens.build import load_job, run_job, summary, uri

    job = load_job(job_uri)
    for ts in run_job(job):
        yield uri(ts, job), summary(ts)


FIGURES = (Figure("false_refusal_rate", "lower"), Figure("hallucination_rate", "lower"),
           Figure("correct_rate", "higher"), Figure("precision", "higher"), Figure("recall_at_k", "higher"),
           Figure("f1_at_k", "higher"), Figure("false_acceptance_rate", "lower"))


BENCHMARK = Benchmark("hallulens", TASKS, options=HalluLensOptions, metrics=report.metrics,
                      metrics_per_model=True, score_columns=report.SCORE_COLUMNS, report=report.sections,
                      description="HalluLens: PreciseWikiQA, LongWiki, NonExistentRefusal", testsets=_testsets,
                      describe_knowledge=describe_knowledge, figures=FIGURES, compare=paired.paired,
                      compare_columns=paired.COMPARE_COLUMNS,
                      moved={"verifiers.wiki": "benchmarks.hallulens.wiki"})
