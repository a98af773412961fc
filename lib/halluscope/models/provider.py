"""What a model provider writes: one call, and which of its failures are worth another try.

A provider (an OpenAI-compatible endpoint, a Serve deployment, a vLLM engine, a recorded file, a
stand-in) knows how to send one call of at most ``limits.prompts_per_call`` prompts and how to read
the answer. Everything around the call is the engine's ``Model`` (``models/model.py``), written once
for every provider: the retry policy, how many calls are in flight, the timeout that cancels a
call, the breaker that stops a run against a dead endpoint, the event loop, the call cache.

A remote provider's ``call`` answers each prompt with a ``Completion`` (final: text, or an error
no retry would change, such as HTTP 400) or a ``Retry`` (the endpoint answered, busy: 429, 5xx, a
replica that raised). A call that got no answer at all (connection refused, a dead replica, an app
that is gone) raises ``Unanswered``: those count toward the breaker, answers reset it. A local
provider (answers read from storage or computed in process) cannot fail that way and implements
``answer`` instead; the model calls it directly.

Providers are built from their model's config in the driver and pickled to Ray workers: what
belongs to one process (a client, a handle) is opened by ``open`` on the model's event loop and
listed in ``LIVE``, so it is dropped when the provider is pickled.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from pydantic import BaseModel

from halluscope.config.schema import BillingBasis
from halluscope.contract.completion import Completion
from halluscope.errors import ModelDown
from halluscope.models.base import GenerationRequest

if TYPE_CHECKING:
    from halluscope.sources import DataResolver


class Unanswered(Exception):
    """A call that brought no answer back (timeout, connection, dead replica): retried, and counted
    toward the breaker."""


@dataclass(frozen=True)
class Retry:
    """A prompt the endpoint answered with a failure worth another try; ``retry_after_s`` is the
    wait it asked for, if any."""

    reason: str
    retry_after_s: float | None = None


@dataclass(frozen=True)
class CallLimits:
    """How the model calls its provider: ``calls_in_flight`` at once (this client's share of the
    endpoint's capacity), ``prompts_per_call`` to a call, each answered within ``timeout_s`` or
    cancelled; ``max_retries`` more attempts with backoff; ``breaker_threshold`` unanswered calls
    in a row stop the run."""

    calls_in_flight: int = 16
    prompts_per_call: int = 1
    timeout_s: float = 60.0
    max_retries: int = 4
    backoff_base_s: float = 0.5
    backoff_max_s: float = 20.0
    breaker_threshold: int = 10

    def __post_init__(self) -> None:
        for name in ("calls_in_flight", "prompts_per_call", "breaker_threshold"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("max_retries", "backoff_base_s", "backoff_max_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")


class Provider(ABC):
    """One model's calls. ``constrains_answers``: a request's answer format reaches the model (so
    it changes the answer, and keys its cached copy). ``cached``: its answers go to the run's call
    cache (not those read back from a record, which cost nothing and depend on more than the prompt)."""

    model_id: str
    constrains_answers: bool = False
    cached: bool = True
    LIVE: ClassVar[tuple[str, ...]] = ()  # per-process state, opened by ``open`` and never pickled

    def __getstate__(self) -> dict[str, Any]:
        return {k: (None if k in self.LIVE else v) for k, v in self.__dict__.items()}

    def where(self) -> str:
        """Where the model answers, for the error that says it is down."""
        return f"of model '{self.model_id}'"

    def down(self, reason: str) -> ModelDown:
        return ModelDown(f"endpoint {self.where()} is down: {reason}")


class RemoteProvider(Provider):
    """A provider the model calls over a network or Ray: fails in ways a retry can mend."""

    limits: CallLimits

    async def open(self) -> None:
        """Set up what this process needs to call (a client, a handle), on the model's loop. A
        model that cannot be reached at all raises ``self.down(...)`` here."""

    @abstractmethod
    async def call(self, requests: Sequence[GenerationRequest]) -> list[Completion | Retry]:
        """One answer per request, in order; raises ``Unanswered`` when nothing came back. A call
        the model cancels (its timeout) should cancel the remote work it started."""


class LocalProvider(Provider):
    """A provider that answers in process (recorded, staged, a stand-in): nothing to retry."""

    @abstractmethod
    def answer(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """One completion per request, in order; a request it has no answer for is an error
        completion, never an exception."""


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


@dataclass(frozen=True)
class ProviderKind:
    """What a provider package registers for its backend: ``build`` makes the provider of one
    model's config; ``predict``, for a provider whose answers follow from the prompt without a
    call (a stand-in's rules), gives that answer, so the estimate counts its tokens exactly.

    A provider installed beside halluscope also declares its config: ``params``, the pydantic
    model its ``params`` section is validated with, and ``billing``, how its calls are paid (as
    ``config.schema``'s ``BillingBasis``: ``tokens`` are priced by the price table under
    ``params.model`` or the model's id). The built-in kinds' configs are ``config.schema``'s."""

    build: Callable[[Any, Context], Provider]
    predict: Callable[[Any], Callable[[str], str]] | None = None
    # whether a config's provider sends a request's answer format (its ``constrains_answers``),
    # known before it is built: the estimate keys cached role calls by it
    constrains: Callable[[Any], bool] = lambda spec: False
    params: type[BaseModel] | None = None
    billing: BillingBasis = "tokens"
