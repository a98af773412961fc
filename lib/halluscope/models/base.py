"""The one interface every model backend implements.

A backend turns a batch of generation requests into completions. Failures are data, not
exceptions: a request that still fails after its retries comes back with ``error`` set, so a
Ray Data batch never dies because one call failed, and the error is counted downstream.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

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
    """Implemented by every backend (replay, openai, ...). A backend that sends a request's
    ``answer_format`` to its model says so with a true ``constrains_answers`` attribute (read with
    ``constrains_answers``); the others ignore the format."""

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


T = TypeVar("T")


def run_blocking(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """The coroutine ``make()`` run to its end for a sync caller (a Ray Data worker, a task), also
    from inside a running loop: there on a thread of its own, as ``asyncio.run`` refuses to nest."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(make())).result()
