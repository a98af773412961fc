"""The two LLM calls FEWL makes per question, as prompts out and parsed replies back.

(a) each reference LLM answers the question (or, in the paper's "multi" mode, one LLM writes
several diverse answers in one call, App. C.6); (b) one LLM writes K intentionally wrong (IW)
answers, each with a corrected (CO) version that rejects it in general terms (§2.1, App. C.1).
The wording is ours; the inputs and the one-call-per-question shape are the paper's. The pipeline
sends ``*_requests`` through a model backend and hands the ``Completion``s back to ``parse_*``;
a failed call or an unreadable reply is recorded in a ``ParseReport`` per step, model and question.

Template ids are versioned: change the words, change the id (it is part of the call-cache key and
recorded with every score).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from halluscope.contract.completion import Completion
from halluscope.contract.replies import excerpt
from halluscope.fewl.parsing import parse_answer, parse_answers, parse_pairs

REFERENCE = "fewl-reference-v1"
REFERENCE_MULTI = "fewl-reference-multi-v1"
IW_CO = "fewl-iwco-v1"
TEMPLATES = (REFERENCE, REFERENCE_MULTI, IW_CO)

Step = Literal["reference", "iw_co"]
IssueKind = Literal["call_failed", "unparseable", "short", "incomplete_pairs"]


def _one_line(text: str) -> str:
    return " ".join(text.split())


def reference_prompt(question: str) -> str:
    return ("Answer the question below truthfully and briefly, in one or two sentences. If the question "
            "rests on a false assumption, say so instead of going along with it. Write only the answer.\n\n"
            f"Question: {_one_line(question)}\n"
            "Answer:")


def reference_multi_prompt(question: str, n: int) -> str:
    return (f"Write {n} different answers to the question below. Each must be an answer you believe is "
            "true, in one or two sentences, and each should be worded differently from the others. "
            f"Number them 1 to {n}, one per line, and write nothing else.\n\n"
            f"Question: {_one_line(question)}")


def iw_co_prompt(question: str, n: int) -> str:
    return (f"Question: {_one_line(question)}\n\n"
            f"Write {n} different wrong answers to this question. After each wrong answer write a corrected "
            "statement that rejects it in general terms, in your own words rather than by inserting "
            "\"not\" into the wrong answer. For example, for the wrong answer \"The Moon shines with its "
            "own light.\" a corrected statement is \"The Moon's glow is sunlight it reflects, not light "
            "it produces.\" Vary how the corrections are phrased.\n\n"
            f"Use exactly this layout, numbered from 1 to {n}:\n"
            "1. Wrong: <a wrong answer>\n"
            "   Corrected: <its corrected statement>\n"
            "2. Wrong: ...\n"
            "   Corrected: ...")


@dataclass(frozen=True)
class ParseIssue:
    step: Step
    model: str
    question_id: str
    kind: IssueKind
    detail: str


@dataclass
class ParseReport:
    """Everything a parse step could not use, per step, model and question (a verdict's evidence)."""

    issues: list[ParseIssue] = field(default_factory=list)

    def add(self, step: Step, model: str, question_id: str, kind: IssueKind, detail: str) -> None:
        self.issues.append(ParseIssue(step, model, question_id, kind, detail))

    def counts(self) -> dict[str, dict[str, dict[str, int]]]:
        """{step: {model: {kind: n}}}."""
        tally = Counter((i.step, i.model, i.kind) for i in self.issues)
        out: dict[str, dict[str, dict[str, int]]] = {}
        for (step, model, kind), n in sorted(tally.items()):
            out.setdefault(step, {}).setdefault(model, {})[kind] = n
        return out

    def to_dict(self) -> dict:
        return {"counts": self.counts(),
                "issues": [{"step": i.step, "model": i.model, "question_id": i.question_id, "kind": i.kind,
                            "detail": i.detail} for i in self.issues]}


def reference_ids(model: str, samples: int) -> list[str]:
    """One reference per (model, sample): a model's k-th sampled answer is reference ``model#k``, and
    its k-th answer to a neighbour question is that same reference's answer there."""
    return [model] if samples == 1 else [f"{model}#{k}" for k in range(samples)]


def _reply_text(reply: Completion) -> str | None:
    return None if reply.error is not None else reply.text


def reference_requests(question: str, samples: int = 1) -> list[str]:
    """The prompt each reference model gets for a question: one call, one or ``samples`` answers."""
    return [reference_prompt(question) if samples == 1 else reference_multi_prompt(question, samples)]


def parse_references(question_id: str, model: str, replies: Sequence[Completion], report: ParseReport,
                     samples: int = 1) -> dict[str, str]:
    """{reference id: answer} from one model's reply; fewer than ``samples`` answers keeps those read."""
    (reply,) = replies
    text = _reply_text(reply)
    if text is None:
        report.add("reference", model, question_id, "call_failed", reply.error or "no text")
        return {}
    if samples == 1:
        answer = parse_answer(text)
        answers = [answer] if answer else []
    else:
        answers = parse_answers(text, samples)
    if not answers:
        report.add("reference", model, question_id, "unparseable", excerpt(text))
    elif len(answers) < samples:
        report.add("reference", model, question_id, "short", f"{len(answers)} of {samples} answers")
    return dict(zip(reference_ids(model, samples), answers))


@dataclass(frozen=True)
class IwCoAnswers:
    wrong: tuple[str, ...]
    corrected: tuple[str, ...]
    model: str
    template: str = IW_CO


def iw_co_requests(question: str, pairs: int = 25) -> list[str]:
    """One call per question writes all the IW/CO pairs (App. C.3)."""
    return [iw_co_prompt(question, pairs)]


def parse_iw_co(question_id: str, model: str, replies: Sequence[Completion], report: ParseReport,
                min_pairs: int = 1) -> IwCoAnswers | None:
    """The pairs read from the reply; None (recorded) when fewer than ``min_pairs`` could be read, and
    the question's expertise then falls back as ``FewlParams.missing_pairs`` says."""
    (reply,) = replies
    text = _reply_text(reply)
    if text is None:
        report.add("iw_co", model, question_id, "call_failed", reply.error or "no text")
        return None
    parsed = parse_pairs(text)
    if len(parsed.pairs) < min_pairs:
        report.add("iw_co", model, question_id, "unparseable",
                   f"{len(parsed.pairs)} pairs read (need {min_pairs}): {excerpt(text)}")
        return None
    if parsed.incomplete:
        report.add("iw_co", model, question_id, "incomplete_pairs", f"{parsed.incomplete} items without a partner")
    return IwCoAnswers(parsed.wrong, parsed.corrected, model)
