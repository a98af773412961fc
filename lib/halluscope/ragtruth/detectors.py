"""RAGTruth hallucination detectors: one protocol, several plug-ins.

A detector maps records to a ``Prediction`` per response (character spans, optionally typed).
A response it could not judge (failed call, malformed reply) gets no prediction and a
``DetectorProblem``; metrics count it apart and never score it as "no hallucination". A judge
answer with no readable list is, by default, a prediction of an empty list flagged
``unreadable`` (spec §5.1: the authors' code counts it so after its retries), with an
``unreadable`` problem; ``unreadable="exclude"`` leaves it without a prediction instead. Problems
that do not cost the prediction (a listed string not found in the response, an entry with no
text) are reported too.

- ``PromptDetector``: an LLM judge. ``prompts(records)`` gives one prompt per record, the pipeline
  batches them through the judge role, ``parse(records, replies)`` reads the answers; with a
  ``ModelBackend`` it can also run itself (``predict``).
- ``SpanModelDetector``: a fine-tuned span/token classifier behind any callable (e.g. a Ray Serve
  handle wrapper); see ``SpanBackend`` for the contract.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from halluscope.contract.completion import Completion
from halluscope.contract.replies import excerpt
from halluscope.errors import ConfigError, RunError
from halluscope.models.base import GenerationRequest, ModelBackend
from halluscope.ragtruth.corpus import Record
from halluscope.ragtruth.parse import read_hallucination_list
from halluscope.ragtruth.prompts import TEMPLATE_ID, judge_prompt
from halluscope.ragtruth.spans import Prediction, Span, locate
from halluscope.ragtruth.taxonomy import LabelType, parse_label_type

ProblemReason = Literal["call_error", "unreadable", "unlocated_span", "bad_item", "backend_error", "bad_reply"]
# reasons that leave the response without a prediction ("unreadable" only with unreadable="exclude")
NO_PREDICTION: frozenset[str] = frozenset({"call_error", "unreadable", "backend_error", "bad_reply"})
Unreadable = Literal["empty", "exclude"]  # how a judge answer with no readable list is scored


@dataclass(frozen=True)
class DetectorProblem:
    response_id: str
    reason: ProblemReason
    detail: str


@dataclass
class DetectorOutput:
    predictions: dict[str, Prediction] = field(default_factory=dict)  # response id -> prediction
    problems: list[DetectorProblem] = field(default_factory=list)

    def problem_counts(self) -> dict[str, int]:
        return dict(Counter(p.reason for p in self.problems))

    def unpredicted(self) -> list[str]:
        return [p.response_id for p in self.problems
                if p.reason in NO_PREDICTION and p.response_id not in self.predictions]


class Detector(Protocol):
    name: str

    def predict(self, records: Sequence[Record]) -> DetectorOutput:
        """A prediction for every record it could judge; problems for the rest."""
        ...


def _check_lengths(what: str, records: Sequence[Record], replies: Sequence[object]) -> None:
    if len(replies) != len(records):
        raise RunError(f"{what}: {len(replies)} replies for {len(records)} records; one per record is required")


class PromptDetector:
    """The paper's prompt-based detector with our judge prompt (``prompts.TEMPLATE_ID``).

    Each string in the judge's list is located in the response by ``spans.locate``: exact search
    forward from the previous match, then anywhere, then the same on whitespace/case/quote-
    normalised text; one occurrence per listed string. A string found nowhere stays in the
    prediction as unlocated (false-positive characters) and is reported as ``unlocated_span``."""

    template_id = TEMPLATE_ID

    def __init__(self, backend: ModelBackend | None = None, name: str = "prompt",
                 unreadable: Unreadable = "empty") -> None:
        self.backend = backend
        self.name = name
        self.unreadable = unreadable

    def prompts(self, records: Sequence[Record]) -> list[str]:
        return [judge_prompt(r) for r in records]

    def requests(self, records: Sequence[Record]) -> list[GenerationRequest]:
        return [GenerationRequest(task=f"ragtruth/{r.task_type.value}", item_id=r.id, prompt=p)
                for r, p in zip(records, self.prompts(records))]

    def parse(self, records: Sequence[Record], replies: Sequence[Completion]) -> DetectorOutput:
        _check_lengths(self.name, records, replies)
        out = DetectorOutput()
        for record, reply in zip(records, replies):
            if reply.error is not None or reply.text is None:
                out.problems.append(DetectorProblem(record.id, "call_error", reply.error or "no text"))
                continue
            answer = read_hallucination_list(reply.text)
            if not answer.readable:
                out.problems.append(DetectorProblem(record.id, "unreadable", excerpt(reply.text, 200)))
                if self.unreadable == "empty":
                    out.predictions[record.id] = Prediction(unreadable=True)
                continue
            for bad in answer.bad_items:
                out.problems.append(DetectorProblem(record.id, "bad_item", bad))
            spans, missing = locate(answer.items, record.response)
            for text in missing:
                out.problems.append(DetectorProblem(record.id, "unlocated_span", excerpt(text, 200)))
            out.predictions[record.id] = Prediction(tuple(spans), tuple(missing))
        return out

    def predict(self, records: Sequence[Record]) -> DetectorOutput:
        if self.backend is None:
            raise ConfigError(f"detector {self.name}: predict() needs a judge backend; "
                              "otherwise send prompts() through the judge role and call parse()")
        return self.parse(records, self.backend.generate_batch(self.requests(records)))


@dataclass(frozen=True)
class SpanModelInput:
    response_id: str
    task_type: str  # QA | Data2txt | Summary
    context: str  # Source.context_text(): article, question + passages, or business JSON
    response: str


@dataclass(frozen=True)
class TokenLabel:
    start: int  # character offsets of the token in the response, end exclusive
    end: int
    hallucinated: bool
    label_type: LabelType | None = None


@dataclass(frozen=True)
class SpanModelReply:
    """Exactly one of ``spans`` (character spans), ``tokens`` (per-token labels) or ``error``.

    ``spans=()`` means "no hallucination"; a reply with neither spans, tokens nor error is malformed.
    Span types may be ``LabelType``s or their names; other names become None (predicted types are
    not scored: RAGTruth reports per-type recall against gold types only)."""

    spans: Sequence[Span] | None = None
    tokens: Sequence[TokenLabel] | None = None
    error: str | None = None


# The contract: called with a batch of inputs, returns one reply per input, in order. Offsets are
# characters of ``SpanModelInput.response`` (not of a tokenizer's string), end exclusive. A reply
# that cannot be produced comes back with ``error`` set; an exception fails the whole batch, which
# is then reported per response (backend_error), not raised.
SpanBackend = Callable[[Sequence[SpanModelInput]], Sequence[SpanModelReply]]


def _tokens_to_spans(tokens: Sequence[TokenLabel], response: str) -> list[Span]:
    """Runs of hallucinated tokens of the same type, joined across whitespace-only gaps, become one
    span each (so span counts - used by the selection experiment - count phrases, not tokens)."""
    spans: list[Span] = []
    for tok in sorted(tokens, key=lambda t: (t.start, t.end)):
        if not tok.hallucinated:
            continue
        if spans and spans[-1].label_type == tok.label_type and \
                (tok.start <= spans[-1].end or not response[spans[-1].end:tok.start].strip()):
            spans[-1] = Span(spans[-1].start, max(spans[-1].end, tok.end), tok.label_type)
        else:
            spans.append(Span(tok.start, tok.end, tok.label_type))
    return spans


def _as_spans(raw: Sequence[Sequence]) -> list[Span] | None:
    """Backend spans as ``Span``s; a type given as a string is read against the taxonomy."""
    out = []
    for s in raw:
        if not isinstance(s, (tuple, list)) or len(s) not in (2, 3):
            return None
        out.append(Span(s[0], s[1], parse_label_type(s[2]) if len(s) == 3 else None))
    return out


def _bad_offsets(items: Sequence[Span | TokenLabel], n: int) -> str | None:
    for it in items:
        if not (isinstance(it.start, int) and isinstance(it.end, int) and 0 <= it.start < it.end <= n):
            return f"offsets [{it.start}, {it.end}) are not inside a response of {n} characters"
    return None


def _reply_spans(reply: SpanModelReply, response: str) -> list[Span] | str:
    """A reply's spans (its tokens joined into spans), or why they cannot be used."""
    if reply.spans is not None:
        spans = _as_spans(reply.spans)
        if spans is None:
            return "spans must be (start, end) or (start, end, label type)"
        bad = _bad_offsets(spans, len(response))
        return bad if bad else spans
    tokens = list(reply.tokens or ())
    bad = _bad_offsets(tokens, len(response))
    return bad if bad else _tokens_to_spans(tokens, response)


class SpanModelDetector:
    """A fine-tuned detector (the paper's Llama-2-13B, or a token classifier) behind ``SpanBackend``."""

    def __init__(self, backend: SpanBackend, batch_size: int = 32, name: str = "span-model") -> None:
        if batch_size < 1:
            raise ConfigError(f"detector {name}: batch_size must be >= 1, got {batch_size}")
        self.backend = backend
        self.batch_size = batch_size
        self.name = name

    def inputs(self, records: Sequence[Record]) -> list[SpanModelInput]:
        return [SpanModelInput(r.id, r.task_type.value, r.source.context_text(), r.response) for r in records]

    def parse(self, records: Sequence[Record], replies: Sequence[SpanModelReply]) -> DetectorOutput:
        _check_lengths(self.name, records, replies)
        out = DetectorOutput()
        for record, reply in zip(records, replies):
            if reply.error is not None:
                out.problems.append(DetectorProblem(record.id, "backend_error", reply.error))
                continue
            if (reply.spans is None) == (reply.tokens is None):
                out.problems.append(DetectorProblem(record.id, "bad_reply",
                                                    "a reply needs exactly one of spans or tokens"))
                continue
            spans = _reply_spans(reply, record.response)
            if isinstance(spans, str):
                out.problems.append(DetectorProblem(record.id, "bad_reply", spans))
                continue
            out.predictions[record.id] = Prediction(tuple(spans))
        return out

    def predict(self, records: Sequence[Record]) -> DetectorOutput:
        out = DetectorOutput()
        for i in range(0, len(records), self.batch_size):
            batch = records[i:i + self.batch_size]
            try:
                replies = self.backend(self.inputs(batch))
            except Exception as err:  # one failed batch is reported per response, the rest go on
                out.problems.extend(DetectorProblem(r.id, "backend_error", f"{type(err).__name__}: {err}")
                                    for r in batch)
                continue
            part = self.parse(batch, list(replies))
            out.predictions.update(part.predictions)
            out.problems.extend(part.problems)
        return out
