"""Detectors that bound RAGTruth's detection metrics: every gold span, or none."""

from __future__ import annotations

from collections.abc import Sequence

from halluscope.ragtruth.corpus import Record
from halluscope.ragtruth.detectors import DetectorOutput
from halluscope.ragtruth.spans import Prediction, Span


class OracleDetector:
    """Predicts exactly the gold spans (after the corpus' label filter), typed: scores 1/1/1."""

    name = "oracle"

    def predict(self, records: Sequence[Record]) -> DetectorOutput:
        return DetectorOutput({r.id: Prediction(tuple(Span(lb.start, lb.end, lb.label_type) for lb in r.gold))
                               for r in records})


class EmptyDetector:
    """Never flags anything: recall 0 at both levels."""

    name = "empty"

    def predict(self, records: Sequence[Record]) -> DetectorOutput:
        return DetectorOutput({r.id: Prediction() for r in records})
