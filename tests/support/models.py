"""The engine's model over a provider built the way a test wants it: small backoffs, short timeouts."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from halluscope.models.model import Model
from halluscope.models.openai_http import OpenAIProvider
from halluscope.models.provider import CallLimits, RemoteProvider

_LIMITS = {f.name for f in fields(CallLimits)}


def limited(provider: RemoteProvider, **limits: Any) -> Model:
    """The provider under the engine's model, with these of its limits changed."""
    provider.limits = replace(provider.limits, **limits)
    return Model(provider)


def openai_model(**kw: Any) -> Model:
    """An OpenAI provider from one set of keywords: its own, and its limits' (``max_concurrency``
    as the config names ``calls_in_flight``)."""
    if "max_concurrency" in kw:
        kw["calls_in_flight"] = kw.pop("max_concurrency")
    limits = CallLimits(**{k: kw.pop(k) for k in list(kw) if k in _LIMITS})
    return Model(OpenAIProvider(limits=limits, **kw))
