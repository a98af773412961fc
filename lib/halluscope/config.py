"""Run configuration: pydantic models loaded from YAML at a path or any fsspec URL (s3://...)."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from halluscope.contract.benchmark import KnowledgeFile
from halluscope.errors import ConfigError, clip
from halluscope.sources import system_path_problem, url_scheme
from halluscope.storage.names import checked, model_id_problem, run_id_problem
from halluscope.storage.spec import StorageSpec
from halluscope.task_registry import benchmark_of, benchmarks, get_task, unknown_task

DEFAULT_PRICE_TABLE = "cluster/prices.yaml"  # relative to the working directory (a job's is the checkout)
# What a config file may hold: a YAML alias bomb or a 100 MB value would otherwise be expanded,
# validated and echoed whole before anything could refuse it
MAX_CONFIG_BYTES = 4 * 1024 * 1024
MAX_VALUE_CHARS = 4096  # of any string in a config, a key or a value
MAX_CONFIG_DEPTH = 32  # mappings and lists inside each other


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DataSpec(_Strict):
    """Where benchmark data is found: this directory, then the cache, then the public source URL."""

    dir: str | None = None
    cache_dir: str = "~/.cache/halluscope/data"
    download: bool = True
    allow_http: bool = Field(
        default=False, description="knowledge files a benchmark's options name (a package list, a title dump, an "
                                   "article store) may be http(s):// URLs the driver and workers fetch; "
                                   "otherwise local paths and s3:// only (PyPI's live index aside)")


class SamplingSpec(_Strict):
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = Field(default=512, gt=0)


class ReplayParams(_Strict):
    """Recorded generations. ``source: released`` finds the file a benchmark released for the model
    (through its task); otherwise ``path`` is a CSV/JSONL/Parquet file with ``columns`` mapping its
    names to ours."""

    source: Literal["released", "recorded", "file"] = Field(
        default="released", description="released: the responses a task's benchmark released; recorded: the "
                                        "responses its published numbers were computed from, where it kept them")

    name: str | None = Field(default=None, description="model name in the source, default: the model id")
    path: str | None = None
    format: Literal["csv", "jsonl", "parquet"] | None = None
    columns: dict[str, str] = Field(default_factory=dict)

    @field_validator("columns")
    @classmethod
    def _known_columns(cls, v: dict[str, str]) -> dict[str, str]:
        allowed = {"text", "prompt", "item_id", "task"}
        unknown = set(v) - allowed
        if unknown:
            raise ValueError(f"unknown column role(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
        return v


class OpenAIParams(_Strict):
    base_url: str
    model: str | None = None
    api_key_env: str | None = None
    max_concurrency: int = Field(default=16, gt=0)
    timeout_s: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=4, ge=0)
    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    structured_output: Literal["off", "json_schema", "vllm"] = Field(
        default="off", description="how the endpoint takes a judge's or extractor's answer format (a choice, a "
                                   "JSON schema): off (not sent; the answer is parsed as free text), json_schema "
                                   "(OpenAI's response_format), vllm (vLLM's structured_outputs)")


Role = Literal["test", "judge", "extractor", "reference"]


class ServeOptions(_Strict):
    """Sizing of a model's Ray Serve deployment."""

    num_replicas: int = Field(default=1, ge=1)
    max_ongoing_requests: int = Field(default=64, ge=1, description="requests one replica takes at once")
    num_cpus: float = Field(default=1.0, ge=0)
    num_gpus: float = Field(default=0.0, ge=0)
    max_batch_prompts: int = Field(default=32, ge=1, description="prompts the client sends per request")
    deploy_timeout_s: float | None = Field(
        default=None, gt=0, description="seconds a deployment may take to become healthy (pending, weights "
                                        "loading) before that model fails; None: 3,600 for vllm (a 405B "
                                        "load from a cache or S3 takes 20-40 minutes), 600 otherwise")


class ScriptedRule(_Strict):
    pattern: str = Field(description="regular expression searched in the prompt")
    response: str


class ScriptedParams(_Strict):
    """A deterministic stand-in model for tests, load simulation and fault injection. Its
    results are marked scripted and never reported as a real model's."""

    rules: list[ScriptedRule] = Field(default_factory=list, description="first matching rule answers")
    abstain_patterns: list[str] = Field(default_factory=list)
    abstain_text: str = "I'm sorry, I cannot answer that."
    support_on_overlap: float | None = Field(
        default=None, ge=0, le=1,
        description="judge mode: answer Yes when this share of the claim's words occur in the evidence")
    extract: bool = Field(default=False, description="extractor mode: answer what a registered benchmark's "
                                                     "stand_in answers (facts, reference titles, parses)")
    default: str = "I don't know."
    latency_s: float = Field(default=0.0, ge=0, description="seconds each prompt takes")
    tokens_per_s: float | None = Field(
        default=None, gt=0, description="output tokens/s one replica produces over all its requests "
                                        "(continuous batching: a prompt waits for those ahead of it); None: no limit")
    load_s: float = Field(default=0.0, ge=0, description="seconds a replica takes to start (a weights load)")
    capacity: int | None = Field(
        default=None, ge=1, description="prompts a replica answers at once; ceiling = replicas x capacity / latency")
    error_rate: float = Field(default=0.0, ge=0, le=1, description="share of calls answered with HTTP 503")
    timeout_rate: float = Field(default=0.0, ge=0, le=1, description="share of calls that never answer in time")
    seed: int = 0
    serve: ServeOptions = Field(default_factory=ServeOptions)


class HFParams(_Strict):
    """transformers in a Serve deployment, for small models on CPU or GPU."""

    model_source: str = Field(description="local path, s3:// prefix or hub id")
    revision: str | None = None
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    dtype: Literal["float32", "float16", "bfloat16"] = "float32"
    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    serve: ServeOptions = Field(default_factory=ServeOptions)


class VLLMParams(_Strict):
    """vLLM engines through ray.serve.llm."""

    model_source: str
    revision: str | None = None
    tensor_parallel_size: int = Field(default=1, ge=1)
    pipeline_parallel_size: int = Field(default=1, ge=1)
    accelerator_type: str | None = None
    max_model_len: int | None = Field(default=None, gt=0)
    engine_kwargs: dict[str, Any] = Field(default_factory=dict)
    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    serve: ServeOptions = Field(default_factory=ServeOptions)


class _Model(_Strict):
    id: str
    role: Role = "test"
    tasks: list[str] | None = Field(default=None, min_length=1,
                                    description="the run's tasks this model under test is evaluated on; None: all")

    @field_validator("id")
    @classmethod
    def _safe_id(cls, v: str) -> str:
        """The id names the model's call-cache folder and is printed in reports."""
        return checked(v, model_id_problem, ValueError)


class RecordedParams(_Strict):
    steps: str = Field(description="package.module:function giving a released model's recorded LLM steps")


class RecordedModel(_Model):
    """A judge or extractor answering from the authors' recorded pipeline (0 dollars, counted calls)."""

    backend: Literal["recorded"]
    params: RecordedParams


class ReplayModel(_Model):
    backend: Literal["replay"]
    params: ReplayParams = Field(default_factory=ReplayParams)


class OpenAIModel(_Model):
    backend: Literal["openai"]
    params: OpenAIParams


class ScriptedModel(_Model):
    backend: Literal["scripted"]
    params: ScriptedParams = Field(default_factory=ScriptedParams)


class HFModel(_Model):
    backend: Literal["hf"]
    params: HFParams


class VLLMModel(_Model):
    backend: Literal["vllm"]
    params: VLLMParams


ServedModel = ScriptedModel | HFModel | VLLMModel
SERVED_BACKENDS = ("scripted", "hf", "vllm")  # the backends a run deploys on Ray Serve itself
ModelSpec = Annotated[ReplayModel | RecordedModel | OpenAIModel | ScriptedModel | HFModel | VLLMModel,
                      Field(discriminator="backend")]


class Limits(_Strict):
    max_items_per_task: int | None = Field(default=None, gt=0)


class Concurrency(_Strict):
    """How wide the Ray Data stages run; defaults fit a 2-core laptop."""

    batch_size: int = Field(default=512, gt=0, description="rows per evaluation batch (and committed part)")
    generate_batch_size: int = Field(
        default=4096, gt=0, description="rows per generation batch: all of a batch's prompts are in flight at once, "
                                        "so large batches keep an endpoint at its ceiling")
    verify_actors: int = Field(default=2, gt=0)
    generate_actors: int = Field(default=1, gt=0)


class CacheSpec(_Strict):
    """The content-addressed cache of model calls; shareable across runs."""

    enabled: bool = True
    root: str | None = Field(default=None, description="fsspec URL; default <storage.root>/_cache/calls")


class CostSpec(_Strict):
    class SharedService(_Strict):
        """A long-running deployment many runs call (the RayService `halluscope-serve`), billed by
        its time: each run is charged its share of the hours it had calls in flight to it
        (halluscope.cost.shared; docs/operations.md). Priced by ``usd_per_hour``, or by ``nodes``
        or ``gpus`` of ``resource`` from the price table."""

        name: str = Field(max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
                          description="the service; names its folder <storage.root>/_shared/services/<name>/")
        usd_per_hour: float | None = Field(default=None, ge=0, description="what the service costs per hour")
        nodes: int | None = Field(default=None, gt=0, description="or: whole nodes of `resource` it holds")
        gpus: int | None = Field(default=None, gt=0,
                                 description="or: GPUs of `resource` it holds (rounded up to whole nodes where "
                                             "the price table bills `resource` per node)")
        resource: str | None = Field(default=None, description="accelerator type, a price table key")
        models: list[str] = Field(min_length=1, description="ids of the run's models (backend openai) it serves")

        @model_validator(mode="after")
        def _one_price(self) -> CostSpec.SharedService:
            given = [k for k in ("usd_per_hour", "nodes", "gpus") if getattr(self, k) is not None]
            if len(given) != 1:
                raise ValueError(f"shared service '{self.name}': give exactly one of usd_per_hour, nodes, gpus "
                                 f"(got {given or 'none'})")
            if (self.resource is None) == (given[0] != "usd_per_hour"):
                raise ValueError(f"shared service '{self.name}': `resource` goes with nodes or gpus, "
                                 "and only with them")
            return self

    price_table: str | None = Field(
        default=DEFAULT_PRICE_TABLE,
        description="path or URL of the price table; None: tokens only. The default is used when it exists.")
    budget_usd: float | None = Field(
        default=None, ge=0,
        description="stop the run before any model starts when `halluscope plan` estimates more; "
                    "every planned line item must then be priced")
    shared_services: list[CostSpec.SharedService] = Field(
        default_factory=list,
        description="shared deployments this run's models call; their time is charged to the runs that "
                    "used them, and calls to them are not priced by tokens")

    @field_validator("shared_services")
    @classmethod
    def _distinct_services(cls, v: list[CostSpec.SharedService]) -> list[CostSpec.SharedService]:
        names = [s.name for s in v]
        models = [m for s in v for m in s.models]
        for what, ids in (("service name", names), ("model served by more than one service", models)):
            dupes = sorted({i for i in ids if ids.count(i) > 1})
            if dupes:
                raise ValueError(f"costs.shared_services: duplicate {what}(s): {dupes}")
        return v


class RaySpec(_Strict):
    address: str | None = Field(default=None, description="None: RAY_ADDRESS if set, else a local Ray")
    num_cpus: int | None = Field(default=None, gt=0, description="logical CPUs of a local Ray; None: the "
                                                              "machine's, at least 4 and at least what the run holds")
    num_gpus: int | None = Field(default=None, ge=0, description="logical GPUs a local Ray declares (to "
                                                              "simulate a GPU cluster); None: those Ray finds")
    object_store_memory_mb: int = Field(default=512, gt=0)


class ClusterSpec(_Strict):
    """What the run may hold of the cluster. Served models under test are deployed in waves that
    fit beside the roles the run serves; a model larger than the budget is refused before any
    deployment."""

    gpus: int | dict[str, int] | None = Field(
        default=None, description="GPUs the run may hold: a number (any type) or accelerator type -> number "
                                  "(e.g. {H100: 16}); None: the GPUs of the Ray cluster at the start (on an "
                                  "autoscaling cluster, set the GPU group's maximum here, or the queue's quota)")
    cpus: float | None = Field(default=None, gt=0, description="logical CPUs the run may hold; None: the cluster's")
    stall_timeout_s: float = Field(default=600.0, gt=0,
                                   description="with no progress for this long, the run says what waits")

    @field_validator("gpus")
    @classmethod
    def _non_negative(cls, v: int | dict[str, int] | None) -> int | dict[str, int] | None:
        values = v.values() if isinstance(v, dict) else [] if v is None else [v]
        if any(n < 0 for n in values):
            raise ValueError("GPU counts must be >= 0")
        return v

    def gpu_budget(self) -> dict[str, float] | None:
        """Accelerator type (or "GPU": any) -> GPUs; None when the config sets none."""
        if self.gpus is None:
            return None
        return {"GPU": float(self.gpus)} if isinstance(self.gpus, int) else {k: float(n) for k, n in self.gpus.items()}


class RunConfig(_Strict):
    run_id: str | None = None
    storage: StorageSpec = Field(default_factory=StorageSpec)
    data: DataSpec = Field(default_factory=DataSpec)
    models: list[ModelSpec] = Field(min_length=1)
    tasks: list[str] = Field(min_length=1)
    testsets: dict[str, list[str] | dict[str, list[str]]] = Field(
        default_factory=dict,
        description="task -> URIs of its generated test sets (<root>/<task>/<id>), one per trial, shared by "
                    "every model; or task -> {model id -> URIs} for test sets generated per model")
    limits: Limits = Field(default_factory=Limits)
    max_error_fraction: float = Field(
        default=0.1, ge=0, le=1,
        description="the run fails (status failed, non-zero exit) when more of its generations than this "
                    "share failed (calls or decomposition that errored; items not in a replay file are "
                    "counted apart), and always when a model under test has no scored generation")
    benchmarks: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="benchmark name -> its options (each benchmark validates its own "
                                          "section: benchmarks.<name>.<option>)")
    cache: CacheSpec = Field(default_factory=CacheSpec)
    costs: CostSpec = Field(default_factory=CostSpec)
    serve_http_port: int | None = Field(
        default=None, description="Serve's HTTP port for served models; None: Serve's default "
                                  "(8000), or the port of a Serve already running")
    progress_every_s: float = Field(default=5.0, gt=0, description="how often progress.json is rewritten during a run")
    concurrency: Concurrency = Field(default_factory=Concurrency)
    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    ray: RaySpec = Field(default_factory=RaySpec)

    @field_validator("run_id")
    @classmethod
    def _safe_run_id(cls, v: str | None) -> str | None:
        """The run id is the run's folder under storage.root."""
        return v if v is None else checked(v, run_id_problem, ValueError)

    @field_validator("models")
    @classmethod
    def _unique_model_ids(cls, v: list[Any]) -> list[Any]:
        ids = [m.id for m in v]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"duplicate model id(s): {dupes}")
        for role in ("judge", "extractor"):
            players = [m for m in v if m.role == role]
            if len(players) > 1:
                raise ValueError(f"{len(players)} models have role '{role}' ({[m.id for m in players]}); "
                                 "a run has at most one")
            if players and players[0].backend == "replay":
                raise ValueError(f"model '{players[0].id}': a {role} must be a live model, not replay")
        for m in v:
            if m.role == "reference" and m.backend == "replay":
                raise ValueError(f"model '{m.id}': a reference must be a live model, not replay")
            if m.role != "test" and m.tasks is not None:
                raise ValueError(f"model '{m.id}': tasks selects what a model under test answers; a {m.role} "
                                 "answers whichever task asks it")
            if m.backend == "recorded" and m.role == "test":
                raise ValueError(f"model '{m.id}': a recorded model answers as a judge or extractor, not under test")
        if not any(m.role == "test" for m in v):
            raise ValueError("no model has role 'test': nothing to evaluate")
        return v

    def testset_uris(self, task: str, model: str) -> list[str]:
        """The test sets of a task for one model: the shared list, or the model's own."""
        entry = self.testsets.get(task, [])
        return entry.get(model, []) if isinstance(entry, dict) else entry

    def options_for(self, benchmark: str) -> BaseModel:
        """The validated ``benchmarks.<benchmark>`` section (its defaults when absent)."""
        return benchmarks()[benchmark].parse_options(self.benchmarks.get(benchmark))

    def tasks_of(self, model: ModelSpec) -> list[str]:
        """The run's tasks this model under test is evaluated on, in config order."""
        return [t for t in self.tasks if model.tasks is None or t in model.tasks]

    def fingerprint(self) -> str:
        """Hash of what changes results (not run_id, storage, data location, width or Ray settings)."""
        keep = self.model_dump(mode="json", include={"models", "tasks", "testsets", "limits"})
        if self.benchmarks:  # only then, so configs without options keep their fingerprint
            keep["benchmarks"] = self.benchmarks
        for m in keep["models"]:  # likewise an endpoint left at structured_output: off
            if m["params"].get("structured_output") == "off":
                del m["params"]["structured_output"]
        return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:16]


def validation_message(err: ValidationError, source: str) -> str:
    lines = [f"invalid run config {source}:"]
    for e in err.errors():
        loc = ".".join(clip(p, 60) for p in e["loc"]) or "(top level)"
        lines.append(f"  {loc}: {clip(' '.join(e['msg'].split()), 400)}")  # one line each, a value shown in part
    return "\n".join(lines)


def parse_config(data: Any, source: str = "<config>", *, stored: bool = False) -> RunConfig:
    """Validate a mapping as a RunConfig; task names are checked against the task registry.
    ``stored``: a config read back from a run's manifest, whose keys that moved since the run
    started are moved to their new place instead of refused."""
    source = clip(source)
    if not isinstance(data, dict):
        raise ConfigError(f"invalid run config {source}: expected a mapping at the top level")
    check_values(data, f"invalid run config {source}")
    data = moved_forward(data) if stored else data
    check_moved_keys(data, source)
    try:
        cfg = RunConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(validation_message(err, source)) from None
    check_replay_paths(cfg, source)
    check_task_names(cfg.tasks, source)
    check_benchmark_options(cfg, source)
    check_knowledge_sources(cfg, source)
    check_task_needs(cfg, source)
    return cfg


def _moved() -> dict[tuple[str, ...], list[str]]:
    """Old dotted key (as a path) -> where the registered benchmarks that took it over set it now."""
    out: dict[tuple[str, ...], list[str]] = {}
    for bench in benchmarks().values():
        for old, new in bench.moved.items():
            out.setdefault(tuple(old.split(".")), []).append(new)
    return out


def _paths(data: dict, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every key of a config document, as a path, parents before their children."""
    for key, value in data.items():
        path = (*prefix, str(key))
        yield path
        if isinstance(value, dict):
            yield from _paths(value, path)


def check_moved_keys(data: dict, source: str) -> None:
    """A key a benchmark took over into its own section is refused in one line naming where it
    is set now (the deepest such key given: ``verifiers.titles`` rather than ``verifiers``)."""
    moved = _moved()
    given = [p for p in _paths(data) if p in moved]
    for path in given:
        if not any(len(q) > len(path) and q[:len(path)] == path for q in given):
            raise ConfigError(f"invalid run config {source}: {'.'.join(path)}: this option moved; set "
                              f"{' or '.join(sorted(moved[path]))} instead")


def moved_forward(data: dict) -> dict:
    """A copy of a config document with each key a benchmark took over moved to its new place
    (the deepest first; a place already set keeps its value). Keys that say nothing (null, {})
    are dropped: the new places default to them."""
    moved = _moved()
    data = copy.deepcopy(data)
    for path in sorted((p for p in _paths(data) if p in moved), key=len, reverse=True):
        *parents, last = path
        node = data
        for key in parents:
            node = node[key]
        value = node.pop(last)
        if value is None or value == {}:
            continue
        for new in moved[path]:
            *new_parents, new_last = new.split(".")
            target = data
            for key in new_parents:
                target = target.setdefault(key, {})
            if isinstance(value, dict) and isinstance(target.get(new_last), dict):
                target[new_last] = {**value, **target[new_last]}
            else:
                target.setdefault(new_last, value)
    return data


def check_benchmark_options(cfg: RunConfig, source: str) -> None:
    """Each ``benchmarks.<name>`` section names a registered benchmark and passes its schema."""
    known = benchmarks()
    listed = {benchmark_of(t).name for t in cfg.tasks}  # a listed benchmark's defaults must validate too
    for name in [*cfg.benchmarks, *sorted(listed - set(cfg.benchmarks))]:
        if name not in known:
            raise ConfigError(f"invalid run config {source}: benchmarks.{name}: unknown benchmark; "
                              f"known: {', '.join(sorted(known))}")
        try:
            options = known[name].parse_options(cfg.benchmarks.get(name))
        except ValidationError as err:
            lines = [f"invalid run config {source}:"]
            for e in err.errors():
                loc = ".".join(str(p) for p in ("benchmarks", name, *e["loc"]))
                lines.append(f"  {loc}: {e['msg']}")
            raise ConfigError("\n".join(lines)) from None
        role_models = known[name].role_models
        if name in listed and role_models is not None:
            for role, model in role_models(options):
                if not any(m.id == model and m.role == role for m in cfg.models):
                    raise ConfigError(f"invalid run config {source}: benchmarks.{name} names {role} model "
                                      f"'{model}', but models has no model with id '{model}' and role: {role}")
    for i, m in enumerate(cfg.models):
        unknown = sorted(set(m.tasks or ()) - set(cfg.tasks))
        if unknown:
            raise ConfigError(f"invalid run config {source}: models.{i}.tasks: {unknown} not in the run's tasks")


def check_task_needs(cfg: RunConfig, source: str) -> None:
    """Every role model and knowledge source a configured task uses must be configured."""
    roles = {m.role for m in cfg.models}
    for name in cfg.tasks:
        task = get_task(name)
        for role in task.roles:
            if role not in roles:
                raise ConfigError(f"invalid run config {source}: task '{name}' needs a {role} model; "
                                  f"add one to models with role: {role}")
        if task.needs_testsets and not cfg.testsets.get(name):
            raise ConfigError(f"invalid run config {source}: task '{name}' needs testsets.{name}: the URIs of its "
                              "test sets, one per trial (made by `halluscope testset`)")
        per_model = cfg.testsets.get(name)
        if isinstance(per_model, dict):
            missing = [m.id for m in cfg.models if m.role == "test" and not per_model.get(m.id)]
            if missing:
                raise ConfigError(f"invalid run config {source}: testsets.{name} lists test sets per model but "
                                  f"none for {missing}")
        # a knowledge source named like a field of the benchmark's options is configured there
        bench = benchmark_of(name).name
        options = cfg.options_for(bench)
        for knowledge in task.knowledge:
            if knowledge in type(options).model_fields and getattr(options, knowledge) is None:
                raise ConfigError(f"invalid run config {source}: task '{name}' needs "
                                  f"benchmarks.{bench}.{knowledge} to be set")


def source_problem(ref: str, allow_http: bool) -> str | None:
    """Why a knowledge file may not be read from ``ref``: local paths (outside the system's
    folders) and s3:// are read; http(s):// only when the config allows it (data.allow_http)."""
    scheme = url_scheme(ref)
    if scheme in ("http", "https"):
        return None if allow_http else (f"{scheme}:// URLs are not fetched unless the config sets "
                                        "data.allow_http: true")
    if scheme in (None, "file"):
        path = re.sub(r"^file:(//)?", "", ref, flags=re.IGNORECASE)
        # a relative name is a data name, found under the data folders: checked where it is found
        return system_path_problem(path) if os.path.isabs(os.path.expanduser(path)) else None
    if scheme in ("s3", "s3a"):
        return None
    return f"{scheme}:// is not read: use a local path or s3://... (or http(s)://... with data.allow_http: true)"


def knowledge_files(options: BaseModel, prefix: str) -> Iterator[tuple[str, str, KnowledgeFile]]:
    """(field, value, marker) of every set field of an options model, nested ones included, that
    names a knowledge file (``contract.benchmark.KnowledgeFile``)."""
    for name, info in type(options).model_fields.items():
        value, field = getattr(options, name), f"{prefix}.{name}"
        marker = next((m for m in info.metadata if isinstance(m, KnowledgeFile)), None)
        if marker is not None and isinstance(value, str):
            yield field, value, marker
        inner = list(enumerate(value)) if isinstance(value, (list, tuple)) else [(None, value)]
        for i, part in inner:
            if isinstance(part, BaseModel):
                yield from knowledge_files(part, field if i is None else f"{field}.{i}")


def check_knowledge_sources(cfg: RunConfig, source: str) -> None:
    """Knowledge files come from local paths or S3, never a system folder (/etc/shadow), and from
    http(s) only where the config says so: the driver and every worker fetch them. Nor are the
    data folders system folders (a data name "shadow" in data.dir /etc)."""
    named = dict.fromkeys([*cfg.benchmarks, *(benchmark_of(t).name for t in cfg.tasks)])
    for bench in named:
        for field, ref, marker in knowledge_files(cfg.options_for(bench), f"benchmarks.{bench}"):
            problem = None if ref in marker.also else source_problem(ref, cfg.data.allow_http)
            if problem:
                raise ConfigError(f"invalid run config {source}: {field}: {clip(ref)}: {problem}")
    for field, folder in (("data.dir", cfg.data.dir), ("data.cache_dir", cfg.data.cache_dir)):
        problem = None if folder is None or not os.path.isabs(os.path.expanduser(folder)) else \
            system_path_problem(folder)
        if problem:
            raise ConfigError(f"invalid run config {source}: {field}: {clip(folder)} {problem}")


def check_replay_paths(cfg: RunConfig, source: str) -> None:
    """A replay file is a local file: a URL in params.path was looked up as a relative path
    ("<config folder>/file:/etc/passwd not found")."""
    for i, m in enumerate(cfg.models):
        path = m.params.path if isinstance(m, ReplayModel) else None
        scheme = url_scheme(path) if path else None
        if scheme:
            raise ConfigError(f"invalid run config {source}: models.{i}.params.path: replay paths must be local "
                              f"files, not URLs ({scheme}:// in {clip(path)}); copy the file here and "
                              "give its path")


def check_values(data: Any, prefix: str) -> None:
    """Every string of a config (keys too) at most MAX_VALUE_CHARS characters long, and mappings and
    lists at most MAX_CONFIG_DEPTH deep: a ConfigError naming the field otherwise."""
    todo: list[tuple[Any, tuple[str, ...]]] = [(data, ())]
    while todo:
        value, path = todo.pop()
        field = ".".join(path) or "(top level)"
        if len(path) > MAX_CONFIG_DEPTH:
            raise ConfigError(f"{prefix}: {clip(field)}: nested more than {MAX_CONFIG_DEPTH} levels deep")
        if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
            raise ConfigError(f"{prefix}: {clip(field)}: a string of {len(value):,} characters; at most "
                              f"{MAX_VALUE_CHARS:,} are allowed")
        if isinstance(value, dict):
            for k, v in value.items():
                if isinstance(k, str) and len(k) > MAX_VALUE_CHARS:
                    raise ConfigError(f"{prefix}: {clip(field)}: a key of {len(k):,} characters ({clip(k, 60)}); "
                                      f"at most {MAX_VALUE_CHARS:,} are allowed")
                todo.append((v, (*path, clip(k, 60))))
        elif isinstance(value, (list, tuple)):
            todo.extend((v, (*path, str(i))) for i, v in enumerate(value))


def check_task_names(names: list[str], source: str) -> None:
    for i, name in enumerate(names):
        problem = unknown_task(name)
        if problem:
            raise ConfigError(f"invalid run config {source}: tasks.{i}: {problem}")


class _ConfigLoader(yaml.SafeLoader):
    """YAML's safe loader without anchors and aliases (``&a``, ``*a``, ``<<: *a``: a few lines of
    aliases expand to gigabytes), and with nesting bounded before the composer recurses into it."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _Refused(event.start_mark, "YAML anchors and aliases (&name, *name) are not allowed in a "
                                             "config: write the value out where it is used")
        self._depth += 1
        try:
            if self._depth > MAX_CONFIG_DEPTH:
                raise _Refused(event.start_mark, f"nested more than {MAX_CONFIG_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class _Refused(yaml.YAMLError):
    def __init__(self, mark: Any, problem: str) -> None:
        super().__init__(problem)
        self.problem_mark, self.problem = mark, problem


def _yaml_problem(err: yaml.YAMLError) -> str:
    """A YAML error as one line: where, and what (PyYAML's text spans several, quoting the file)."""
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    what = " ".join(str(getattr(err, "problem", None) or getattr(err, "context", None) or err).split())
    return where + clip(what, 300)


def read_yaml(uri: str, what: str = "run config", storage_options: dict | None = None) -> Any:
    """A YAML document from a local path or any fsspec URL: at most MAX_CONFIG_BYTES, without
    anchors or aliases, strings at most MAX_VALUE_CHARS long; every refusal is one line."""
    import fsspec

    shown = clip(uri)
    try:
        with fsspec.open(uri, "r", encoding="utf-8", **(storage_options or {})) as f:
            text = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{what} not found: {shown}") from None
    except IsADirectoryError:
        raise ConfigError(f"{what} {shown} is a folder; give the YAML file in it") from None
    except PermissionError:
        raise ConfigError(f"{what} {shown}: permission denied") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{what} {shown} is not a YAML text file (byte {err.start} is not UTF-8)") from None
    except (OSError, ValueError) as err:  # a name too long, a URL fsspec cannot open
        why = getattr(err, "strerror", None) or " ".join(str(err).split())
        raise ConfigError(f"{what} {shown} cannot be read: {clip(why, 300)}") from None
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{what} {shown} is larger than {MAX_CONFIG_BYTES // 2**20} MiB: a config is a few "
                          "kilobytes; put data in files it names")
    try:
        doc = yaml.load(text, Loader=_ConfigLoader)  # noqa: S506 - a SafeLoader
    except _Refused as err:  # valid YAML, refused all the same
        raise ConfigError(f"{what} {shown}: {_yaml_problem(err)}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{what} {shown} is not valid YAML: {_yaml_problem(err)}") from None
    except (ValueError, OverflowError) as err:  # an integer of thousands of digits
        raise ConfigError(f"{what} {shown} is not valid YAML: {clip(err, 300)}") from None
    check_values(doc, f"invalid {what} {shown}")
    return doc


def load_config(uri: str, storage_options: dict | None = None) -> RunConfig:
    """Load a YAML run config from a local path or any fsspec URL."""
    cfg = _paths_from_config_folder(parse_config(read_yaml(uri, "run config", storage_options), uri), uri)
    check_data_dir(cfg, uri)
    return cfg


def check_data_dir(cfg: RunConfig, source: str) -> None:
    """data.dir is a folder here (a missing one was passed over, and every data file came from the
    cache or a download instead). Checked where a config file is loaded to be run or planned, not
    where a stored run's config is read back (``halluscope report`` on another machine)."""
    folder = cfg.data.dir
    if folder is None:
        return
    path = Path(folder).expanduser()
    try:
        why = system_path_problem(path) or \
            (None if path.is_dir() else "is not a folder" if path.exists() else "does not exist")
    except OSError as err:
        why = f"cannot be used ({err.strerror or err})"
    if why:
        raise ConfigError(f"invalid run config {clip(source)}: data.dir: {clip(folder)} {why}")


def _paths_from_config_folder(cfg: RunConfig, uri: str) -> RunConfig:
    """Relative replay file paths and test-set folders are taken from a local config file's folder,
    not the working directory, so a config works wherever it is run from; the manifest records the
    absolute path."""
    if "://" in uri and not uri.startswith("file://"):
        return cfg
    folder = Path(uri.removeprefix("file://")).expanduser().absolute().parent

    def here(path: str) -> str:
        return path if url_scheme(path) or Path(path).expanduser().is_absolute() else os.path.normpath(folder / path)

    for m in cfg.models:
        if isinstance(m, ReplayModel) and m.params.path:
            m.params.path = here(m.params.path)
    for task, entry in cfg.testsets.items():
        cfg.testsets[task] = ({model: [here(u) for u in uris] for model, uris in entry.items()}
                              if isinstance(entry, dict) else [here(u) for u in entry])
    return cfg


def default_config() -> RunConfig:
    """The embedded demo: HALOGEN's recorded generations of 14 models on the program-verified tasks."""
    text = resources.files("halluscope").joinpath("configs/demo.yaml").read_text()
    return parse_config(yaml.safe_load(text), "halluscope/configs/demo.yaml (embedded default)")
