"""What every job that calls models shares (evaluation runs, the test-set job):
loading their YAML configs, starting or joining Ray, serving their models for the job, the code
version their manifests record, the collector setting of processes that score rows. Clients
and call counters are ``models.registry.client`` and ``models.usage.Usage``.
"""

from __future__ import annotations

import gc
import math
import os
import subprocess
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeGuard, TypeVar

import ray
from pydantic import BaseModel, ValidationError

from halluscope import __version__
from halluscope.config.checks import validation_message
from halluscope.config.reader import read_yaml
from halluscope.config.schema import ModelSpec, RaySpec, ServedModel
from halluscope.errors import ConfigError
from halluscope.quiet import quiet_ray
from halluscope.serving.served import placement

C = TypeVar("C", bound=BaseModel)


def parse_model(cls: type[C], data: object, source: str) -> C:
    """Validate a mapping; every problem is reported with its field path and the file."""
    if not isinstance(data, dict):
        raise ConfigError(f"invalid config {source}: expected a mapping at the top level")
    try:
        return cls.model_validate(data)
    except ValidationError as err:
        raise ConfigError(validation_message(err, source).replace("invalid run config", "invalid config")) from None


def load_yaml_config(cls: type[C], uri: str) -> C:
    """A config of type ``cls`` from a local path or any fsspec URL (s3://...)."""
    return parse_model(cls, read_yaml(uri, "config"), uri)


def conflicting_ids(specs: Iterable[ModelSpec]) -> list[str]:
    """Model ids configured twice with different settings (the role aside): their deployments and
    cache entries would be confused, so configs reject them."""
    seen: dict[str, dict] = {}
    clashes = set()
    for s in specs:
        body = s.model_dump(exclude={"role"})
        if seen.setdefault(s.id, body) != body:
            clashes.add(s.id)
    return sorted(clashes)


def check_api_keys(specs: Iterable[ModelSpec]) -> None:
    """Every API key variable the models name is set: checked in the driver before Ray starts, as
    a worker would find a missing one only at its first call."""
    for s in specs:
        env = s.secret_env
        if env and not os.environ.get(env):
            raise ConfigError(f"models: '{s.id}': params.api_key_env: environment variable {env} is not set")


def unique_specs(specs: Sequence[ModelSpec]) -> list[ModelSpec]:
    """One spec per model id; the same id configured twice must be the same model."""
    clashes = conflicting_ids(specs)
    if clashes:
        raise ConfigError(f"model id(s) {clashes} name two different models; give them distinct ids")
    first: dict[str, ModelSpec] = {}
    for s in specs:
        first.setdefault(s.id, s)
    return list(first.values())


def is_served(spec: ModelSpec) -> TypeGuard[ServedModel]:
    """Whether a run deploys the model on Ray Serve itself (hf, vllm, scripted unless in process)."""
    return spec.served


@contextmanager
def served(specs: Sequence[ModelSpec], scope: str | None = None) -> Iterator[tuple[dict, list[dict]]]:
    """Deploy the specs Ray Serve must host (scripted, hf, vllm), as apps of ``scope`` (a run id),
    and remove them afterwards.

    Yields the endpoints by model id and a list that, once the block ends, holds each
    deployment's resource seconds (for the costs summary)."""
    todo = [s for s in unique_specs(specs) if is_served(s)]
    deployments: list[dict] = []
    if not todo:
        yield {}, deployments
        return
    from halluscope.serving.app import deploy, shutdown

    started = time.time()
    endpoints = deploy(todo, scope=scope)
    try:
        yield endpoints, deployments
    finally:
        shutdown(endpoints)
        held = time.time() - started
        for s in todo:
            # the resource and units one replica holds: for vLLM every tensor/pipeline-parallel worker
            resource, units = placement(s)
            deployments.append({"model": s.id, "resource": resource,
                                "resource_seconds": held * s.replicas * units})


def init_ray(spec: RaySpec, cpus_needed: float = 0.0) -> bool:
    """Join the cluster named by the config or RAY_ADDRESS (set inside `ray job submit`), else
    start a local Ray sized for the pipeline's stages: at least ``cpus_needed`` logical CPUs (what
    the run's deployments and actors hold at once), so none of them waits for another's CPU, and
    ``spec.num_gpus`` logical GPUs when set. True when it started a local Ray."""
    if ray.is_initialized():
        return False
    quiet_ray()
    address = spec.address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, log_to_driver=False)
        return False
    # "local": a new Ray of its own, never the one another process started with `ray start` (Ray
    # joins the last of those, named in /tmp/ray/ray_current_cluster, when no address is given)
    ray.init(address="local", num_cpus=spec.num_cpus or max(4, os.cpu_count() or 1, math.ceil(cpus_needed)),
             num_gpus=spec.num_gpus, object_store_memory=spec.object_store_memory_mb * 1024 * 1024,
             include_dashboard=False, log_to_driver=False)
    return True


def fewer_collections() -> None:
    """For a process that turns rows into many short-lived dicts, lists and records. At CPython's
    default threshold (700 allocations) the cyclic collector runs every few rows and rescans the
    long-lived recorded answers and indexes each time: a quarter of the demo's CPU (53.4 s ->
    40.7 s in a single-process loop). Young objects are still collected, 70 times less often."""
    gc.set_threshold(50_000, 20, 100)


def code_version() -> str:
    here = Path(__file__).resolve().parent
    try:
        rev = subprocess.run(["git", "-C", str(here), "describe", "--always", "--dirty"],
                             capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        rev = ""
    return f"halluscope {__version__}" + (f" ({rev})" if rev else "")
