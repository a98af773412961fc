"""The engines of a run's shared services (``cluster.service``'s Serve configs: the model each
serves, its tensor parallelism, its replica bounds and autoscaling target, its dtype), sized as
vLLM models of the throughput table, and the check that the run's calls to them stay within what
the service's nodes serve."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from halluscope.config.schema import RunConfig, ServiceHold, VLLMModel
from halluscope.errors import ConfigError
from halluscope.resolve.nodes import service_holds


@dataclass(frozen=True)
class Engine:
    """A shared service's engine (``cluster.service``): the model it serves, sized as a vLLM model."""

    service: str
    hold: ServiceHold
    spec: VLLMModel


def service_engines(cfg: RunConfig) -> dict[str, Engine]:
    """The engines of the run's shared services by the model name they serve (``api_model``),
    where ``cluster.service`` describes them and a shared service lists a model they serve."""
    by_api = {m.api_model: s.name for s in cfg.costs.shared_services for m in cfg.models
              if m.id in s.models and m.billing == "tokens"}
    out = {}
    for hold in service_holds(cfg.cluster) if cfg.cluster.service else []:
        if hold.name in by_api:
            spec = VLLMModel.model_validate({"id": hold.name, "backend": "vllm", "params": {
                "model_source": hold.model_source or hold.name, "accelerator_type": hold.accelerator,
                "tensor_parallel_size": hold.gpus, "engine_kwargs": hold.engine_kwargs,
                "serve": {"num_replicas": hold.replicas}}})
            out[hold.name] = Engine(by_api[hold.name], hold, spec)
    return out


def check_service_load(cfg: RunConfig) -> None:
    """ConfigError when the run would keep more calls in flight to a shared service's engine (its
    every model on that engine, every Evaluate actor's share summed: ``max_concurrency``) than the
    engine takes at its maximum replicas below its autoscaling target: beyond that its autoscaler
    asks for a replica the nodes (and the Kueue quota beside them) do not have."""
    problems = []
    for name, engine in service_engines(cfg).items():
        hold = engine.hold
        if hold.target_ongoing_requests is None:
            continue
        callers = [m for m in cfg.models if m.api_model == name and m.billing == "tokens"]
        in_flight = sum(cast(int, getattr(m.params, "max_concurrency", 0)) for m in callers)
        capacity = hold.most * hold.target_ongoing_requests
        if in_flight > capacity:
            who = " + ".join(f"{m.id} {getattr(m.params, 'max_concurrency', 0)}" for m in callers)
            problems.append(f"the run keeps {in_flight} calls in flight to {name} ({who}: params.max_concurrency) and "
                            f"the service's engine takes {capacity} at most ({hold.most} replica(s) x "
                            f"target_ongoing_requests {hold.target_ongoing_requests}) before it asks for a replica "
                            "its nodes do not have; lower max_concurrency to share those")
    if problems:
        raise ConfigError("cluster.service: " + "; ".join(problems))
