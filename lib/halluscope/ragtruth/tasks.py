"""RAGTruth as two tasks of the engine, so detector runs get its batching, resume, cache and costs.

- ``ragtruth/detect``: the model under test is the detector being evaluated. An item is one
  corpus response; its prompt is the detector prompt (``prompts.judge_prompt``), so the model's
  reply is the detector's answer. D(y) = the predicted spans; V marks each one against the gold
  spans the item carries (supported: it overlaps a gold span). The benchmark's metrics parse the
  committed replies again with ``PromptDetector`` and score them with ``metrics.count``, exactly as
  a detector run did before: response- and span-level P/R/F1, the corpus tables and §6.3 selection.
- ``ragtruth/generate``: RAG generation. An item is one corpus source; the model under test answers
  its own prompt, the run's judge finds hallucinated spans in that answer (decompose), and every
  span is an unsupported atom. Metrics: hallucination rate and density per model and task type.

Every corpus check (bad lines, label problems, selection candidates) runs in ``load_items``, in the
driver, before any model starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from halluscope.contract.completion import Completion
from halluscope.contract.cost_rules import StageRule, once
from halluscope.contract.roles import RoleCall
from halluscope.contract.task import Item, LoadedItems, Task, Verdict
from halluscope.errors import ConfigError, DataError
from halluscope.ragtruth.corpus import Corpus, CorpusOptions, Record, Source, load_corpus
from halluscope.ragtruth.metrics import MetricOptions
from halluscope.ragtruth.parse import read_hallucination_list
from halluscope.ragtruth.prompts import ANSWER_FORMAT, TEMPLATE_ID, instructions, judge_prompt
from halluscope.ragtruth.spans import Prediction, locate, merge, overlap
from halluscope.ragtruth.taxonomy import Quality, TaskType
from halluscope.storage.fs import storage_options
from halluscope.storage.spec import StorageSpec

if TYPE_CHECKING:
    from halluscope.knowledge.base import Knowledge
    from halluscope.sources import DataResolver
    from halluscope.storage.fs import Location

DETECT = "ragtruth/detect"
GENERATE = "ragtruth/generate"
# the paper's two selection pairs (Table 7), by their names in response.jsonl
PAPER_PAIRS = (("llama-2-7b-chat", "mistral-7B-instruct"), ("gpt-3.5-turbo-0613", "gpt-4-0613"))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CorpusFiles(CorpusOptions):
    """The two released files (local paths or fsspec URLs) and how to read them."""

    responses: str = Field(description="response.jsonl (or .jsonl.gz)")
    sources: str = Field(description="source_info.jsonl (or .jsonl.gz)")
    storage: StorageSpec | None = Field(
        default=None, description="how to reach s3:// files (endpoint, credential variables; usually the run's "
                                  "storage section); None: fsspec's defaults")

    # fsspec options with the credentials, resolved where the config is validated (the driver) and
    # pickled with the options to the workers, whose environment may not hold the variables
    _fs: dict = PrivateAttr(default_factory=dict)

    def _s3_storage(self) -> StorageSpec | None:
        """The storage section when one is given and a file is on S3, else None."""
        if self.responses.startswith("s3://") or self.sources.startswith("s3://"):
            return self.storage
        return None

    @model_validator(mode="after")
    def _credentials(self) -> CorpusFiles:
        storage = self._s3_storage()
        if storage is not None:
            try:
                self._fs = storage_options(storage)
            except ConfigError:
                pass  # a config checked where the variables are unset; fs_options() names the missing one
        return self

    def fs_options(self) -> dict:
        storage = self._s3_storage()
        if self._fs or storage is None:
            return self._fs
        return storage_options(storage)

    def options(self) -> CorpusOptions:
        return CorpusOptions(**self.model_dump(include=set(CorpusOptions.model_fields)))


class SelectionOptions(_Strict):
    candidates: list[list[str]] | None = Field(
        default=None, description="model sets to choose among; None: the paper's pairs present in the corpus, "
                                  "else all of its models")
    seed: int | None = Field(default=None, description="None: exact expectations over random choices")

    @field_validator("candidates")
    @classmethod
    def _sets(cls, v: list[list[str]] | None) -> list[list[str]] | None:
        for models in v or []:
            if len(set(models)) < 2 or len(set(models)) != len(models):
                raise ValueError(f"a candidate set needs two or more distinct models, got {models}")
        return v


class RagTruthOptions(_Strict):
    """The run config's ``benchmarks.ragtruth`` section."""

    corpus: CorpusFiles | None = Field(default=None, description="the corpus both tasks read")
    metrics: MetricOptions = Field(default_factory=MetricOptions)
    selection: SelectionOptions = Field(default_factory=SelectionOptions)


def ragtruth_options(options: BaseModel | None) -> RagTruthOptions:
    if not isinstance(options, RagTruthOptions):
        raise ConfigError("the RAGTruth tasks need the run's benchmarks.ragtruth options")
    return options


_LOADED: dict[str, Corpus] = {}


def corpus_of(options: BaseModel | None) -> Corpus:
    """The corpus the options name, read once per process: the driver plans and aggregates from
    the same copy."""
    files = ragtruth_options(options).corpus
    if files is None:
        raise ConfigError("benchmarks.ragtruth.corpus: not set; the RAGTruth tasks read the corpus files it names "
                          "(responses: response.jsonl, sources: source_info.jsonl)")
    key = files.model_dump_json()
    if key not in _LOADED:
        corpus = load_corpus(files.responses, files.sources, files.options(), files.fs_options())
        if not corpus.records:
            raise DataError(f"no RAGTruth response is left to evaluate:\n{corpus.report()}")
        _LOADED.clear()  # one corpus per run: keep only the latest
        _LOADED[key] = corpus
    return _LOADED[key]


def candidate_sets(options: RagTruthOptions, corpus: Corpus) -> list[list[str]]:
    present = sorted({r.model for r in corpus.records})
    if options.selection.candidates is not None:
        for models in options.selection.candidates:
            missing = sorted(set(models) - set(present))
            if missing:
                raise ConfigError(f"benchmarks.ragtruth.selection.candidates: model(s) {missing} have no response "
                                  f"in the corpus (models: {present})")
        return [list(m) for m in options.selection.candidates]
    pairs = [list(p) for p in PAPER_PAIRS if set(p) <= set(present)]
    return pairs or ([present] if len(present) >= 2 else [])


def _digests(corpus: Corpus) -> dict[str, str]:
    return {f"ragtruth/{name}": d.sha256 for name, d in corpus.manifest.files.items()}


def _parse(reply: str, response: str) -> Prediction:
    """A detector reply read as ``PromptDetector.parse`` reads it (an unreadable one: an empty list
    flagged unreadable); the metrics parse the committed replies with ``PromptDetector`` itself."""
    answer = read_hallucination_list(reply)
    if not answer.readable:
        return Prediction(unreadable=True)
    spans, missing = locate(answer.items, response)
    return Prediction(tuple(spans), tuple(missing))


def _answer_record(text: str, item: Item) -> Record:
    """A generated answer to a source, shaped as a corpus record (no gold) for the detector prompt."""
    f = item.fields
    source = Source(f["source_id"], TaskType(f["task_type"]), f["source"], f["source_info"], f["source_prompt"],
                    item.source_row)
    return Record(id=item.item_id, source_id=f["source_id"], model="", temperature=None, split="generated",
                  quality=Quality.GOOD, response=text, labels=(), gold=(), source=source, line=item.source_row)


class Detect(Task["Knowledge"]):
    """Detector evaluation: the model under test answers the detector prompt of each response."""

    name = DETECT
    kind = "response"
    abstention_rule = "ragtruth-readable-list-v1"
    decomposer = "ragtruth-detected-spans-v1"
    verifier = "ragtruth-gold-overlap-v1"

    def load_items(self, resolver: DataResolver, testsets: Sequence[Location] = (),
                   options: BaseModel | None = None) -> LoadedItems:
        corpus = corpus_of(options)
        candidate_sets(ragtruth_options(options), corpus)  # a bad candidate set fails before any model starts
        records = sorted(corpus.records, key=lambda r: (r.task_type.value, r.source_id, r.id))
        items = [Item(DETECT, r.id, judge_prompt(r), {
            "response": r.response, "task_type": r.task_type.value, "source_id": r.source_id, "generator": r.model,
            "gold": [[lb.start, lb.end, lb.label_type.value] for lb in r.gold]}, r.line) for r in records]
        return LoadedItems(items, _digests(corpus))

    def responded(self, text: str, item: Item, replies: Sequence[Completion] = ()) -> bool:
        """An answer without a readable list says nothing about the response."""
        return read_hallucination_list(text).readable

    def decompose(self, text: str, item: Item, replies: Sequence[Completion] = ()) -> list[str]:
        """The located spans' text, then the listed strings found nowhere in the response."""
        response = item.fields["response"]
        pred = _parse(text, response)
        return [response[s.start:s.end] for s in pred.spans] + list(pred.unlocated)

    def verify(self, atoms: list[str], text: str, item: Item, kb: Knowledge,
               replies: Sequence[Completion] = ()) -> list[Verdict]:
        pred = _parse(text, item.fields["response"])
        gold = merge((start, end) for start, end, _ in item.fields["gold"])
        out = []
        for s in pred.spans:
            hit = overlap([(s.start, s.end)], gold)
            out.append(Verdict(hit > 0, f"characters {s.start}-{s.end}: {hit} in gold spans"))
        out += [Verdict(False, "not found in the response")] * len(pred.unlocated)
        return out


class Generation(Task["Knowledge"]):
    """RAG generation: the model under test answers each source; the judge lists hallucinated spans."""

    name = GENERATE
    kind = "response"
    abstention_rule = "none"
    decomposer = f"judge:{TEMPLATE_ID}"
    verifier = "ragtruth-detected-is-unsupported-v1"
    roles = ("judge",)

    def load_items(self, resolver: DataResolver, testsets: Sequence[Location] = (),
                   options: BaseModel | None = None) -> LoadedItems:
        corpus = corpus_of(options)
        unreadable = ragtruth_options(options).metrics.unreadable
        ids = sorted({r.source_id for r in corpus.records}, key=lambda s: (corpus.sources[s].task_type.value, s))
        items = []
        for sid in ids:
            src = corpus.sources[sid]
            items.append(Item(GENERATE, sid, src.prompt, {
                "source_id": sid, "task_type": src.task_type.value, "source": src.source,
                "source_info": src.source_info, "source_prompt": src.prompt, "unreadable": unreadable}, src.line))
        return LoadedItems(items, _digests(corpus))

    def responded(self, text: str, item: Item, replies: Sequence[Completion] = ()) -> bool:
        return True

    def decompose_call(self, text: str, item: Item) -> RoleCall:
        return RoleCall("judge", (judge_prompt(_answer_record(text, item)),), TEMPLATE_ID,
                        answer_format=ANSWER_FORMAT)

    def decompose(self, text: str, item: Item, replies: Sequence[Completion] = ()) -> list[str]:
        """One atom per detected span (overlapping ones once), so the atoms count ``n_spans``."""
        (reply,) = replies
        if reply.error is not None or reply.text is None:
            raise ValueError(f"the judge gave no answer: {reply.error or 'no text'}")
        pred = _parse(reply.text, text)
        if pred.unreadable and item.fields["unreadable"] == "exclude":
            raise ValueError("the judge's answer holds no readable list")
        return [text[a:b] for a, b in merge((s.start, s.end) for s in pred.spans)] + list(pred.unlocated)

    def verify(self, atoms: list[str], text: str, item: Item, kb: Knowledge,
               replies: Sequence[Completion] = ()) -> list[Verdict]:
        return [Verdict(False, "listed by the judge")] * len(atoms)

    def cost_rules(self, options: BaseModel | None = None) -> tuple[StageRule, ...]:
        """One detector call per answer: the source (about the item prompt), the answer, the
        instructions; the reply quotes at most the whole answer."""
        overhead = max(len(instructions(t).split()) for t in TaskType)
        return (StageRule("decompose", "judge", once,
                          lambda s: overhead * s.o.tokens_per_word + s.P + s.G,
                          lambda s: s.o.json_verdict_tokens + s.G),)
