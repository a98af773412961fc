"""FEWL as a task of the engine: the models under test answer a benchmark's questions, and each
answer gets its FEWL score from the run's reference models, without a gold answer.

- Items: the dataset's questions (``benchmarks.fewl.dataset``); each carries its labelled
  candidate answers and the FEWL setup, so a worker needs nothing but the item.
- R(y): a readable answer; D(y): that answer, one atom.
- V: one call per reference model with the question and its K nearest-neighbour questions (the
  laziness penalty needs h_i(x') there), and one IW/CO call to the generator; the call cache makes
  every repeat across rows, models and runs free. The FEWL score of the answer, and of every
  labelled candidate under each of the paper's methods (for its evaluation, ``fewl.report``), goes
  into the verdict's evidence as JSON; the atom counts as supported when its score is above 0.

The question index and the similarity model are built once per worker (``Knowledge.derived``):
embeddings are computed in the workers, persisted beside the run's passage indexes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from halluscope.contract.completion import Completion
from halluscope.contract.cost_rules import Shape, StageRule, once
from halluscope.contract.roles import RoleCall
from halluscope.contract.task import Item, LoadedItems, Task, Verdict
from halluscope.errors import DataError
from halluscope.fewl import prompts
from halluscope.fewl.artefacts import prepare_questions
from halluscope.fewl.cache import ArtefactCache, content_key
from halluscope.fewl.datasets import Candidate, Question, load
from halluscope.fewl.evaluate import candidate_scores, paper_methods
from halluscope.fewl.neighbours import QuestionIndex
from halluscope.fewl.options import FewlOptions
from halluscope.fewl.parsing import parse_answer
from halluscope.fewl.prompts import ParseReport
from halluscope.fewl.score import Fewl, MissingReference
from halluscope.fewl.similarity import CachedSimilarity, CrossEncoderSimilarity, EmbeddingCosine, Similarity
from halluscope.knowledge.retrieval import Encoder

if TYPE_CHECKING:
    from pydantic import BaseModel

    from halluscope.knowledge.base import Knowledge
    from halluscope.sources import DataResolver
    from halluscope.storage.fs import Location


def _questions(options: FewlOptions, resolver: DataResolver) -> tuple[list[Question], str, str]:
    """The questions FEWL scores (the first ``limit``), the file's name and its sha256."""
    loaded = load(options.dataset.name, str(resolver.resolve_any(options.dataset.source)))
    questions = loaded.questions[:options.limit] if options.limit else loaded.questions
    return questions, loaded.report.source, loaded.report.sha256


def question_of(item: Item) -> Question:
    """The dataset question an item was made from, candidates and labels included."""
    f = item.fields
    return Question(f["dataset"], item.item_id, f["question"],
                    tuple(Candidate(k, text, label) for k, label, text in f["candidates"]))


class Scorer:
    """What a worker needs to score: the benchmark's question index, the similarity backend and
    FEWL under each of the paper's methods. Built once per worker and setup."""

    def __init__(self, options: FewlOptions, kb: Knowledge) -> None:
        self.options = options
        questions, _, _ = _questions(options, kb.resolver)
        self.questions = {q.question_id: q.question for q in questions}
        cache = ArtefactCache(kb.index_root.child("fewl") if kb.index_root is not None else None)
        s = options.similarity
        self.embedder = EmbeddingCosine(Encoder(s.encoder) if s.encoder else None, cache)
        similarity: Similarity = self.embedder if s.kind == "embedding" else \
            CachedSimilarity(CrossEncoderSimilarity(s.cross_encoder or "", s.symmetric, s.label), cache)
        self.index = QuestionIndex.build(list(self.questions), list(self.questions.values()), self.embedder)
        self.fewl = Fewl(similarity, options.params)
        self.methods = {m: self.fewl.with_params(p)
                        for m, p in paper_methods(options.params, options.baseline_reference()).items()}

    def neighbours(self, question_id: str) -> list[str]:
        p = self.options.params
        return [n.question_id for n in self.index.neighbours(question_id, p.k_nn, p.neighbour_max_similarity)] \
            if p.k_nn else []


def _scorer(item: Item, kb: Knowledge) -> Scorer:
    setup = item.fields["setup"]
    return kb.derived(f"fewl:{content_key(setup)}", lambda k: Scorer(FewlOptions.model_validate(setup), k))


class FewlTask(Task["Knowledge"]):
    name = "fewl/score"
    kind = "response"
    abstention_rule = "fewl-readable-answer-v1"
    decomposer = "fewl-one-answer-v1"
    verifier = f"fewl:{prompts.REFERENCE}+{prompts.IW_CO}"
    roles = ("reference",)

    def cost_rules(self, options: BaseModel | None = None) -> tuple[StageRule, ...]:
        """Per question, one call to each reference model for its answer, and one to the generator
        for the IW/CO pairs (``iw_pairs`` corrected/wrong sentences): the neighbours' answers are
        other questions' own calls, which the call cache shares, so a full pass asks nothing more."""
        if not isinstance(options, FewlOptions):
            raise DataError(f"task {self.name} needs the run's benchmarks.fewl section")
        samples, pairs = options.params.reference_samples, options.params.iw_pairs

        def question(s: Shape) -> float:  # the item's prompt is the question in the reference template
            return max(0.0, s.P - s.tokens(prompts.reference_prompt("")))

        refs = (StageRule("verify", "reference", once,
                          lambda s: s.tokens(prompts.reference_requests("", samples)[0]) + question(s),
                          lambda s: s.o.answer_tokens * samples, prompts.REFERENCE if samples == 1 else
                          prompts.REFERENCE_MULTI, model=r) for r in options.references)
        iw_co = StageRule("verify", options.generator_role, once,
                          lambda s: s.tokens(prompts.iw_co_prompt("", pairs)) + question(s),
                          lambda s: 2 * pairs * s.fact_tokens, prompts.IW_CO, model=options.generator)
        return (*refs, iw_co)

    def load_items(self, resolver: DataResolver, testsets: Sequence[Location] = (),
                   options: BaseModel | None = None) -> LoadedItems:
        if not isinstance(options, FewlOptions):
            raise DataError(f"task {self.name} needs the run's benchmarks.fewl section")
        questions, source, sha256 = _questions(options, resolver)
        setup = options.model_dump(mode="json")
        items = [Item(self.name, q.question_id, prompts.reference_prompt(q.question),
                      {"dataset": q.dataset, "question": q.question, "setup": setup,
                       "candidates": [[c.key, c.label, c.text] for c in q.candidates]}, q.source_row)
                 for q in questions]
        return LoadedItems(items, {source: sha256})

    def responded(self, text: str, item: Item, replies: Sequence[Completion] = ()) -> bool:
        return parse_answer(text) is not None

    def decompose(self, text: str, item: Item, replies: Sequence[Completion] = ()) -> list[str]:
        return [parse_answer(text) or ""]

    def verify_call(self, atoms: list[str], text: str, item: Item, kb: Knowledge) -> tuple[RoleCall, ...]:
        scorer = _scorer(item, kb)
        o = scorer.options
        samples = o.params.reference_samples
        template = prompts.REFERENCE if samples == 1 else prompts.REFERENCE_MULTI
        asked = [item.fields["question"], *(scorer.questions[n] for n in scorer.neighbours(item.item_id))]
        refs = tuple(RoleCall("reference", tuple(prompts.reference_requests(q, samples)[0] for q in asked),
                              template, model=r) for r in o.references)
        iw_co = RoleCall(o.generator_role, tuple(prompts.iw_co_requests(item.fields["question"], o.params.iw_pairs)),
                         prompts.IW_CO, model=o.generator)
        return (*refs, iw_co)

    def verify(self, atoms: list[str], text: str, item: Item, kb: Knowledge,
               replies: Sequence[Completion] = ()) -> list[Verdict]:
        scorer = _scorer(item, kb)
        o = scorer.options
        neighbours = scorer.neighbours(item.item_id)
        asked = [item.item_id, *neighbours]
        report = ParseReport()
        answers: dict[str, dict[str, str]] = {qid: {} for qid in asked}
        for i, ref in enumerate(o.references):
            for qid, reply in zip(asked, replies[i * len(asked):(i + 1) * len(asked)]):
                # only the question's own unusable replies are this row's problems to report
                got = prompts.parse_references(qid, ref, [reply], report if qid == item.item_id else ParseReport(),
                                               o.params.reference_samples)
                answers[qid].update(got)
        pairs = prompts.parse_iw_co(item.item_id, o.generator, [replies[-1]], report, o.params.min_pairs)
        question = question_of(item)
        prepared = prepare_questions(scorer.fewl, [question], o.reference_ids(), answers,
                                     {item.item_id: pairs}, scorer.index)
        art = prepared.artefacts.get(item.item_id)
        evidence: dict[str, Any] = {"problems": report.to_dict()["issues"],
                                    "missing_references": prepared.missing_references.get(item.item_id, [])}
        if art is None:
            evidence["problem"] = prepared.excluded[item.item_id]
            return [Verdict(None, json.dumps(evidence, ensure_ascii=False))]
        score = scorer.fewl.score(atoms[0], art)
        evidence.update(score.to_dict(), methods=_answer_by_method(scorer.methods, atoms[0], art),
                        candidates=candidate_scores(question, art, scorer.methods))
        return [Verdict(score.score > 0, json.dumps(evidence, ensure_ascii=False))]


def _answer_by_method(methods: Mapping[str, Fewl], answer: str, art: Any) -> dict[str, float | str]:
    """The answer's score under each method, or why a method could not score it."""
    out: dict[str, float | str] = {}
    for m, scorer in methods.items():
        try:
            out[m] = scorer.score(answer, art).score
        except MissingReference as err:
            out[m] = f"no answer from reference {err.ref_id}"
    return out
