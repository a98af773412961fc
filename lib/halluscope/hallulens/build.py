"""The test-set job: build one HalluLens test set per trial seed and print where they are.

The generator models are reached like every model of a run: served by this job (scripted, hf,
vllm) or over an OpenAI-compatible API, through the call cache, so a rebuilt test set with a
deterministic or cached generator costs nothing. The generation rounds batch their prompts, and
the model calls spread over the serving replicas. A test set whose spec (task, seed, sizes,
models, templates, source hashes) was built before is reused. The printed URIs go under
``testsets.<task>`` of a run config.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from halluscope.config.schema import ModelSpec, RaySpec
from halluscope.errors import ConfigError
from halluscope.hallulens import generation, nonexistent, search, sources
from halluscope.hallulens.testset import TestSet
from halluscope.knowledge.passages import ArticleStore
from halluscope.storage.fs import Location, storage_options
from halluscope.storage.names import CALL_CACHE, TESTSETS, shared_url
from halluscope.storage.spec import StorageSpec


class Sources(BaseModel):
    model_config = ConfigDict(extra="forbid")

    goodwiki: list[str] = Field(default_factory=list, description="GoodWiki Parquet/JSONL files")
    wikirank_titles: str | None = None
    wikirank_scores: str | None = None
    itis_hierarchy: str | None = None
    itis_longnames: str | None = None
    medicines: str | None = None
    articles: str | None = Field(default=None, description="LongWiki: the article store its claims are verified "
                                                          "against (a run's benchmarks.hallulens.wiki.articles); "
                                                          "GoodWiki pages it lacks are left out and counted, as the "
                                                          "authors do")


class SearchSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    provider: Literal["brave", "fixture"] = "brave"
    fixture: str | None = Field(default=None, description="JSON file of query -> results (provider: fixture)")
    brave: search.BraveSearchConfig = Field(default_factory=search.BraveSearchConfig)


class TestSetJob(BaseModel):
    """What ``halluscope testset`` reads: the task, the trial seeds, sources and generators."""

    model_config = ConfigDict(extra="forbid")

    storage: StorageSpec = Field(default_factory=StorageSpec)
    root: str | None = Field(default=None, description="where test sets go; default <storage.root>/testsets")
    task: Literal["precise_wikiqa", "longwiki", "mixed_entities", "generated_entities"]
    seeds: list[int] = Field(default=[0], min_length=1, description="one test set (trial) per seed")
    params: dict[str, Any] = Field(default_factory=dict, description="the task's generation config (sizes, bins...)")
    sources: Sources = Field(default_factory=Sources)
    generators: list[ModelSpec] = Field(default_factory=list)
    search: SearchSpec = Field(default_factory=SearchSpec)
    ray: RaySpec = Field(default_factory=RaySpec)


def generation_config(job: TestSetJob, seed: int):
    configs: dict[str, type[BaseModel]] = {
        "precise_wikiqa": generation.PreciseWikiQAConfig, "longwiki": generation.LongWikiConfig,
        "mixed_entities": nonexistent.MixedEntitiesConfig, "generated_entities": nonexistent.GeneratedEntitiesConfig}
    model = configs[job.task]
    params = {**job.params, "seed": seed}
    if job.task == "generated_entities":
        params.setdefault("models", [g.id for g in job.generators])
    elif job.task in ("precise_wikiqa", "longwiki") and job.generators:
        params.setdefault("generator_model", job.generators[0].id)
    return model.model_validate(params)


def _require(value: Any, field: str, job: TestSetJob) -> Any:
    if not value:
        raise ConfigError(f"test-set job for {job.task}: sources.{field} is required")
    return value


def evidence_titles(job: TestSetJob, pages: list[sources.WikiPage], opts: dict | None) -> list[str]:
    """The GoodWiki titles the LongWiki article store holds: a page it lacks would leave every claim
    without its source page, so unverified, which lifts precision and lowers recall."""
    store = ArticleStore.load(_require(job.sources.articles, "articles", job), titles=[p.title for p in pages],
                              storage_options=opts)
    return [p.title for p in pages if store.resolve(p.title) is not None]


def build(job: TestSetJob, backends: dict[str, Any]) -> list[TestSet]:
    """One test set per seed; ``backends`` maps generator model id -> ModelBackend."""
    opts = storage_options(job.storage) if job.storage.root.startswith("s3://") else None
    root = Location.from_url(_testsets_root(job), job.storage)
    generate = {mid: generation.BackendGenerate(b, f"testset:{job.task}") for mid, b in backends.items()}
    out = []
    if job.task in ("precise_wikiqa", "longwiki"):
        if len(generate) != 1:
            raise ConfigError(f"test-set job for {job.task}: exactly one generator model, got {len(generate)}")
        pages = sources.load_goodwiki(_require(job.sources.goodwiki, "goodwiki", job), storage_options=opts)
        scores = sources.load_harmonic_centrality(_require(job.sources.wikirank_titles, "wikirank_titles", job),
                                                  job.sources.wikirank_scores,
                                                  only={p.title for p in pages.pages}, storage_options=opts)
        allowed = evidence_titles(job, pages.pages, opts) if job.task == "longwiki" else None
        for seed in job.seeds:
            out.append(generation.build_wiki_testset(root, generation_config(job, seed), pages, scores,
                                                     next(iter(generate.values())), allowed_titles=allowed))
    elif job.task == "mixed_entities":
        taxonomy = sources.load_itis(job.sources.itis_hierarchy, job.sources.itis_longnames, storage_options=opts) \
            if job.sources.itis_hierarchy and job.sources.itis_longnames else None
        medicines = sources.load_medicines(job.sources.medicines, storage_options=opts) \
            if job.sources.medicines else None
        for seed in job.seeds:
            out.append(nonexistent.build_mixed_testset(root, generation_config(job, seed), taxonomy, medicines))
    else:
        provider: search.SearchProvider = (
            search.FixtureSearchProvider.from_json(_require(job.search.fixture, "fixture (search)", job))
            if job.search.provider == "fixture" else search.BraveSearch(job.search.brave))
        for seed in job.seeds:
            out.append(nonexistent.build_generated_testset(root, generation_config(job, seed), generate, provider))
    return out


def load_job(uri: str) -> TestSetJob:
    from halluscope.runkit import load_yaml_config

    return load_yaml_config(TestSetJob, uri)


def summary(ts: TestSet) -> str:
    """The build report of a test set, short bins first named."""
    report = ts.report
    short = [b for b in report.get("bins", {}).values() if b["made"] < b["target"]]
    head = ("reused; " if ts.reused else "") + (f"INCOMPLETE: {len(short)} bin(s) short" if short else "complete")
    lines = [f"{head}; {len(ts.items)} items"]
    if "pages_not_in_allowed_titles" in report.get("notes", {}):
        lines.append(f"pages left out, not in the article store: {report['notes']['pages_not_in_allowed_titles']}")
    for b in report.get("bins", {}).values():
        why = ", ".join(f"{k}={v}" for k, v in b["rejected"].items()) or "none"
        lines.append(f"bin {b['bin']}: {b['made']}/{b['target']} after {b['attempts']} attempts "
                     f"(stopped: {b['stopped']}); rejected: {why}")
    return "\n".join(lines)


def _testsets_root(job: TestSetJob) -> str:
    return job.root or shared_url(job.storage.root, TESTSETS)


def uri(ts: TestSet, job: TestSetJob) -> str:
    return f"{_testsets_root(job).rstrip('/')}/{ts.spec.task}/{ts.testset_id}"


def run_job(job: TestSetJob) -> list[TestSet]:
    """Serve or reach the generators (through the call cache), then build every seed's test set."""
    from halluscope.models.registry import Context, client
    from halluscope.runkit import init_ray, served

    if any(g.served for g in job.generators):
        init_ray(job.ray)
    cache = Location.from_url(shared_url(job.storage.root, CALL_CACHE), job.storage)
    with served(job.generators) as (endpoints, _):
        return build(job, {g.id: client(g, Context(endpoints.get(g.id)), cache, f"testset:{job.task}")
                           for g in job.generators})
