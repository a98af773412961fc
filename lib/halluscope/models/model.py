"""The engine's model: every provider called the same way, with retry, concurrency, timeout, breaker.

Requests of a batch that ask the same (prompt and answer format) are sent once and share the
answer. A batch of requests is cut into calls of the provider's ``prompts_per_call``; the calls go out
concurrently, at most ``calls_in_flight`` at once. Of a call, the prompts answered for good are
kept and the rest (``Retry``, or all of them when the call raised ``Unanswered`` or timed out) are
sent again under ``halluscope.retry``'s one policy, the wait outside the concurrency limit. A
timed-out call is cancelled. Out of attempts, a prompt's completion carries the last reason as
its error: failures are data, so one bad call never fails a Ray Data batch. The one exception:
``breaker_threshold`` calls in a row without any answer mean the endpoint is down, and the batch
raises ``ModelDown`` instead of turning the rest of a run into hours of errors.

Each process keeps one event loop for its models (``process_loop``), on a thread of its own, and
each model opens its provider once per process: a client or handle lives as long as the worker,
not one batch.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Coroutine, Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar, cast

from halluscope.contract.completion import Completion
from halluscope.models.base import GenerationRequest
from halluscope.models.provider import LocalProvider, Provider, RemoteProvider, Retry, Unanswered
from halluscope.records import gave_up
from halluscope.retry import Breaker, GaveUp, RetryPolicy, Transient

T = TypeVar("T")

_loop_lock = threading.Lock()
_loop: tuple[int, asyncio.AbstractEventLoop] | None = None  # (pid, loop): a forked child starts its own


def process_loop() -> asyncio.AbstractEventLoop:
    """This process's event loop for model calls, running on a daemon thread of its own."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop[0] != os.getpid() or _loop[1].is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="halluscope-models", daemon=True).start()
            _loop = (os.getpid(), loop)
        return _loop[1]


def run_blocking(coroutine: Coroutine[Any, Any, T]) -> T:
    """The coroutine run to its end on the process loop, for a sync caller (a Ray Data worker, a
    task, the driver), also one called from inside another running loop."""
    loop = process_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        coroutine.close()
        raise RuntimeError("run_blocking called from the model loop itself: await the model instead")
    return asyncio.run_coroutine_threadsafe(coroutine, loop).result()


def describe_error(exc: BaseException) -> str:
    """The exception's type and the first line of its text, for an error column."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


@dataclass
class _Opened:
    """What a model holds in one process and loop: the provider opened there, the limit and the count."""

    loop: asyncio.AbstractEventLoop
    in_flight: asyncio.Semaphore
    breaker: Breaker


class Model:
    """``ModelBackend`` over a provider: the one place calls are retried, bounded, timed and counted."""

    def __init__(self, provider: Provider) -> None:
        self.provider = provider
        self.model_id = provider.model_id
        self.constrains_answers = provider.constrains_answers
        self._opened: _Opened | None = None
        self._opening: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        if isinstance(provider, RemoteProvider):
            lim = provider.limits
            self._policy = RetryPolicy(lim.max_retries, lim.backoff_base_s, lim.backoff_max_s)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_opened": None, "_opening": None}

    def __repr__(self) -> str:
        return f"Model({self.provider!r})"

    @property
    def by_key(self) -> Callable[[Sequence[tuple[str, str]]], list[Completion]] | None:
        """The lookup of a provider that answers by content key and model under test (answers on
        record), so a caller need not build a request per call; None for the others."""
        return getattr(self.provider, "answer_keys", None)

    def generate_batch(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """One completion per request, in order. Raises ``ModelDown`` when the endpoint is down, and a
        set-up error (an API key not set) at once; every other failure is the completion's error."""
        if isinstance(self.provider, LocalProvider):
            return self.provider.answer(requests)
        if not requests:
            return []
        return run_blocking(self.agenerate(requests))

    async def agenerate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        if isinstance(self.provider, LocalProvider):
            return self.provider.answer(requests)
        if not requests:
            return []
        opened = await self._open()
        first = first_asks([(r.prompt, r.answer_format) for r in requests])
        unique = sorted(set(first))
        size = cast(RemoteProvider, self.provider).limits.prompts_per_call
        results: list[Completion | None] = [None] * len(requests)
        calls = [unique[i:i + size] for i in range(0, len(unique), size)]
        tasks = [asyncio.create_task(self._send(opened, requests, results, call)) for call in calls]
        await gather_or_cancel(tasks)
        return spread(first, results)

    async def _open(self) -> _Opened:
        """The provider opened in this loop (again, when the model is used from a new loop)."""
        loop = asyncio.get_running_loop()
        if self._opened is None or self._opened.loop is not loop:
            if self._opening is None or self._opening[0] is not loop:
                self._opening = (loop, asyncio.Lock())
            async with self._opening[1]:
                if self._opened is None or self._opened.loop is not loop:
                    provider = cast(RemoteProvider, self.provider)
                    await provider.open()
                    self._opened = _Opened(loop, asyncio.Semaphore(provider.limits.calls_in_flight),
                                           Breaker(provider.limits.breaker_threshold))
        return self._opened

    async def _send(self, opened: _Opened, requests: Sequence[GenerationRequest],
                    results: list[Completion | None], indices: list[int]) -> None:
        """One call of these requests, then again with those that may still be answered."""
        provider = cast(RemoteProvider, self.provider)
        pending = indices
        reasons: dict[int, str] = {}
        latency_s = 0.0

        async def attempt(number: int) -> None:
            nonlocal pending, latency_s
            async with opened.in_flight:
                started = time.perf_counter()
                try:
                    async with asyncio.timeout(provider.limits.timeout_s):  # in this task: cancels the call
                        answers = await provider.call([requests[i] for i in pending])
                    if len(answers) != len(pending):
                        raise Unanswered(f"malformed answer: {len(answers)} answers to {len(pending)} prompts")
                except (TimeoutError, Unanswered) as exc:
                    reason = (f"no answer within {provider.limits.timeout_s:g} s"
                              if isinstance(exc, asyncio.TimeoutError) else str(exc))
                    self._unanswered(opened.breaker, reason)
                    reasons.update((i, reason) for i in pending)
                    raise Transient(reason) from None
                finally:
                    latency_s = time.perf_counter() - started
            opened.breaker.answered()
            again, waits = [], []
            for i, answer in zip(pending, answers):
                if isinstance(answer, Retry):
                    reasons[i] = answer.reason
                    again.append(i)
                    waits.append(answer.retry_after_s)
                else:
                    answer.latency_s, answer.attempts = answer.latency_s or latency_s, number
                    results[i] = answer
            pending = again
            if pending:
                asked = [w for w in waits if w is not None]
                raise Transient(f"{len(pending)} prompts to answer again", max(asked) if asked else None)

        try:
            await self._policy.arun(attempt)
        except GaveUp as out:
            for i in pending:
                results[i] = Completion(text=None, latency_s=latency_s, attempts=out.attempts,
                                        error=gave_up(reasons[i], out.attempts))

    def _unanswered(self, breaker: Breaker, reason: str) -> None:
        """Count a call nothing came back to; stop the model when ``breaker_threshold`` did in a row."""
        if breaker.failed():
            raise self.provider.down(f"{breaker.in_a_row} calls in a row got no answer (last: {reason})")


def first_asks(keys: Sequence[Hashable]) -> list[int]:
    """For each ask, the first of the batch asking the same (equal keys): one call answers all of
    them. A rule set's twin tasks ask the same prompts, FEWL's neighbour questions repeat across
    rows: asking each again would multiply the bill and score several samples of one question."""
    seen: dict[Hashable, int] = {}
    return [seen.setdefault(k, i) for i, k in enumerate(keys)]


def spread(first: Sequence[int], answers: Mapping[int, Completion] | Sequence[Completion | None]) -> list[Completion]:
    """Each ask's answer (``answers`` by the index of the asks that called): its own where it asked
    first, else a copy of the first's with no call of its own, counted as a cache hit (a failure
    stays a failure: the row is asked again when the run resumes)."""
    out = []
    for i, f in enumerate(first):
        answer = cast(Completion, answers[f])
        out.append(answer if i == f else replace(answer, latency_s=0.0, attempts=0, cached=True))
    return out


async def gather_or_cancel(tasks: list[asyncio.Task[T]]) -> list[T]:
    """The tasks' results in order; when one raises (the breaker tripped), the rest are cancelled
    before the error goes on."""
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise

