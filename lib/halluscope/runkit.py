"""What every job that calls models shares (evaluation runs, RAGTruth, FEWL, the test-set job):
loading their YAML configs, serving their models for the job, cached clients, accounting calls.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Iterable, Iterator, Sequence, TypeVar

from pydantic import BaseModel, ValidationError

from halluscope.config import ModelSpec, read_yaml, validation_message
from halluscope.cost.plan import placement
from halluscope.errors import ConfigError
from halluscope.models.base import Completion, ModelBackend
from halluscope.models.cache import CachedBackend
from halluscope.models.registry import live_backend, revision_of, sampling_of
from halluscope.storage.fs import Location

SERVED_BACKENDS = ("scripted", "hf", "vllm")
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


def fingerprint(doc: object) -> str:
    """16 hex chars of sha256 over canonical JSON: what makes two runs' results comparable."""
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]


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
        env = s.params.api_key_env if s.backend == "openai" else None
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


@contextmanager
def served(specs: Sequence[ModelSpec], http_port: int | None = None) -> Iterator[tuple[dict, list[dict]]]:
    """Deploy the specs Ray Serve must host (scripted, hf, vllm) and remove them afterwards.

    Yields the endpoints by model id and a list that, once the block ends, holds each
    deployment's resource seconds (for the costs summary)."""
    todo = [s for s in unique_specs(specs) if s.backend in SERVED_BACKENDS]
    deployments: list[dict] = []
    if not todo:
        yield {}, deployments
        return
    from halluscope.serving.app import deploy, shutdown

    started = time.time()
    endpoints = deploy(todo, http_port=http_port)
    try:
        yield endpoints, deployments
    finally:
        shutdown(endpoints)
        held = time.time() - started
        for s in todo:
            # the resource and units one replica holds: for vLLM every tensor/pipeline-parallel worker
            resource, units = placement(s)
            deployments.append({"model": s.id, "resource": resource,
                                "resource_seconds": held * s.params.serve.num_replicas * units})


def client(spec: ModelSpec, endpoints: dict, cache: Location | None, template: str) -> ModelBackend:
    """The model's backend, answering from the call cache first when there is one. ``template``
    names the prompt template, so a change of wording never reuses old answers."""
    backend = live_backend(spec, endpoints.get(spec.id))
    if cache is None:
        return backend
    return CachedBackend(backend, cache, revision_of(spec), template, sampling_of(spec).as_dict())


@dataclass
class Usage:
    """Calls of one model in one stage; answers from the call cache are counted apart and cost nothing."""

    calls: int = 0
    cached_calls: int = 0
    failed_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    def add(self, completions: Iterable[Completion]) -> "Usage":
        for c in completions:
            if c.extra.get("cached"):
                self.cached_calls += 1
                continue
            self.calls += 1
            self.failed_calls += c.error is not None
            self.input_tokens += c.input_tokens or 0
            self.output_tokens += c.output_tokens or 0
        return self

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(**{k: v + getattr(other, k) for k, v in asdict(self).items()})

    def as_dict(self) -> dict:
        return asdict(self)
