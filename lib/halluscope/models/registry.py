"""Providers by backend name, and the one way the engine gets a model to call.

A provider package registers a factory under the ``halluscope.providers`` entry-point group
(pyproject.toml), named by the ``backend`` a model config gives: ``factory(spec, context)`` builds
the provider of one configured model. The registry loads them on first use, as the task registry
loads benchmarks; the engine never asks which backend a model has. ``client`` wraps the provider in
the engine's ``Model`` (retry, concurrency, timeout, breaker) and, when the run has a call cache
and the provider's answers are worth keeping, in the cache.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Protocol

from halluscope.config.schema import ModelSpec
from halluscope.errors import ConfigError
from halluscope.models.base import ModelBackend, SamplingParams
from halluscope.models.cache import CachedBackend
from halluscope.models.model import Model
from halluscope.models.provider import Provider

if TYPE_CHECKING:
    from halluscope.sources import DataResolver
    from halluscope.storage.fs import Location

GROUP = "halluscope.providers"


class Endpoint(Protocol):
    """A deployment this run serves (serving.app.ServedEndpoint), named here as serving/ sits above models/."""

    @property
    def app_name(self) -> str: ...

    @property
    def deployment_name(self) -> str: ...


@dataclass
class Context:
    """What building a provider may need besides its model's config: the deployment the run serves
    it on, how many clients of it run at once (each keeps its share of the endpoint's capacity),
    the run's data resolver, and answers the providers of one process share (``shared``)."""

    endpoint: Endpoint | None = None
    clients: int = 1
    resolver: DataResolver | None = None
    shared: dict[Any, Any] = field(default_factory=dict)


Factory = Callable[[Any, Context], Provider]


@lru_cache(maxsize=1)
def factories() -> dict[str, Factory]:
    found: dict[str, Factory] = {}
    for ep in sorted(entry_points(group=GROUP), key=lambda ep: ep.name):
        if ep.name in found:
            raise ConfigError(f"backend '{ep.name}' is registered twice under the entry-point group {GROUP!r}")
        found[ep.name] = ep.load()
    return found


def provider(spec: ModelSpec, context: Context) -> Provider:
    """The provider of one configured model."""
    factory = factories().get(spec.backend)
    if factory is None:
        raise ConfigError(f"model '{spec.id}': no provider for backend '{spec.backend}' is installed "
                          f"(registered: {', '.join(sorted(factories())) or 'none'}; entry-point group {GROUP!r})")
    return factory(spec, context)


def sampling_of(spec: ModelSpec) -> SamplingParams:
    s = getattr(spec.params, "sampling", None)
    return SamplingParams(temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_tokens) if s else SamplingParams()


def revision_of(spec: ModelSpec) -> str | None:
    return getattr(spec.params, "revision", None)


def client(spec: ModelSpec, context: Context, cache: Location | None, template: str) -> ModelBackend:
    """The model to call: its provider under the engine's model, answering from the call cache
    first when there is one. ``template`` names the prompt template, so a change of wording never
    reuses old answers."""
    model = Model(provider(spec, context))
    if cache is None or not model.provider.cached:
        return model
    return CachedBackend(model, cache, revision_of(spec), template, sampling_of(spec).as_dict())
