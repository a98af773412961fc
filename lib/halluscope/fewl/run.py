"""A FEWL run: reference answers and IW/CO pairs for a benchmark, FEWL scores of its labelled
candidate answers with their components, and the paper's evaluation against the baselines.

A run folder ``<storage.root>/<run_id>/`` holds::

    manifest.json      config, fingerprint, the dataset file's sha256 and broken rows, status
    fewl_answers/      every model reply: raw text, error, cached, what was parsed from it
    fewl_scores/       per question, candidate and method: label, score, truthfulness, penalty, and
                       every reference's term (weight, similarity, neighbour similarity) as JSON
    metrics.json       the paper's evaluation (pairwise shares, ranked first) for FEWL and the
                       baselines, mean scores per label, preparation and parse reports, costs
    parse_report.json  each reply that could not be used, with the question and model;  report.md

The dataset is loaded and the similarity model found in the driver before any model starts.
LLM calls are made from the driver (see ``fewl.calls`` for why) through the call cache under
``<storage.root>/_cache/calls``; embeddings (and cross-encoder matrices) are cached by content hash
under ``<storage.root>/_cache/fewl``, so a rerun repeats no call and no encoding. Questions that
cannot be scored keep their rows, with the reason and no score.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Literal, Sequence

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, model_validator

from halluscope.config import CacheSpec, ModelSpec, RaySpec, StorageSpec
from halluscope.errors import RunError
from halluscope.fewl import prompts
from halluscope.fewl.artefacts import PreparedQuestions, prepare_questions
from halluscope.fewl.cache import ArtefactCache
from halluscope.fewl.calls import Answers, collect
from halluscope.fewl.datasets import LOADERS, Question, load
from halluscope.fewl.evaluate import evaluate, paper_methods
from halluscope.fewl.neighbours import QuestionIndex
from halluscope.fewl.report import markdown
from halluscope.fewl.score import Fewl, FewlParams, MissingReference
from halluscope.fewl.similarity import CachedSimilarity, CrossEncoderSimilarity, EmbeddingCosine, Similarity
from halluscope.knowledge.retrieval import Encoder
from halluscope.models.registry import client
from halluscope.models.usage import Usage
from halluscope.runkit import (SERVED_BACKENDS, code_version, conflicting_ids, fingerprint, init_ray,
                              load_yaml_config, served, unique_specs)
from halluscope.storage.fs import Location, storage_options
from halluscope.storage.run import RunStore

EMBED_CHUNK = 2048  # texts per stored embedding artefact

SCORES = pa.schema([
    ("run_id", pa.string()),
    ("dataset", pa.string()),
    ("question_id", pa.string()),
    ("method", pa.string()),  # fewl, or a baseline of the paper (evaluate.paper_methods)
    ("setup", pa.string()),  # id of (params, similarity, templates)
    ("candidate", pa.string()),
    ("label", pa.string()),
    ("text", pa.string()),
    ("score", pa.float64()),  # null when the question could not be scored (see problem)
    ("truthfulness", pa.float64()),
    ("penalty", pa.float64()),
    ("weighting", pa.string()),
    ("components", pa.string()),  # JSON of FewlScore: every reference's term
    ("problem", pa.string()),
])


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DatasetSpec(_Strict):
    name: Literal[tuple(LOADERS)]  # type: ignore[valid-type]
    source: str = Field(description="path or URL of the released file (s3:// read with the storage's credentials)")


class SimilaritySpec(_Strict):
    """FEWL's answer similarity; the question neighbour search always embeds with ``encoder``."""

    kind: Literal["embedding", "cross_encoder"] = "embedding"
    encoder: str | None = Field(default=None, description="sentence-transformers dir; None: packaged MiniLM")
    cross_encoder: str | None = Field(default=None, description="CrossEncoder dir (e.g. Vectara's HHEM)")
    symmetric: bool = True
    label: int | None = None

    @model_validator(mode="after")
    def _path_for_kind(self) -> "SimilaritySpec":
        if (self.kind == "cross_encoder") != (self.cross_encoder is not None):
            raise ValueError("cross_encoder: a path is needed for kind cross_encoder, and only then")
        return self


class FewlRunConfig(_Strict):
    benchmark: Literal["fewl"] = "fewl"
    run_id: str | None = None
    storage: StorageSpec = Field(default_factory=StorageSpec)
    dataset: DatasetSpec
    references: list[ModelSpec] = Field(min_length=1, description="the reference LLMs h_i")
    generator: ModelSpec = Field(description="writes the IW/CO pairs (may also be a reference)")
    similarity: SimilaritySpec = Field(default_factory=SimilaritySpec)
    params: FewlParams = Field(default_factory=FewlParams)
    single_reference: str | None = Field(default=None, description="reference id of the single-reference "
                                                                   "baselines; None: the first reference")
    limit: int | None = Field(default=None, gt=0, description="the first N questions only")
    cache: CacheSpec = Field(default_factory=CacheSpec)
    call_chunk: int = Field(default=256, gt=0, description="prompts per generate_batch (and per cache part)")
    ray: RaySpec = Field(default_factory=RaySpec)
    serve_http_port: int | None = None

    @model_validator(mode="after")
    def _models(self) -> "FewlRunConfig":
        named = [("generator", self.generator), *((f"references.{i}", r) for i, r in enumerate(self.references))]
        for where, spec in named:
            if spec.backend == "replay":
                raise ValueError(f"{where} ({spec.id}): must be a live model, not replay")
        ids = [r.id for r in self.references]
        if len(set(ids)) != len(ids):
            raise ValueError(f"references: duplicate model ids {ids}")
        clashes = conflicting_ids([*self.references, self.generator])
        if clashes:
            raise ValueError(f"generator: id(s) {clashes} name a reference with different settings; "
                             "give the generator its own id")
        for where, ref in (("single_reference", self.single_reference),
                           ("params.single_reference", self.params.single_reference)):
            if ref is not None and ref not in self.reference_ids():
                raise ValueError(f"{where} {ref!r} is not a reference id ({self.reference_ids()})")
        return self

    def reference_ids(self) -> list[str]:
        return [rid for r in self.references for rid in prompts.reference_ids(r.id, self.params.reference_samples)]

    def baseline_reference(self) -> str:
        return self.single_reference or self.reference_ids()[0]


def load_fewl_config(uri: str) -> FewlRunConfig:
    return load_yaml_config(FewlRunConfig, uri)


@dataclass
class FewlResult:
    run_id: str
    uri: str
    metrics: dict
    report: str
    seconds: float


def _similarity(cfg: FewlRunConfig, cache: ArtefactCache) -> tuple[EmbeddingCosine, Similarity]:
    """The question embedder (neighbours) and the answer similarity; paths are checked here."""
    embedder = EmbeddingCosine(Encoder(cfg.similarity.encoder) if cfg.similarity.encoder else None, cache)
    if cfg.similarity.kind == "embedding":
        return embedder, embedder
    s = cfg.similarity
    return embedder, CachedSimilarity(CrossEncoderSimilarity(s.cross_encoder, s.symmetric, s.label), cache)


def _prewarm(embedder: EmbeddingCosine, questions: Sequence[Question], answers: Answers) -> None:
    """Embed every text once, in large chunks: one stored artefact per chunk instead of one per
    small ``matrix`` call (thousands of tiny objects on S3)."""
    texts: list[str] = []
    for q in questions:
        texts.append(q.question)
        texts.extend(c.text for c in q.candidates)
        texts.extend(answers.references.get(q.question_id, {}).values())
        pairs = answers.iw_co.get(q.question_id)
        if pairs is not None:
            texts.extend(pairs.wrong + pairs.corrected)
    unique = list(dict.fromkeys(texts))
    for i in range(0, len(unique), EMBED_CHUNK):
        embedder.embed(unique[i:i + EMBED_CHUNK])


def _score_rows(run_id: str, fewl: Fewl, questions: Sequence[Question], prepared: PreparedQuestions,
                methods: dict[str, FewlParams]) -> list[dict]:
    rows = []
    scorers = {name: fewl.with_params(p) for name, p in methods.items()}
    for q in questions:
        art = prepared.artefacts.get(q.question_id)
        for name, scorer in scorers.items():
            for c in q.candidates:
                row = {"run_id": run_id, "dataset": q.dataset, "question_id": q.question_id, "method": name,
                       "setup": scorer.setup_id, "candidate": c.key, "label": c.label, "text": c.text,
                       "score": None, "truthfulness": None, "penalty": None, "weighting": None,
                       "components": None, "problem": None}
                if art is None:
                    row["problem"] = prepared.excluded.get(q.question_id, "not prepared")
                else:
                    try:
                        s = scorer.score(c.text, art)
                    except MissingReference as err:
                        row["problem"] = f"no answer from reference {err.ref_id}"
                    else:
                        row.update(score=s.score, truthfulness=s.truthfulness, penalty=s.penalty,
                                   weighting=s.weighting, components=json.dumps(s.to_dict()))
                rows.append(row)
    return rows


def mean_scores(rows: list[dict]) -> list[dict]:
    """Mean score per method and candidate label (math.fsum); unscored rows are counted apart."""
    acc: dict[tuple[str, str | None], list] = defaultdict(lambda: [[], 0])
    for r in rows:
        slot = acc[(r["method"], r["label"])]
        if r["score"] is None:
            slot[1] += 1
        else:
            slot[0].append(r["score"])
    return [{"method": m, "label": label, "n": len(v), "unscored": missing,
             "mean": math.fsum(v) / len(v) if v else None}
            for (m, label), (v, missing) in sorted(acc.items(), key=lambda kv: (kv[0][0], str(kv[0][1])))]


def run_fewl(cfg: FewlRunConfig, run_id: str | None = None) -> FewlResult:
    started = time.time()
    src = cfg.dataset.source
    loaded = load(cfg.dataset.name, src, storage_options(cfg.storage) if src.startswith("s3://") else None)
    questions = loaded.questions[:cfg.limit] if cfg.limit else loaded.questions
    keep = cfg.model_dump(mode="json", include={"dataset", "references", "generator", "similarity", "params",
                                                "single_reference", "limit"})
    keep["dataset"].pop("source")  # where the file lives does not change results; its content does
    fp = fingerprint({**keep, "dataset_sha256": loaded.report.sha256})
    run_id = run_id or cfg.run_id or f"{dt.datetime.now(dt.timezone.utc):%Y%m%d-%H%M%S}-fewl-{fp[:8]}"
    store = RunStore(Location.from_url(cfg.storage.root, cfg.storage), run_id)
    previous = store.read_json("manifest.json")
    if previous and previous.get("config_fingerprint") != fp:
        raise RunError(f"run {store.loc.url} was made with a different configuration or dataset "
                       f"(fingerprint {previous.get('config_fingerprint')} != {fp}); use a new run id")
    root = cfg.storage.root.rstrip("/")
    artefacts = ArtefactCache(Location.from_url(f"{root}/_cache/fewl", cfg.storage))
    embedder, similarity = _similarity(cfg, artefacts)
    manifest = {"run_id": run_id, "benchmark": "fewl", "status": "running", "code_version": code_version(),
                "created_at": dt.datetime.now(dt.timezone.utc).isoformat(), "config": cfg.model_dump(mode="json"),
                "config_fingerprint": fp, "dataset": loaded.report.to_dict(), "questions": len(questions),
                "similarity": similarity.name}
    store.write_json("manifest.json", manifest)

    specs = unique_specs([*cfg.references, cfg.generator])
    if any(s.backend in SERVED_BACKENDS for s in specs):
        init_ray(cfg.ray)
    calls = Location.from_url(cfg.cache.root or f"{root}/_cache/calls", cfg.storage) if cfg.cache.enabled else None
    samples = cfg.params.reference_samples
    ref_template = prompts.REFERENCE if samples == 1 else prompts.REFERENCE_MULTI
    mark = time.time()
    with served(specs, cfg.serve_http_port) as (endpoints, deployments):
        answers = collect(run_id, questions, {r.id: client(r, endpoints, calls, ref_template) for r in cfg.references},
                          (cfg.generator.id, client(cfg.generator, endpoints, calls, prompts.IW_CO)),
                          samples, cfg.params.iw_pairs, cfg.params.min_pairs, cfg.call_chunk)
    calls_s = round(time.time() - mark, 2)
    store.write_part("fewl_answers", "all", answers.table())

    mark = time.time()
    fewl = Fewl(similarity, cfg.params)
    _prewarm(embedder, questions, answers)
    index = QuestionIndex.build([q.question_id for q in questions], [q.question for q in questions], embedder)
    prepared = prepare_questions(fewl, questions, cfg.reference_ids(), answers.references, answers.iw_co, index)
    methods = paper_methods(cfg.params, cfg.baseline_reference())
    rows = _score_rows(run_id, fewl, questions, prepared, methods)
    store.write_part("fewl_scores", "all", pa.Table.from_pylist(rows, schema=SCORES))
    evaluation = evaluate(fewl, questions, prepared.artefacts, methods=methods)
    score_s = round(time.time() - mark, 2)

    usage = [{"model": m, "step": step, **u.as_dict()} for (m, step), u in sorted(answers.usage.items())]
    metrics = {
        "run_id": run_id, "dataset": cfg.dataset.name, "questions": len(questions), "similarity": similarity.name,
        "params": cfg.params.model_dump(mode="json"), "single_reference": cfg.baseline_reference(),
        "reference_ids": cfg.reference_ids(), "generator": cfg.generator.id,
        "evaluation": evaluation.to_dict(), "mean_scores": mean_scores(rows), "preparation": prepared.to_dict(),
        "parse_report": answers.report.counts(), "artefact_cache": asdict(artefacts.stats),
        "costs": {"calls": usage, "total": sum(answers.usage.values(), Usage()).as_dict(), "deployments": deployments},
    }
    store.write_json("metrics.json", metrics)
    store.write_json("parse_report.json", answers.report.to_dict())
    report = markdown(metrics)
    store.write_text("report.md", report)
    manifest.update(status="complete", finished_at=dt.datetime.now(dt.timezone.utc).isoformat(),
                    timings={"calls_s": calls_s, "score_s": score_s, "total_s": round(time.time() - started, 2)})
    store.write_json("manifest.json", manifest)
    return FewlResult(run_id, store.loc.url, metrics, report, time.time() - started)
