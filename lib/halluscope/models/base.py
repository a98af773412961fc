"""What the engine hands a model and gets back: requests, sampling, and the batch interface.

A model (``models/model.py`` over a provider, perhaps behind the call cache) turns a batch of
generation requests into completions. Failures are data, not exceptions: a request that still
fails after its retries comes back with ``error`` set, so a Ray Data batch never dies because one
call failed, and the error is counted downstream.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from halluscope.contract.completion import Completion
from halluscope.contract.roles import AnswerFormat


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt to one model; ``task`` and ``item_id`` let a replay backend find its record.

    Role calls also carry ``key``, the content the prompt asks about, and ``subject``, the model
    under test whose output it is, so a recorded role model can find the answer on record, and
    ``answer_format``, the form a backend that constrains answers asks its model for."""

    task: str
    item_id: str
    prompt: str
    key: str = ""
    subject: str = ""
    answer_format: AnswerFormat | None = None


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 512
    stop: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        return {"temperature": self.temperature, "top_p": self.top_p,
                "max_tokens": self.max_tokens, "stop": list(self.stop)}


class ModelBackend(Protocol):
    """What the stages call: the engine's ``Model``, or the call cache in front of one. One that
    sends a request's ``answer_format`` to its model says so with a true ``constrains_answers``
    attribute (read with ``constrains_answers``); the others ignore the format."""

    model_id: str

    def generate_batch(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Return one Completion per request, in order. Must not raise for per-call failures."""
        ...


def constrains_answers(backend: object) -> bool:
    """Whether the backend has its model answer in a request's ``answer_format``: only then does
    the format change the answer, and only then is it part of the call-cache key."""
    return bool(getattr(backend, "constrains_answers", False))


def share_of(capacity: int, clients: int) -> int:
    """Requests one of ``clients`` clients keeps in flight, so that together they keep at most the
    endpoint's ``capacity`` (``max_concurrency``, or replicas x max_ongoing_requests) in flight."""
    return max(1, -(-capacity // max(1, clients)))
