"""PreciseWikiQA and LongWiki test sets: questions a generator model writes from GoodWiki sections.

Pages are binned by harmonic centrality (10 difficulty bins, 0 = hardest), shuffled per bin with the
seed, and one section per page is drawn with the seed. The generator writes a question from the
section, then (second call) checks that the section answers it and writes the gold answer
(PreciseWikiQA: a word or phrase) or a mock answer (LongWiki: a paragraph). Failures are filtered.

Generation runs in rounds: each round takes, for every bin still short, the pages it needs (plus
``oversample``), sends all their question prompts as one batch, then all answer prompts as one
batch. A rejected page is replaced by a fresh page of its bin in the next round, until the bin is
full, its pages run out, or it has used ``max_attempts_per_bin`` pages; the report says per bin how
many items were made and how many candidates were rejected for which reason. Bit-for-bit
reproducibility needs a deterministic generator (temperature 0, or replayed/cached calls): the page
and section draws depend only on the seed.
"""

from __future__ import annotations

import bisect
import hashlib
import math
import random
import re
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from halluscope.contract.completion import Completion
from halluscope.errors import RunError
from halluscope.hallulens import templates
from halluscope.hallulens.sections import (
    LONGWIKI_MAX_WORDS,
    LONGWIKI_MIN_WORDS,
    PWQA_MAX_WORDS,
    PWQA_MIN_WORDS,
    count_sentences,
    split_sections,
    words,
)
from halluscope.hallulens.sources import CentralityScores, PageSet, SourceRef, WikiPage, title_key
from halluscope.hallulens.testset import BinReport, GenerationReport, TestItem, TestSet, TestSetSpec, build_testset
from halluscope.models.base import GenerationRequest, ModelBackend
from halluscope.records import stable_id
from halluscope.storage.fs import Location

GenerateFn = Callable[[list[str]], list[Completion]]
"""A batch of prompts -> one completion per prompt, in order (errors as data, like ModelBackend)."""

LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"

# Deciles of GoodWiki's WikiRank-2024 h-scores, frozen by HalluLens as right-inclusive bin edges.
H_SCORE_EDGES = (-2.0, 1339481.3875000002, 1413480.1812500001, 1471393.09375, 1527383.875, 1582542.25625,
                 1636846.01875, 1689687.5375, 1750039.75, 1857754.69375, 3179443.8875)
MISSING_H_SCORE = -1.0  # a page WikiRank does not list; falls in bin 0, as in the HalluLens code

_LABEL = re.compile(r"^\s*(?:\*\*)?(?:question|answer)\s*\d*\s*:\s*(?:\*\*)?\s*", re.IGNORECASE)
_QUOTES = "\"'“”‘’`*"


def difficulty_bin(h_score: float, edges: Sequence[float]) -> int | None:
    """Bin i holds edges[i] < h <= edges[i+1] (``pandas.cut``, right-inclusive); None outside."""
    if h_score <= edges[0] or h_score > edges[-1]:
        return None
    return bisect.bisect_left(edges, h_score) - 1


@dataclass(frozen=True)
class BackendGenerate:
    """A ``ModelBackend`` (OpenAI-compatible, Serve handle, scripted, replay) as a ``GenerateFn``."""

    backend: ModelBackend
    task: str

    def __call__(self, prompts: list[str]) -> list[Completion]:
        return self.backend.generate_batch(
            [GenerationRequest(self.task, stable_id(p), p) for p in prompts])


def call_generator(generate: GenerateFn, prompts: list[str], step: str, report: GenerationReport) -> list[Completion]:
    """One batched call, counted in the report; a reply of the wrong length is a broken backend."""
    if not prompts:
        return []
    out = list(generate(list(prompts)))
    if len(out) != len(prompts):
        raise RunError(f"{step}: the generator returned {len(out)} completions for {len(prompts)} prompts")
    report.generator_calls += 1
    report.prompts += len(prompts)
    return out


def clean_reply(text: str) -> str:
    """Drop a leading "Question:"/"Answer:" label, markdown emphasis and wrapping quotes."""
    return _LABEL.sub("", text.strip(), count=1).strip().strip(_QUOTES).strip()


class _WikiConfig(BaseModel, ABC):
    model_config = ConfigDict(extra="forbid")

    task: str
    seed: int = 0
    per_bin: int = Field(gt=0)
    bins: list[int]
    generator_model: str = LLAMA_70B
    min_words: int = Field(gt=0, description="shortest usable section, in words (see sections.py)")
    max_words: int = Field(gt=0, description="longer sections are cut into sentence-packed segments")
    bin_edges: list[float] = Field(default_factory=lambda: list(H_SCORE_EDGES))
    oversample: float = Field(default=0.2, ge=0, description="extra pages per round, as a share of the shortfall")
    max_attempts_per_bin: int | None = Field(default=None, gt=0, description="pages sent to the generator per "
                                                                            "bin at most; None: 2 x per_bin")

    @model_validator(mode="after")
    def _check(self) -> _WikiConfig:
        if self.min_words > self.max_words:
            raise ValueError(f"min_words ({self.min_words}) exceeds max_words ({self.max_words})")
        edges = self.bin_edges
        if len(edges) < 2 or any(lo >= hi for lo, hi in zip(edges, edges[1:])):
            raise ValueError("bin_edges must be at least two strictly increasing numbers")
        n_bins = len(self.bin_edges) - 1
        bad = [b for b in self.bins if not 0 <= b < n_bins]
        if bad or not self.bins or len(set(self.bins)) != len(self.bins):
            raise ValueError(f"bins must be distinct levels in 0..{n_bins - 1}, got {self.bins}")
        return self

    @property
    def attempts_limit(self) -> int:
        return self.max_attempts_per_bin or 2 * self.per_bin

    @abstractmethod
    def template_ids(self) -> tuple[str, str]: ...

    @abstractmethod
    def question_prompt(self, title: str, section: str) -> str: ...

    @abstractmethod
    def answer_prompt(self, section: str, question: str) -> str: ...

    @abstractmethod
    def answer_problem(self, answer: str) -> str | None:
        """Why this answer fails the task's filter, or None."""

    def spec(self, sources: dict[str, SourceRef], extra: dict | None = None) -> TestSetSpec:
        params = self.model_dump(mode="json", exclude={"task", "seed", "per_bin", "bins", "generator_model",
                                                       "max_attempts_per_bin"})
        return TestSetSpec(task=self.task, seed=self.seed, bins={str(b): self.per_bin for b in self.bins},
                           generator_models=[self.generator_model], sources=sources,
                           max_attempts_per_bin=self.attempts_limit,
                           templates=templates.template_digests(*self.template_ids()),
                           params={**params, **(extra or {})})


def _unanswerable(answer: str) -> bool:
    low = answer.lower()
    return templates.UNANSWERABLE in low or low.startswith("unfortunately")


class PreciseWikiQAConfig(_WikiConfig):
    """PreciseWikiQA (spec 3.2): 500 pages per bin 0-9, short answers of at most 10 words."""

    task: Literal["precise_wikiqa"] = "precise_wikiqa"

    per_bin: int = Field(default=500, gt=0)
    bins: list[int] = Field(default_factory=lambda: list(range(10)))
    min_words: int = Field(default=PWQA_MIN_WORDS, gt=0)
    max_words: int = Field(default=PWQA_MAX_WORDS, gt=0)
    max_answer_words: int = Field(default=10, gt=0)

    def template_ids(self) -> tuple[str, str]:
        return templates.PWQA_QUESTION, templates.PWQA_ANSWER

    def question_prompt(self, title: str, section: str) -> str:
        return templates.pwqa_question(title, section)

    def answer_prompt(self, section: str, question: str) -> str:
        return templates.pwqa_answer(section, question)

    def answer_problem(self, answer: str) -> str | None:
        if _unanswerable(answer):
            return "unanswerable"
        return "answer_too_long" if words(answer) > self.max_answer_words else None


class LongWikiConfig(_WikiConfig):
    """LongWiki (spec 4.1): 50 pages per bin 5-9, mock answers of at least 4 sentences."""

    task: Literal["longwiki"] = "longwiki"

    per_bin: int = Field(default=50, gt=0)
    bins: list[int] = Field(default_factory=lambda: list(range(5, 10)))
    min_words: int = Field(default=LONGWIKI_MIN_WORDS, gt=0)
    max_words: int = Field(default=LONGWIKI_MAX_WORDS, gt=0)
    min_answer_sentences: int = Field(default=4, gt=0)

    def template_ids(self) -> tuple[str, str]:
        return templates.LONGWIKI_QUESTION, templates.LONGWIKI_ANSWER

    def question_prompt(self, title: str, section: str) -> str:
        return templates.longwiki_question(title, section)

    def answer_prompt(self, section: str, question: str) -> str:
        return templates.longwiki_answer(section, question)

    def answer_problem(self, answer: str) -> str | None:
        if _unanswerable(answer):
            return "unanswerable"
        return "mock_answer_too_short" if count_sentences(answer) < self.min_answer_sentences else None


WikiConfig = PreciseWikiQAConfig | LongWikiConfig


@dataclass
class _Candidate:
    bin: int
    page: WikiPage
    h_score: float
    index: int  # of the section among the page's sections
    sections: int
    section: str
    question: str = ""


@dataclass
class _Bin:
    report: BinReport
    queue: list[tuple[WikiPage, float]]  # next page last
    made: list[TestItem]


def _bin_pages(config: _WikiConfig, pages: Sequence[WikiPage], scores: CentralityScores,
               allowed_titles: Collection[str] | None) -> tuple[dict[int, list[tuple[WikiPage, float]]], Counter]:
    notes: Counter = Counter()
    allowed = None if allowed_titles is None else {title_key(t) for t in allowed_titles}
    if allowed is not None:
        notes["pages_not_in_allowed_titles"] = 0  # reported even when nothing is left out
    by_bin: dict[int, list[tuple[WikiPage, float]]] = {b: [] for b in config.bins}
    for page in sorted(pages, key=lambda p: p.pageid):
        notes["pages"] += 1
        if allowed is not None and title_key(page.title) not in allowed:
            notes["pages_not_in_allowed_titles"] += 1
            continue
        h = scores.get(page.title)
        if h is None:
            notes["pages_without_h_score"] += 1
            h = MISSING_H_SCORE
        b = difficulty_bin(h, config.bin_edges)
        if b is None:
            notes["pages_outside_bin_edges"] += 1
        elif b in by_bin:
            by_bin[b].append((page, h))
    return by_bin, notes


def _take(state: _Bin, config: _WikiConfig) -> list[_Candidate]:
    """This round's candidates of one bin; sets ``stopped`` when the bin is done."""
    need = state.report.target - len(state.made)
    room = config.attempts_limit - state.report.attempts
    if need <= 0 or room <= 0:
        state.report.stopped = "full" if need <= 0 else "max_attempts"
        return []
    want = min(room, math.ceil(need * (1 + config.oversample)))
    out: list[_Candidate] = []
    while len(out) < want and state.queue:
        page, h = state.queue.pop()
        sections = split_sections(page.document, config.min_words, config.max_words)
        usable = [(i, s) for i, s in enumerate(sections) if words(s) >= config.min_words]
        if not usable:
            state.report.unusable["no_usable_section"] += 1
            continue
        index, text = random.Random(f"{config.seed}|{config.task}|section|{page.pageid}").choice(usable)
        out.append(_Candidate(int(state.report.bin), page, h, index, len(sections), text))
    if not out:
        state.report.stopped = "exhausted"
    state.report.attempts += len(out)
    return out


def _item(config: _WikiConfig, c: _Candidate, answer: str, round_no: int) -> TestItem:
    page = c.page
    question_template, answer_template = config.template_ids()
    fields = {"title": page.title, "pageid": page.pageid, "revid": page.revid, "description": page.description,
              "categories": list(page.categories), "reference": c.section, "h_score": c.h_score,
              "h_score_cat": c.bin}
    provenance = {"pageid": page.pageid, "title": page.title, "revid": page.revid, "section_index": c.index,
                  "sections": c.sections, "bin": c.bin, "h_score": c.h_score,
                  "generator_model": config.generator_model, "seed": config.seed, "round": round_no,
                  "templates": {"question": question_template, "answer": answer_template}}
    return TestItem(task=config.task, item_id=stable_id(config.task, page.pageid, c.index, c.question),
                    prompt=c.question, bin=str(c.bin), answer=answer, fields=fields, provenance=provenance)


def _run_round(batch: list[_Candidate], states: dict[int, _Bin], config: _WikiConfig, generate: GenerateFn,
               report: GenerationReport) -> None:
    replies = call_generator(generate, [config.question_prompt(c.page.title, c.section) for c in batch],
                             f"{config.task} question generation", report)
    asked: list[_Candidate] = []
    for c, reply in zip(batch, replies):
        lines = [ln for ln in (clean_reply(reply.text or "").splitlines()) if ln.strip()]
        reason = ("generator_error" if reply.error or reply.text is None
                  else "no_question" if templates.NO_QUESTION in (reply.text or "").upper()
                  else "empty_question" if not lines else None)
        if reason:
            states[c.bin].report.rejected[reason] += 1
            continue
        c.question = clean_reply(lines[0])
        asked.append(c)
    answers = call_generator(generate, [config.answer_prompt(c.section, c.question) for c in asked],
                             f"{config.task} answer check", report)
    for c, reply in zip(asked, answers):
        state = states[c.bin]
        answer = clean_reply(reply.text or "")
        reason = ("generator_error" if reply.error or reply.text is None
                  else "empty_answer" if not answer else config.answer_problem(answer))
        if reason:
            state.report.rejected[reason] += 1
        elif len(state.made) >= state.report.target:
            state.report.surplus += 1
        else:
            state.made.append(_item(config, c, answer, report.rounds))
            state.report.made += 1


def generate_wiki_items(config: WikiConfig, pages: Sequence[WikiPage], scores: CentralityScores,
                        generate: GenerateFn, *, allowed_titles: Collection[str] | None = None
                        ) -> tuple[list[TestItem], GenerationReport]:
    """Items of every bin (bin order, then acceptance order) and the report of how they were made.

    ``allowed_titles`` keeps only those pages: LongWiki drops pages its verification database lacks."""
    by_bin, notes = _bin_pages(config, pages, scores, allowed_titles)
    report = GenerationReport(bins={str(b): BinReport(str(b), config.per_bin, candidates=len(by_bin[b]))
                                    for b in config.bins}, notes=dict(sorted(notes.items())))
    states: dict[int, _Bin] = {}
    for b in config.bins:
        order = list(by_bin[b])
        random.Random(f"{config.seed}|{config.task}|bin|{b}").shuffle(order)
        states[b] = _Bin(report.bins[str(b)], order[::-1], [])
    while True:
        batch = [c for b in config.bins if not states[b].report.stopped for c in _take(states[b], config)]
        if not batch:
            break
        report.rounds += 1
        _run_round(batch, states, config, generate, report)
    return [item for b in config.bins for item in states[b].made], report


def _named_refs(names: Sequence[str], refs: Sequence[SourceRef], stem: str) -> dict[str, SourceRef]:
    if len(refs) == len(names):
        return dict(zip(names, refs))
    return {f"{stem}-{i}": ref for i, ref in enumerate(refs, 1)}


def build_wiki_testset(root: Location, config: WikiConfig, pages: PageSet, scores: CentralityScores,
                       generate: GenerateFn, *, allowed_titles: Collection[str] | None = None) -> TestSet:
    """The stored PreciseWikiQA/LongWiki test set for this config and these sources, or a new one."""
    sources = {**_named_refs(["goodwiki"], pages.refs, "goodwiki"),
               **_named_refs(["wikirank_titles", "wikirank_h"] if len(scores.refs) == 2 else ["h_scores"],
                             scores.refs, "h_scores")}
    extra = None
    if allowed_titles is not None:
        digest = hashlib.sha256("\n".join(sorted({title_key(t) for t in allowed_titles})).encode()).hexdigest()
        extra = {"allowed_titles_sha256": digest}
    spec = config.spec(sources, extra)

    def make() -> tuple[list[TestItem], GenerationReport]:
        items, report = generate_wiki_items(config, pages.pages, scores, generate, allowed_titles=allowed_titles)
        report.notes["sources"] = {"goodwiki": pages.report.as_dict(), "h_scores": scores.report.as_dict()}
        return items, report

    return build_testset(root, spec, make)
