"""RAGTruth (Niu et al.): corpus loading, statistics, detectors, detection metrics, selection.

Each module's docstring records the decisions the paper leaves open (spec: shared/specs/ragtruth.md).
"""

from halluscope.ragtruth.corpus import (
                                        Corpus,
                                        CorpusOptions,
                                        Label,
                                        LabelFilter,
                                        LabelProblem,
                                        Manifest,
                                        Record,
                                        Source,
                                        load_corpus,
                                        load_corpus_dir,
)
from halluscope.ragtruth.detectors import (
                                        Detector,
                                        DetectorOutput,
                                        DetectorProblem,
                                        PromptDetector,
                                        SpanModelDetector,
                                        SpanModelInput,
                                        SpanModelReply,
                                        TokenLabel,
)
from halluscope.ragtruth.metrics import Counts, MetricOptions, Scores, count, merge_counts, score_rows, scores
from halluscope.ragtruth.selection import SelectionReport, select
from halluscope.ragtruth.spans import Prediction, Span
from halluscope.ragtruth.stats import GroupStats, count_stats, merge_stats, model_table, task_table
from halluscope.ragtruth.taxonomy import LabelType, Quality, TaskType

__all__ = [
    "Corpus", "CorpusOptions", "Counts", "Detector", "DetectorOutput", "DetectorProblem",
    "GroupStats", "Label", "LabelFilter", "LabelProblem", "LabelType", "Manifest", "MetricOptions",
    "Prediction", "PromptDetector", "Quality", "Record", "Scores", "SelectionReport", "Source",
    "Span", "SpanModelDetector", "SpanModelInput", "SpanModelReply", "TaskType", "TokenLabel", "count",
    "count_stats", "load_corpus", "load_corpus_dir", "merge_counts", "merge_stats", "model_table", "scores",
    "score_rows", "select", "task_table",
]
