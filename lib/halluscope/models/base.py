"""The one interface every model backend implements.

A backend turns a batch of generation requests into completions. Failures are data, not
exceptions: a request that still fails after its retries comes back with ``error`` set, so a
Ray Data batch never dies because one call failed, and the error is counted downstream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from halluscope.contract.completion import Completion


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt to one model; ``task`` and ``item_id`` let a replay backend find its record.

    Role calls also carry ``key``, the content the prompt asks about, and ``subject``, the model
    under test whose output it is, so a recorded role model can find the answer on record."""

    task: str
    item_id: str
    prompt: str
    key: str = ""
    subject: str = ""


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
    """Implemented by every backend (replay, openai, ...)."""

    model_id: str

    def generate_batch(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Return one Completion per request, in order. Must not raise for per-call failures."""
        ...


def share_of(capacity: int, clients: int) -> int:
    """Requests one of ``clients`` clients keeps in flight, so that together they keep at most the
    endpoint's ``capacity`` (``max_concurrency``, or replicas x max_ongoing_requests) in flight."""
    return max(1, -(-capacity // max(1, clients)))
