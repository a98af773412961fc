"""What a served model holds while it is deployed: the resource and units of one replica.

Kept apart from ``serving.app`` (which imports Ray Serve) so the cost estimate and the jobs'
resource accounting read it without starting anything."""

from __future__ import annotations

from typing import TYPE_CHECKING

from halluscope.config.schema import HFModel, ScriptedModel, VLLMModel
from halluscope.serving.vllm import REPLICA_CPUS, worker_bundle

if TYPE_CHECKING:
    from halluscope.config.schema import ModelSpec


def cpus_of(spec: ModelSpec) -> float:
    """Logical CPUs one replica holds: a vLLM replica's workers' and its front end's
    (``REPLICA_CPUS``, in the first bundle), another model's ``serve.num_cpus``."""
    if isinstance(spec, VLLMModel):
        p = spec.params
        return p.tensor_parallel_size * p.pipeline_parallel_size * worker_bundle(spec)["CPU"] + REPLICA_CPUS
    return spec.params.serve.num_cpus  # type: ignore[union-attr]


def placement(spec: ModelSpec) -> tuple[str, float]:
    """(resource, units per replica) a served model holds: GPUs of its accelerator type ("GPU"
    when unnamed) or CPU cores. vLLM runs tensor x pipeline parallel workers per replica, each
    with the worker bundle serving/vllm.py places."""
    if isinstance(spec, VLLMModel):
        p = spec.params
        workers = p.tensor_parallel_size * p.pipeline_parallel_size
        bundle = worker_bundle(spec)
        if "GPU" in bundle:
            return p.accelerator_type or "GPU", workers * bundle["GPU"]
        return "CPU", cpus_of(spec)
    if not isinstance(spec, (ScriptedModel, HFModel)):
        raise ValueError(f"model '{spec.id}': backend {spec.backend} is not served by a run, so holds no replica")
    s = spec.params.serve
    return ("GPU", s.num_gpus) if s.num_gpus > 0 else ("CPU", s.num_cpus)
