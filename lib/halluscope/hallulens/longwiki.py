"""LongWiki evaluation steps: refusal, claims per sentence, evidence passages, verdicts per claim.

Each LLM step is a pair of functions, one making a row's prompts and one reading that row's
replies (``list[Completion]`` in the same order), so the pipeline can send the prompts of every
row of a batch at once (the task is ``tasks.LongWiki``). The flow for one generation (spec section
4.3):

0. ``refusal_prompt`` -> ``read_refusal``: the knowledgeable judge; a refused row stops here.
1. ``extraction_prompts`` -> ``read_claims``: one prompt per sentence, the sentence marked inside
   up to 3 sentences before and 1 after; claims are de-duplicated exactly within the generation.
2. ``EvidenceFinder.find``: the top-5 passages per claim, pooled over the candidate pages.
3. ``verification_prompts`` -> ``read_verdicts``: one judge call per claim that has evidence.

Offline substitutes for the authors' components, documented as decisions:
- Sentences: ``sections.split_sentences`` (abbreviations and initials stay inside a sentence) on
  each line, so list items and headings are sentences of their own; segtok is not installed.
- Named entities of the prompt: capitalised spans (``prompt_entities``) instead of BERT-large NER.
- Passages: ``split_passages`` with a word budget of 256 (``ArticleStore.load(max_words=256)``).
  FActScore's database already holds 256-RoBERTa-token passages, which that budget keeps whole;
  articles from JSONL/Parquet get 256-word passages, about a third longer than 256 tokens.
- The encoder is the retriever's (all-MiniLM-L6-v2 by default, GTR-T5-large in the paper).
- The authors' 3,500-token cap with shorter few-shot fallbacks is not needed: the extraction
  template is under 300 words, and a snippet of five sentences of a 1,024-token answer keeps the
  prompt far below the cap.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from halluscope.contract.completion import Completion
from halluscope.contract.replies import excerpt
from halluscope.contract.task import Verdict
from halluscope.errors import ConfigError, RunError
from halluscope.hallulens import judging, sections
from halluscope.knowledge.passages import article_title_key
from halluscope.knowledge.retrieval import DenseRetriever


class LongWikiOptions(BaseModel):
    """Evaluation knobs; the defaults are the paper's (K = 32, top-5 passages of 256 tokens).
    ``k`` and ``zero_claims_is_refusal`` are for ``metrics.longwiki``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    k: int = Field(32, ge=1, description="claims a prompt needs for full Recall@K")
    top_k: int = Field(5, ge=1, description="evidence passages per claim, pooled over candidate pages")
    passage_words: int = Field(256, ge=1, description="passage budget the retriever's store was cut with")
    context_before: int = Field(3, ge=0, description="sentences before the marked one in a snippet")
    context_after: int = Field(1, ge=0, description="sentences after the marked one in a snippet")
    min_sentence_chars: int = Field(5, ge=1, description="shorter sentences are skipped")
    # The authors' code, not the paper: a generation yielding no claim counts as a refusal.
    zero_claims_is_refusal: bool = True


# --- step 0: refusal -----------------------------------------------------------------------------


def refusal_prompt(question: str, generation: str) -> str:
    return judging.knowledgeable_prompt(question, generation)


def read_refusal(reply: Completion) -> bool | None:
    """True: refused; None: the call failed or the answer is unreadable (the row is not scored)."""
    return judging.read(reply, judging.parse_refused)


# --- step 1: claims ------------------------------------------------------------------------------

_LINE_MARK = re.compile(r"^\s*(?:[-*•–]|\d{1,3}[.)]|#{1,6})\s+")


def split_sentences(text: str) -> list[str]:
    """Sentences of a generation, in order: each line (list item, heading) on its own, without its
    marker, cut by the abbreviation-aware splitter the test-set builder counts sentences with."""
    return [s for line in text.splitlines() for s in sections.split_sentences(_LINE_MARK.sub("", line).strip())]


def extraction_snippets(generation: str, options: LongWikiOptions = LongWikiOptions()) -> list[str]:
    """One snippet per sentence: the sentence between the markers, with its context around it."""
    sentences = [s for s in split_sentences(generation) if len(s) >= options.min_sentence_chars]
    out = []
    for i, sentence in enumerate(sentences):
        before = sentences[max(0, i - options.context_before):i]
        after = sentences[i + 1:i + 1 + options.context_after]
        out.append(" ".join([*before, f"{judging.SENTENCE_START}{sentence}{judging.SENTENCE_END}", *after]))
    return out


def extraction_prompts(generation: str, options: LongWikiOptions = LongWikiOptions()) -> list[str]:
    return [judging.claims_prompt(s) for s in extraction_snippets(generation, options)]


@dataclass(frozen=True)
class Claims:
    """A generation's claims, unique and in order of first appearance, and what went wrong."""

    claims: list[str]
    n_sentences: int
    n_failed: int = 0  # extractor calls that came back with an error
    n_unreadable: int = 0  # answers that neither list claims nor say there is none
    first_problem: str = ""

    @property
    def error(self) -> str | None:
        """A row whose claims are incomplete is not scored: a missing sentence would lower both
        precision's denominator and recall's numerator without being seen."""
        if not self.n_failed and not self.n_unreadable:
            return None
        return (f"claim extraction: {self.n_failed} failed and {self.n_unreadable} unreadable of "
                f"{self.n_sentences} sentences; first: {self.first_problem}")


def read_claims(replies: Sequence[Completion]) -> Claims:
    claims: dict[str, None] = {}
    failed = unreadable = 0
    problem = ""
    for reply in replies:
        if reply.error is not None or reply.text is None:
            failed += 1
            problem = problem or f"call failed: {reply.error or 'no text'}"
            continue
        parsed = judging.parse_claims(reply.text)
        if parsed is None:
            unreadable += 1
            problem = problem or f"unreadable answer {excerpt(reply.text)!r}"
            continue
        claims.update(dict.fromkeys(parsed))
    return Claims(list(claims), len(replies), failed, unreadable, problem)


# --- step 2: evidence ----------------------------------------------------------------------------

_QUESTION_WORDS = frozenset(
    "what who whom whose when where which why how describe explain discuss tell list give summarize "
    "summarise compare outline analyze analyse identify name detail elaborate provide please can could "
    "would should is are was were do does did in on at for from to by with the a an i "
    "january february march april may june july august september october november december "
    "monday tuesday wednesday thursday friday saturday sunday".split())
_CONNECTORS = frozenset("of the de da del della di du la le van von der den y".split())
_QUOTED = re.compile(r"[\"“]([^\"”]{2,120})[\"”]")
_EDGE = "\"'“”‘’()[]«»"
_OPENS = "\"“‘([«"
_CLOSES = ",.;:!?\"”’)]»"


def prompt_entities(question: str) -> list[str]:
    """Named entities of a prompt, offline: quoted spans, and runs of capitalised words that may
    hold connectors ("Bank of England") and numbers ("Apollo 11"). A run never starts with a
    question word, month or weekday, and breaks at punctuation, quotes and possessives."""
    found: dict[str, None] = dict.fromkeys(m.group(1).strip() for m in _QUOTED.finditer(question))
    run: list[str] = []
    pending: list[str] = []  # connectors kept only if another capitalised word follows

    def close() -> None:
        if len(" ".join(run)) >= 2:
            found.setdefault(" ".join(run))
        run.clear()
        pending.clear()

    for raw in _QUOTED.sub(" , ", question).split():  # quoted spans are entities already
        if raw[0] in _OPENS:
            close()
        core = raw.strip(_EDGE).rstrip(".,;:!?")
        possessive = core.endswith(("'s", "’s"))
        core = core[:-2] if possessive else core
        lower = core.lower()
        if (core[:1].isupper() and lower not in _QUESTION_WORDS) or (run and core.isdigit()):
            run.extend(pending)
            pending.clear()
            run.append(core)
        elif run and lower in _CONNECTORS and raw[-1] not in _CLOSES:
            pending.append(core)
            continue
        else:
            close()
        if possessive or raw[-1] in _CLOSES:
            close()
    close()
    return [e for e in found if e]


class PageIndex:
    """The titles a retriever holds: lookup by exact or normalised title, and the titles that
    contain an entity (the authors' SQL ``LIKE '%entity%'``, a scan cached per entity)."""

    def __init__(self, titles: Iterable[str]) -> None:
        self._by_norm: dict[str, str] = {}
        for title in titles:
            self._by_norm.setdefault(article_title_key(title), title)
        self._containing: dict[str, list[str]] = {}

    def resolve(self, title: str) -> str | None:
        return self._by_norm.get(article_title_key(title))

    def containing(self, entity: str) -> list[str]:
        key = article_title_key(entity)
        if not key:
            return []
        if key not in self._containing:
            self._containing[key] = [t for n, t in self._by_norm.items() if key in n]
        return self._containing[key]


def candidate_pages(topic: str, question: str, claim: str, pages: PageIndex, entities: list[str]) -> list[str]:
    """Pages to search for a claim's evidence, in order, each once (spec section 4.3 step b):
    the page the prompt was made from; each entity of the prompt as a title; titles containing an
    entity that also occur in the claim or the question. Titles not in the store are skipped."""
    out: dict[str, None] = {}
    for name in (topic, *entities):
        found = pages.resolve(name)
        if found is not None:
            out.setdefault(found)
    where = (article_title_key(claim), article_title_key(question))
    for entity in entities:
        for title in pages.containing(entity):
            norm = article_title_key(title)
            if any(norm in text for text in where):
                out.setdefault(title)
    return list(out)


@dataclass(frozen=True)
class Passage:
    title: str
    text: str
    score: float


class EvidenceFinder:
    """Top-k passages per claim by dense retrieval, restricted to the claim's candidate pages.

    The query for a page is ``"{page title} {claim}"`` and its passages were embedded as
    ``"{page title} {passage}"`` (FActScore/HalluLens); the pages' passages are pooled and ranked
    by cosine score (ties: index order). A row's queries are encoded in one batch."""

    def __init__(self, retriever: DenseRetriever, options: LongWikiOptions = LongWikiOptions(),
                 entities: Callable[[str], list[str]] = prompt_entities) -> None:
        built_with = retriever.info.get("max_words")
        if built_with != options.passage_words:
            raise ConfigError(f"the passage index was cut into passages of {built_with} words, but LongWiki is "
                              f"configured for {options.passage_words} (options.passage_words)")
        self.retriever = retriever
        self.options = options
        self.entities = entities
        self.pages = PageIndex(retriever.ranges)

    def find(self, topic: str, question: str, claims: Sequence[str]) -> list[list[Passage]]:
        """The evidence of each claim, best first; [] for a claim without a candidate page."""
        entities = self.entities(question)
        pairs = [(i, title) for i, claim in enumerate(claims)
                 for title in candidate_pages(topic, question, claim, self.pages, entities)]
        if not pairs:
            return [[] for _ in claims]
        vectors = self.retriever.encoder.encode([f"{title} {claims[i]}" for i, title in pairs])
        blocks: dict[str, np.ndarray] = {}
        pooled: list[list[tuple[float, int, str]]] = [[] for _ in claims]
        for (i, title), query in zip(pairs, vectors):
            start, end = self.retriever.ranges[title]
            if title not in blocks:
                blocks[title] = self.retriever.index.reconstruct_n(start, end - start)
            scores = blocks[title] @ query
            pooled[i].extend((float(s), start + j, title) for j, s in enumerate(scores))
        return [[Passage(title, self.retriever.passages[row], score)
                 for score, row, title in sorted(hits, key=lambda h: (-h[0], h[1]))[:self.options.top_k]]
                for hits in pooled]


# --- step 3: verdicts ----------------------------------------------------------------------------


def verification_prompts(claims: Sequence[str], evidence: Sequence[Sequence[Passage]]) -> list[str]:
    """One prompt per claim that has evidence; the passages in reverse rank order, so the best
    one stands next to the claim (as the authors' code builds the context)."""
    _check_aligned(claims, evidence)
    return [judging.verification_prompt(claim, [(p.title, p.text) for p in reversed(passages)])
            for claim, passages in zip(claims, evidence) if passages]


def read_verdicts(claims: Sequence[str], evidence: Sequence[Sequence[Passage]],
                  replies: Sequence[Completion]) -> list[Verdict]:
    """One verdict per claim: supported, unsupported (unverifiable included), or None when the
    claim has no evidence passage, the call failed or the answer is unreadable (counted)."""
    _check_aligned(claims, evidence)
    expected = sum(1 for passages in evidence if passages)
    if len(replies) != expected:
        raise RunError(f"LongWiki verification: {len(replies)} replies for {expected} prompts")
    answers = iter(replies)
    out = []
    for passages in evidence:
        if not passages:
            out.append(Verdict(None, "no evidence passage: no candidate page in the article store"))
            continue
        reply = next(answers)
        supported = judging.read(reply, judging.parse_supported)
        titles = "; ".join(dict.fromkeys(p.title for p in passages))
        if supported is None:
            why = f"call failed: {reply.error}" if reply.error else f"unreadable answer {excerpt(reply.text)!r}"
            out.append(Verdict(None, f"verifier {why}"))
        else:
            out.append(Verdict(supported, f"pages: {titles}; verifier: {excerpt(reply.text, 120)}"))
    return out


def _check_aligned(claims: Sequence[str], evidence: Sequence[Sequence[Passage]]) -> None:
    if len(claims) != len(evidence):
        raise RunError(f"LongWiki: {len(evidence)} evidence lists for {len(claims)} claims")
