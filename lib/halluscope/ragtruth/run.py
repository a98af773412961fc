"""A RAGTruth run on Ray: detector evaluation over the corpus, and the RAG-generation benchmark.

A run folder ``<storage.root>/<run_id>/`` holds::

    manifest.json     config, fingerprint, corpus files' sha256, every invalid label, held-out ids, status
    predictions/, detect_calls/, counts/                 one part per detector batch; counts last (commit)
    rag_generations/, rag_calls/, rag_counts/            one part per generation batch (when configured)
    metrics.json      response- and span-level P/R/F1 per task, per model and pooled, problems, costs
    stats.json        the corpus' Tables 2 and 3;  selection.json: the §6.3 selection experiment
    rag_metrics.json  hallucination rate and density per model under test and task;  report.md

The corpus is loaded and checked in the driver, so bad input fails before any model starts.
Detector batches hold whole sources (an instance's responses stay together, spec §1.5). Metrics
come only from the committed count parts, summed in the driver: one batch or many give the same
numbers. Running again with the same run id continues: responses (and source/model pairs) already
committed are skipped, parts of batches that never committed are removed first, and a different
configuration or corpus is refused. A new run id with the same models answers from the call cache.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import asdict, dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from halluscope.config import CacheSpec, ModelSpec, RaySpec, StorageSpec
from halluscope.errors import ConfigError, DataError, RunError
from halluscope.ragtruth import stages
from halluscope.ragtruth.corpus import Corpus, CorpusOptions, Record, load_corpus
from halluscope.ragtruth.metrics import MetricOptions
from halluscope.ragtruth.report import markdown
from halluscope.ragtruth.results import Setup, aggregate, read_committed
from halluscope.records import stable_id
from halluscope.runkit import (code_version, conflicting_ids, fingerprint, init_ray, load_yaml_config, served,
                              unique_specs)
from halluscope.storage.fs import Location, storage_options
from halluscope.storage.run import RunStore

# the paper's two selection pairs (Table 7), by their names in response.jsonl
PAPER_PAIRS = (("llama-2-7b-chat", "mistral-7B-instruct"), ("gpt-3.5-turbo-0613", "gpt-4-0613"))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CorpusSpec(CorpusOptions):
    """The two released files (local paths or fsspec URLs; s3:// ones are read with the storage's
    endpoint and credentials) and how to read them."""

    responses: str = Field(description="response.jsonl (or .jsonl.gz)")
    sources: str = Field(description="source_info.jsonl (or .jsonl.gz)")

    def options(self) -> CorpusOptions:
        return CorpusOptions(**self.model_dump(include=set(CorpusOptions.model_fields)))


class SelectionSpec(_Strict):
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


class RagTruthConcurrency(_Strict):
    batch_size: int = Field(default=64, gt=0, description="responses per detector batch (whole sources): "
                                                          "one judge generate_batch and one committed part")
    generate_batch_size: int = Field(default=32, gt=0, description="sources per RAG-generation batch and model")
    actors: int = Field(default=2, gt=0, description="Ray Data actors per stage")
    actor_cpus: float = Field(default=0.5, ge=0)


class RagTruthRunConfig(_Strict):
    benchmark: Literal["ragtruth"] = "ragtruth"
    run_id: str | None = None
    storage: StorageSpec = Field(default_factory=StorageSpec)
    corpus: CorpusSpec
    detector: ModelSpec = Field(description="the judge model behind the prompt-based detector")
    generate: list[ModelSpec] = Field(default_factory=list, description="models under test answering the "
                                                                        "sources' prompts (RAG generation)")
    metrics: MetricOptions = Field(default_factory=MetricOptions)
    selection: SelectionSpec = Field(default_factory=SelectionSpec)
    cache: CacheSpec = Field(default_factory=CacheSpec)
    concurrency: RagTruthConcurrency = Field(default_factory=RagTruthConcurrency)
    ray: RaySpec = Field(default_factory=RaySpec)
    serve_http_port: int | None = None

    @model_validator(mode="after")
    def _live_models(self) -> "RagTruthRunConfig":
        for where, spec in [("detector", self.detector), *((f"generate.{i}", g) for i, g in enumerate(self.generate))]:
            if spec.backend == "replay":
                raise ValueError(f"{where} ({spec.id}): must be a live model, not replay")
        ids = [g.id for g in self.generate]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"generate: duplicate model id(s) {dupes}")
        clashes = conflicting_ids([self.detector, *self.generate])
        if clashes:
            raise ValueError(f"model id(s) {clashes} name a detector and a generator with different settings")
        return self

    def fingerprint(self, corpus: Corpus) -> str:
        """What the results depend on: models, options and the corpus' content, not where it lives."""
        keep = self.model_dump(mode="json", include={"detector", "generate", "metrics", "selection"})
        keep["corpus"] = self.corpus.options().model_dump(mode="json")
        keep["corpus_sha256"] = {k: v.sha256 for k, v in corpus.manifest.files.items()}
        return fingerprint(keep)


def load_ragtruth_config(uri: str) -> RagTruthRunConfig:
    return load_yaml_config(RagTruthRunConfig, uri)


@dataclass
class RagTruthResult:
    run_id: str
    uri: str
    metrics: dict
    rag_metrics: dict | None
    report: str
    processed: int  # responses judged (and source/model pairs generated) in this invocation
    skipped: int  # already committed by an earlier invocation
    seconds: float


def _corpus(cfg: RagTruthRunConfig) -> Corpus:
    c = cfg.corpus
    opts = storage_options(cfg.storage) if c.responses.startswith("s3://") or c.sources.startswith("s3://") else {}
    corpus = load_corpus(c.responses, c.sources, c.options(), opts)
    if not corpus.records:
        raise DataError(f"no RAGTruth response is left to evaluate:\n{corpus.report()}")
    return corpus


def candidate_sets(cfg: RagTruthRunConfig, corpus: Corpus) -> list[list[str]]:
    present = sorted({r.model for r in corpus.records})
    if cfg.selection.candidates is not None:
        for models in cfg.selection.candidates:
            missing = sorted(set(models) - set(present))
            if missing:
                raise ConfigError(f"selection.candidates: model(s) {missing} have no response in the corpus "
                                  f"(models: {present})")
        return [list(m) for m in cfg.selection.candidates]
    pairs = [list(p) for p in PAPER_PAIRS if set(p) <= set(present)]
    return pairs or ([present] if len(present) >= 2 else [])


# --- planning ----------------------------------------------------------------------------------

def plan_detection(records: list[Record], done: set[str], batch_size: int) -> list[dict]:
    """Batches of about ``batch_size`` responses that never split a source; keys from their ids."""
    by_source: dict[str, list[str]] = {}
    for r in sorted(records, key=lambda r: (r.task_type.value, r.source_id, r.id)):
        if r.id not in done:
            by_source.setdefault(r.source_id, []).append(r.id)
    plans, ids = [], []
    for group in by_source.values():
        if ids and len(ids) + len(group) > batch_size:
            plans.append(ids)
            ids = []
        ids.extend(group)
    if ids:
        plans.append(ids)
    return [{"key": stable_id("detect", *sorted(p)), "ids": p} for p in plans]


def plan_generation(source_ids: list[str], models: list[str], done: set[tuple[str, str]],
                    batch_size: int) -> list[dict]:
    plans = []
    for model in models:
        todo = [s for s in source_ids if (s, model) not in done]
        for i in range(0, len(todo), batch_size):
            chunk = todo[i:i + batch_size]
            plans.append({"key": stable_id("rag", model, *chunk), "model": model, "source_ids": chunk})
    return plans


def _execute(plans: list[dict], stage: type, args: tuple, cfg: RagTruthRunConfig) -> int:
    import ray

    if not plans:
        return 0
    ds = ray.data.from_items(plans, override_num_blocks=len(plans))
    ds = ds.map_batches(stage, fn_constructor_args=args, batch_size=1, batch_format="pyarrow",
                        num_cpus=cfg.concurrency.actor_cpus,
                        compute=ray.data.ActorPoolStrategy(size=min(cfg.concurrency.actors, len(plans))))
    return int(sum(r["rows"] for r in ds.take_all()))


# --- the run -----------------------------------------------------------------------------------

def run_ragtruth(cfg: RagTruthRunConfig, run_id: str | None = None, progress: bool = False) -> RagTruthResult:
    started = time.time()
    # everything that can fail on bad input fails here, before Ray or any model starts
    corpus = _corpus(cfg)
    sets = candidate_sets(cfg, corpus)
    fp = cfg.fingerprint(corpus)
    run_id = run_id or cfg.run_id or f"{dt.datetime.now(dt.timezone.utc):%Y%m%d-%H%M%S}-ragtruth-{fp[:8]}"
    store = RunStore(Location.from_url(cfg.storage.root, cfg.storage), run_id)
    previous = store.read_json("manifest.json")
    if previous and previous.get("config_fingerprint") != fp:
        raise RunError(f"run {store.loc.url} was started with a different configuration or corpus "
                       f"(fingerprint {previous.get('config_fingerprint')} != {fp}); use a new run id")
    store.claim()  # see storage/run.py: an earlier attempt's actors stop committing
    snapshot = {tables: store.committed_keys(tables[-1]) for tables in (stages.DETECT_TABLES, stages.RAG_TABLES)}
    removed = sum(store.prune(tables, keys) for tables, keys in snapshot.items())
    done = set(read_committed(store, "predictions", "counts", ["response_id"], snapshot[stages.DETECT_TABLES])
               .column("response_id").to_pylist())
    detect_plans = plan_detection(corpus.records, done, cfg.concurrency.batch_size)
    source_ids = sorted({r.source_id for r in corpus.records},
                        key=lambda s: (corpus.sources[s].task_type.value, s))
    gen_done = {(r["source_id"], r["model"]) for r in
                read_committed(store, "rag_generations", "rag_counts", ["source_id", "model"],
                               snapshot[stages.RAG_TABLES]).to_pylist()}
    gen_plans = plan_generation(source_ids, [g.id for g in cfg.generate], gen_done,
                                cfg.concurrency.generate_batch_size)
    manifest = {
        "run_id": run_id, "benchmark": "ragtruth", "status": "running", "code_version": code_version(),
        "created_at": (previous or {}).get("created_at", dt.datetime.now(dt.timezone.utc).isoformat()),
        "config": cfg.model_dump(mode="json"), "config_fingerprint": fp,
        "corpus": corpus.manifest.model_dump(mode="json"),
        # ids held out for a problem (the split filter's are only counted, in corpus.excluded)
        "label_problems": [asdict(p) for p in corpus.problems],
        "excluded": {k: v for k, v in corpus.excluded.items() if k != "split"},
        "selection_candidates": sets,
    }
    store.write_json("manifest.json", manifest)

    processed, deployments, mark = 0, [], time.time()
    if detect_plans or gen_plans:
        import ray

        init_ray(cfg.ray)
        ray.data.DataContext.get_current().enable_progress_bars = progress
        cache = Location.from_url(cfg.cache.root or f"{cfg.storage.root.rstrip('/')}/_cache/calls", cfg.storage) \
            if cfg.cache.enabled else None
        with served(unique_specs([cfg.detector, *cfg.generate]), cfg.serve_http_port) as (endpoints, deployments):
            if detect_plans:
                wanted = {i for p in detect_plans for i in p["ids"]}
                records = ray.put({r.id: r for r in corpus.records if r.id in wanted})
                processed += _execute(detect_plans, stages.DetectCorpus,
                                      (records, cfg.detector, endpoints, cache, store, cfg.metrics), cfg)
            if gen_plans:
                sources = ray.put({s: corpus.sources[s] for s in source_ids})
                processed += _execute(gen_plans, stages.GenerateAndDetect,
                                      (sources, cfg.generate, cfg.detector, endpoints, cache, store, cfg.metrics), cfg)
    pipeline_s = round(time.time() - mark, 2)
    # commits an earlier attempt's actors made after the snapshot: this attempt redid their work
    late = sum(store.prune(tables, snapshot[tables] | {p["key"] for p in plans})
               for tables, plans in ((stages.DETECT_TABLES, detect_plans), (stages.RAG_TABLES, gen_plans)))
    setup = Setup(cfg.detector.id, cfg.metrics, sets, cfg.selection.seed, [g.id for g in cfg.generate])
    metrics, rag = aggregate(setup, store, corpus, deployments)
    report = markdown(run_id, metrics, store.read_json("selection.json"), rag)
    store.write_text("report.md", report)
    manifest.update(status="complete", finished_at=dt.datetime.now(dt.timezone.utc).isoformat(),
                    timings={"pipeline_s": pipeline_s, "total_s": round(time.time() - started, 2)},
                    counts={"records": len(corpus.records), "done_before": len(done), "processed": processed,
                            "generation_pairs": len(source_ids) * len(cfg.generate), "generated_before": len(gen_done),
                            "uncommitted_parts_removed": removed, "late_parts_removed": late})
    store.write_json("manifest.json", manifest)
    return RagTruthResult(run_id, store.loc.url, metrics, rag, report, processed, len(done) + len(gen_done),
                          time.time() - started)
