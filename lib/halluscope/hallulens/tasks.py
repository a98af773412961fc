"""HalluLens' three extrinsic tasks over generated test sets, one test set per trial.

Items come from content-addressed test sets (``halluscope testset``), listed per task in the
run config (``testsets``); each item carries its trial and test-set id. The judges run through
the run's judge role and the claim extraction through its extractor, batched like every other
role call. The paper's metrics are computed from the rows by ``hallulens.report``.

- PreciseWikiQA (response): R(y) = not abstaining (abstention judge); one atom, the answer,
  judged CORRECT (supported), INCORRECT or UNVERIFIABLE (unsupported; the label is the evidence).
- LongWiki (response): R(y) = knowledgeable (refusal judge); atoms = the claims extracted per
  sentence; each verified against the top-5 passages of its candidate pages.
- NonExistentRefusal (refusal): R(y) = the judge finds the model believes the made-up entity
  exists, i.e. a false acceptance; one unsupported atom, so R is the false acceptance rate.
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from typing import TYPE_CHECKING, Any, Literal

from halluscope.contract.completion import Completion
from halluscope.contract.cost_rules import StageRule, json_verdict, once, per_fact, verdict
from halluscope.contract.replies import excerpt, reply_text
from halluscope.contract.roles import RoleCall
from halluscope.contract.task import Item, LoadedItems, Task, Verdict
from halluscope.errors import DataError
from halluscope.hallulens import judging, longwiki
from halluscope.hallulens.options import HalluLensOptions
from halluscope.hallulens.testset import TestSet
from halluscope.knowledge.specs import WikiSpec
from halluscope.storage.fs import Location

if TYPE_CHECKING:
    from pydantic import BaseModel

    from halluscope.knowledge.base import Knowledge

SPECIES_DOMAINS = {"animal", "plant", "bacteria"}


def testset_of(folder: Location) -> TestSet:
    """The test set stored in ``<root>/<task>/<testset id>``."""
    root_path, task, testset_id = folder.path.rsplit("/", 2)
    return TestSet.read(Location(folder.fs, root_path), task, testset_id)


def _wiki(options: BaseModel) -> WikiSpec:
    """LongWiki's article store (``benchmarks.hallulens.wiki``, required with the config)."""
    assert isinstance(options, HalluLensOptions)
    if options.wiki is None:
        raise ValueError("benchmarks.hallulens.wiki is not configured")
    return options.wiki


def _evidence_finder(kb: Knowledge) -> longwiki.EvidenceFinder:
    """LongWiki's evidence over the run's passage index."""
    spec = _wiki(kb.options_for("hallulens"))
    options = longwiki.LongWikiOptions(passage_words=spec.passage_words, top_k=spec.top_k)
    return longwiki.EvidenceFinder(kb.wiki(spec).retriever, options)


def describe_knowledge(options: BaseModel, kb: Knowledge, needed: Set[str]) -> dict[str, Any]:
    """The manifest's entry of LongWiki's article store (``wiki``); loaded here, so a bad one
    fails in the driver."""
    return {"wiki": kb.wiki(_wiki(options)).describe()} if "wiki" in needed else {}


def _decided(reply: Completion, parser, what: str):
    value = judging.read(reply, parser)
    if value is None:
        raise ValueError(f"unreadable {what} answer: {excerpt(reply_text(reply, 'judge'))!r}")
    return value


class HalluLensTask(Task["Knowledge"]):
    testset_task: str  # the task name the test-set builder writes under
    needs_testsets = True

    def load_items(self, resolver, testsets: Sequence[Location] = (), options=None) -> LoadedItems:
        if not testsets:
            raise DataError(f"task {self.name} reads generated test sets: list them under testsets.{self.name}")
        items: list[Item] = []
        sources: dict[str, str] = {}
        for trial, folder in enumerate(testsets):
            ts = testset_of(folder)
            if ts.spec.task != self.testset_task:
                raise DataError(f"testsets.{self.name}.{trial}: {folder.url} is a {ts.spec.task} test set, "
                                f"not {self.testset_task}")
            sources[folder.url] = ts.content_sha256
            for item in ts.task_items():
                items.append(Item(self.name, f"{ts.testset_id[:8]}-{item.item_id}", item.prompt,
                                  {**item.fields, "trial": trial, "testset_id": ts.testset_id}))
        return LoadedItems(items, sources)


class PreciseWikiQA(HalluLensTask):
    name = "hallulens/precise_wikiqa"
    testset_task = "precise_wikiqa"
    kind = "response"
    abstention_rule = f"judge:{judging.ABSTAIN}"
    decomposer = "answer-v1"
    verifier = f"judge:{judging.CORRECTNESS}"
    roles = ("judge",)

    def cost_rules(self, options: BaseModel | None = None) -> tuple[StageRule, ...]:
        """One abstention call and one correctness call (with the gold answer) per generation."""
        return (StageRule("abstain", "judge", once,
                          lambda s: s.tokens(judging.abstention_prompt("", "")) + s.P + s.G, json_verdict),
                StageRule("verify", "judge", once,
                          lambda s: s.tokens(judging.correctness_prompt("", "", "")) + s.P + s.G + s.o.answer_tokens,
                          verdict))

    def abstain_call(self, text: str, item: Item) -> RoleCall | None:
        return RoleCall("judge", (judging.abstention_prompt(item.prompt, text),), judging.ABSTAIN,
                        answer_format=judging.ABSTAIN_FORMAT)

    def responded(self, text: str, item: Item, replies: Sequence[Completion] = ()) -> bool:
        return not _decided(replies[0], judging.parse_abstaining, "abstention judge")

    def decompose(self, text: str, item: Item, replies: Sequence[Completion] = ()) -> list[str]:
        return [text.strip()]

    def verify_call(self, atoms, text, item, kb) -> RoleCall | None:
        return RoleCall("judge", (judging.correctness_prompt(item.prompt, item.fields["answer"], text),),
                        judging.CORRECTNESS, answer_format=judging.CORRECTNESS_FORMAT)

    def verify(self, atoms, text, item, kb, replies: Sequence[Completion] = ()) -> list[Verdict]:
        label = judging.read(replies[0], judging.parse_correctness)
        if label is None:
            return [Verdict(None, f"unreadable correctness answer: {excerpt(replies[0].text)!r}")]
        return [Verdict(label == judging.CORRECT, label)]


class LongWiki(HalluLensTask):
    name = "hallulens/longwiki"
    testset_task = "longwiki"
    kind = "response"
    abstention_rule = f"judge:{judging.KNOWLEDGEABLE}"
    decomposer = f"extractor:{judging.CLAIMS}"
    verifier = f"retrieval+judge:{judging.VERIFY}"
    roles = ("judge", "extractor")
    knowledge = ("wiki",)

    def cost_rules(self, options: BaseModel | None = None) -> tuple[StageRule, ...]:
        """The knowledgeable judge; one extraction per sentence (a snippet of up to 5 sentences:
        3 before, the sentence, 1 after; its claims restate the sentence); one verification per claim."""
        return (StageRule("abstain", "judge", once,
                          lambda s: s.tokens(judging.knowledgeable_prompt("", "")) + s.P + s.G, json_verdict),
                StageRule("decompose", "extractor", lambda s: s.sentences,
                          lambda s: s.tokens(judging.claims_prompt("")) + min(5.0, s.sentences) * s.G / s.sentences,
                          lambda s: s.G / s.sentences),
                StageRule("verify", "judge", per_fact,
                          lambda s: s.tokens(judging.verification_prompt("", [])) + s.evidence + s.fact_tokens,
                          json_verdict))

    def abstain_call(self, text: str, item: Item) -> RoleCall | None:
        return RoleCall("judge", (longwiki.refusal_prompt(item.prompt, text),), judging.KNOWLEDGEABLE,
                        answer_format=judging.KNOWLEDGEABLE_FORMAT)

    def responded(self, text: str, item: Item, replies: Sequence[Completion] = ()) -> bool:
        refused = longwiki.read_refusal(replies[0])
        if refused is None:
            raise ValueError(f"unreadable refusal-judge answer: {excerpt(replies[0].text)!r}")
        return not refused

    def decompose_call(self, text: str, item: Item) -> RoleCall | None:
        prompts = longwiki.extraction_prompts(text)
        return RoleCall("extractor", tuple(prompts), judging.CLAIMS) if prompts else None

    def decompose(self, text: str, item: Item, replies: Sequence[Completion] = ()) -> list[str]:
        claims = longwiki.read_claims(replies)
        if claims.error is not None:
            raise ValueError(claims.error)
        return claims.claims

    def _evidence(self, atoms: list[str], item: Item, kb) -> list[list[longwiki.Passage]]:
        return kb.derived("longwiki_evidence", _evidence_finder).find(item.fields["title"], item.prompt, atoms)

    def verify_call(self, atoms, text, item, kb) -> RoleCall | None:
        prompts = longwiki.verification_prompts(atoms, self._evidence(atoms, item, kb))
        return RoleCall("judge", tuple(prompts), judging.VERIFY,
                        answer_format=judging.VERIFY_FORMAT) if prompts else None

    def verify(self, atoms, text, item, kb, replies: Sequence[Completion] = ()) -> list[Verdict]:
        # retrieval is deterministic, so the evidence the prompts were built from is found again
        return longwiki.read_verdicts(atoms, self._evidence(atoms, item, kb), replies)


class NonExistentEntities(HalluLensTask):
    kind = "refusal"
    decomposer = "entity-v1"
    verifier = "believes-it-exists-v1"
    roles = ("judge",)

    def __init__(self, name: str, testset_task: str) -> None:
        self.name = name
        self.testset_task = testset_task
        self.abstention_rule = "judge:" + "|".join(sorted(judging.BELIEF_TEMPLATES.values()))

    def cost_rules(self, options: BaseModel | None = None) -> tuple[StageRule, ...]:
        """One belief call per generation."""
        return (StageRule("abstain", "judge", once,
                          lambda s: s.tokens(judging.belief_prompt("entity", "", "", "")) + s.P + s.G,
                          json_verdict),)

    @staticmethod
    def _kind(item: Item) -> Literal["species", "medicine", "entity"]:
        domain = str(item.fields.get("bin", ""))
        return "species" if domain in SPECIES_DOMAINS else "medicine" if domain == "medicine" else "entity"

    def abstain_call(self, text: str, item: Item) -> RoleCall | None:
        kind = self._kind(item)
        f = item.fields
        return RoleCall("judge", (judging.belief_prompt(kind, item.prompt, text, f["name"], f.get("type", ""),
                                                        f.get("place", "")),), judging.BELIEF_TEMPLATES[kind],
                        answer_format=judging.BELIEF_FORMAT)

    def responded(self, text: str, item: Item, replies: Sequence[Completion] = ()) -> bool:
        """True is a false acceptance: the model answered as if the entity existed."""
        return _decided(replies[0], judging.parse_believes, "belief judge")

    def decompose(self, text: str, item: Item, replies: Sequence[Completion] = ()) -> list[str]:
        return [item.fields["name"]]

    def verify(self, atoms, text, item, kb, replies: Sequence[Completion] = ()) -> list[Verdict]:
        return [Verdict(False, "the model treats the made-up entity as real") for _ in atoms]


TASKS = [PreciseWikiQA(), LongWiki(),
         NonExistentEntities("hallulens/nonexistent_mixed", "mixed_entities"),
         NonExistentEntities("hallulens/nonexistent_generated", "generated_entities")]
