"""Providers by backend name, and the one way the engine gets a model to call.

A provider package registers a ``ProviderKind`` under the ``halluscope.providers`` entry-point
group (pyproject.toml), named by the ``backend`` a model config gives: its ``build(spec, context)``
makes the provider of one configured model. The registry loads them on first use, as the task
registry loads benchmarks; the engine never asks which backend a model has, only the kind what it
knows (``predicted``) and the model's config what it declares (``served``, ``billing``, ...).
``client`` wraps the provider in the engine's ``Model`` (retry, concurrency, timeout, breaker) and,
when the run has a call cache and the provider's answers are worth keeping, in the cache.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from halluscope.config.schema import ModelSpec
from halluscope.errors import ConfigError
from halluscope.models.base import ModelBackend, SamplingParams
from halluscope.models.cache import GENERATION_TEMPLATE, CachedBackend, call_key, read_calls
from halluscope.models.model import Model
from halluscope.models.provider import Context, Provider, ProviderKind
from halluscope.provider_registry import GROUP, kind_named

if TYPE_CHECKING:
    from halluscope.storage.fs import Location

def kind_of(spec: ModelSpec) -> ProviderKind:
    kind = kind_named(spec.backend, spec.id)
    if not isinstance(kind, ProviderKind):
        raise ConfigError(f"backend '{spec.backend}' (entry-point group {GROUP!r}) registers "
                          f"{type(kind).__name__}, not a ProviderKind")
    return kind


def provider(spec: ModelSpec, context: Context) -> Provider:
    """The provider of one configured model."""
    return kind_of(spec).build(spec, context)


def constrains_answers(spec: ModelSpec) -> bool:
    """Whether the model's provider sends its calls' answer formats (which then key its cached answers)."""
    return kind_of(spec).constrains(spec)


def predicted(spec: ModelSpec) -> Callable[[str], str] | None:
    """The model's answer to a prompt, known without calling it; None for a model that must be asked."""
    predict = kind_of(spec).predict
    return None if predict is None else predict(spec)


def sampling_of(spec: ModelSpec) -> SamplingParams:
    s = getattr(spec.params, "sampling", None)
    return SamplingParams(temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_tokens) if s else SamplingParams()


def revision_of(spec: ModelSpec) -> str | None:
    return getattr(spec.params, "revision", None)


def client(spec: ModelSpec, context: Context, cache: Location | None, template: str,
           misses: ModelBackend | None = None) -> ModelBackend:
    """The model to call: its provider under the engine's model, answering from the call cache
    first when there is one. ``template`` names the prompt template, so a change of wording never
    reuses old answers. ``misses``: what answers the cache's misses in the model's place (a model
    the run did not deploy, since the cache held every answer left)."""
    if misses is None:
        model = Model(provider(spec, context))
        if cache is None or not model.provider.cached:
            return model
        misses = model
    assert cache is not None, "a model answered in its place is answered from the call cache"
    return CachedBackend(misses, cache, revision_of(spec), template, sampling_of(spec).as_dict())


def cached_prompts(spec: ModelSpec, cache: Location, prompts: Iterable[str]) -> set[str]:
    """The prompts whose generation by ``spec`` the call cache holds (read as the run reads it)."""
    keys = read_calls(cache, spec.id).entries.keys()
    sampling, revision = sampling_of(spec).as_dict(), revision_of(spec)
    return {p for p in prompts if call_key(spec.id, revision, GENERATION_TEMPLATE, p, sampling) in keys}
