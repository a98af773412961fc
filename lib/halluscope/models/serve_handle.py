"""Backend for models served by this package's Ray Serve apps, called through a DeploymentHandle.

Prompts travel several to a call (``complete_batch``): one prompt per Serve call tops out near
320 calls/s on two cores, CPU-bound in Serve itself, while a chunk of prompts costs about the same
as one. Chunks go out concurrently (at most ``max_concurrent_chunks`` in flight, so queued chunks
do not time out behind a slow replica); prompts that come back with an error, and whole chunks
that fail or time out, are retried under ``halluscope.retry``'s policy (the one every client
shares). A timed-out call is cancelled, so the replica stops working on it.

Failures stay data (``Completion.error``) with one exception: when ``breaker_threshold`` chunk
calls in a row fail at the transport level (replica dead, app deleted, no answer in time), the
endpoint is down, and retrying every remaining prompt against it would only turn a run into
hours of errors; ``generate_batch`` then raises ``ServeEndpointDown`` (an ``EndpointDown`` and a
``RuntimeError``) naming the model and the app.

The backend holds plain configuration only: Ray can pickle it to workers, where the handle is
looked up on first use.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar, cast

from halluscope.contract.completion import Completion
from halluscope.errors import EndpointDown
from halluscope.models.base import GenerationRequest, SamplingParams, run_blocking
from halluscope.retry import Breaker, GaveUp, RetryPolicy, Transient

T = TypeVar("T")


class ServeEndpointDown(EndpointDown, RuntimeError):
    """The breaker's error: halluscope's ``EndpointDown`` (the CLI prints it plainly) and a RuntimeError."""


class ServeHandleBackend:
    """``ModelBackend`` over the ``complete_batch`` method of a Serve deployment."""

    def __init__(
        self,
        model_id: str,
        app_name: str,
        deployment_name: str,
        max_batch_prompts: int = 32,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        sampling: SamplingParams = SamplingParams(),
        *,
        max_concurrent_chunks: int = 8,
        breaker_threshold: int = 5,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 10.0,
    ) -> None:
        if max_batch_prompts < 1 or max_concurrent_chunks < 1 or breaker_threshold < 1:
            raise ValueError("max_batch_prompts, max_concurrent_chunks and breaker_threshold must be >= 1")
        if max_retries < 0 or timeout_s <= 0:
            raise ValueError("max_retries must be >= 0 and timeout_s > 0")
        self.model_id = model_id
        self.app_name = app_name
        self.deployment_name = deployment_name
        self.max_batch_prompts = max_batch_prompts
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.sampling = sampling
        self.max_concurrent_chunks = max_concurrent_chunks
        self.breaker_threshold = breaker_threshold
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self._retry_policy()  # checks the backoffs now, not on a worker
        self._handle: Any = None
        self._breaker = Breaker(breaker_threshold)

    def __getstate__(self) -> dict[str, Any]:
        # A handle belongs to the process that made it; each worker looks up its own.
        return {**self.__dict__, "_handle": None, "_breaker": Breaker(self.breaker_threshold)}

    def __repr__(self) -> str:
        return (f"ServeHandleBackend(model_id={self.model_id!r}, app_name={self.app_name!r}, "
                f"deployment_name={self.deployment_name!r}, max_batch_prompts={self.max_batch_prompts})")

    def generate_batch(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Sync entry point for Ray Data workers; works whether or not a loop is already running."""
        return run_blocking(lambda: self.agenerate(requests))

    async def agenerate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """All chunks concurrently; results in request order. Raises ``ServeEndpointDown`` when the
        circuit breaker trips, cancelling the chunks still running."""
        if not requests:
            return []
        handle = self._get_handle()
        prompts = [r.prompt for r in requests]
        results: list[Completion | None] = [None] * len(prompts)
        semaphore = asyncio.Semaphore(self.max_concurrent_chunks)
        size = self.max_batch_prompts
        chunks = [list(range(start, min(start + size, len(prompts)))) for start in range(0, len(prompts), size)]
        await gather_or_cancel([asyncio.create_task(self._run_chunk(handle, semaphore, prompts, results, chunk))
                                for chunk in chunks])
        return cast(list[Completion], results)  # every chunk task filled its slots

    def _down(self, reason: str) -> ServeEndpointDown:
        return ServeEndpointDown(f"endpoint of model '{self.model_id}' (Serve app '{self.app_name}', "
                                 f"deployment '{self.deployment_name}') is down: {reason}")

    def _get_handle(self) -> Any:
        if self._handle is None:
            from ray import serve

            for attempt in range(2):
                try:
                    self._handle = serve.get_deployment_handle(self.deployment_name, app_name=self.app_name)
                    break
                except Exception as exc:  # noqa: BLE001 - any lookup failure means nothing to call
                    # a reused worker may hold the client of a Serve stopped since (serve.shutdown and
                    # a new Serve in the same Ray): drop it once and look again
                    if attempt == 0 and forget_serve_client():
                        continue
                    raise self._down(f"no such deployment ({type(exc).__name__}: {exc})") from exc
        return self._handle

    async def _run_chunk(self, handle: Any, semaphore: asyncio.Semaphore, prompts: list[str],
                         results: list[Completion | None], indices: list[int]) -> None:
        """Send one chunk, then resend whatever failed of it, under the retry policy."""
        pending = indices
        last_error: dict[int, str] = {}
        latency_s = 0.0

        async def attempt(number: int) -> None:
            nonlocal pending, latency_s
            async with semaphore:
                started = time.perf_counter()
                try:
                    items = await self._call(handle, [prompts[i] for i in pending])
                except Exception as exc:  # noqa: BLE001 - every transport failure counts the same
                    self._transport_failed(exc)
                    reason = describe_error(exc)
                    last_error.update((i, reason) for i in pending)
                    raise Transient(reason) from None
                finally:
                    latency_s = time.perf_counter() - started
            self._breaker.answered()
            retry = []
            for i, item in zip(pending, items):
                if item.get("error"):
                    last_error[i] = str(item["error"])
                    retry.append(i)
                else:
                    results[i] = Completion(text=item["text"], input_tokens=item.get("input_tokens"),
                                            output_tokens=item.get("output_tokens"), latency_s=latency_s,
                                            attempts=number)
            pending = retry
            if pending:
                raise Transient(f"{len(pending)} prompts answered with an error")

        try:
            await self._retry_policy().arun(attempt)
        except GaveUp as out:
            for i in pending:
                results[i] = Completion(text=None, latency_s=latency_s, attempts=out.attempts,
                                        error=f"{last_error[i]} (after {out.attempts} attempts)")

    async def _call(self, handle: Any, batch: list[str]) -> list[dict]:
        response = handle.complete_batch.remote(batch, self.sampling.as_dict())
        items = await answer_within(response, _awaitable(response), self.timeout_s)
        if not isinstance(items, list) or len(items) != len(batch):
            raise ValueError(f"malformed answer: expected {len(batch)} results, got {type(items).__name__}"
                             f"{f' of {len(items)}' if isinstance(items, list) else ''}")
        return items

    def _retry_policy(self) -> RetryPolicy:
        return RetryPolicy(self.max_retries, self.backoff_base_s, self.backoff_max_s)

    def _transport_failed(self, exc: Exception) -> None:
        """Count a failed call; trip the breaker once ``breaker_threshold`` fail in a row."""
        if self._breaker.failed():
            raise self._down(f"{self._breaker.in_a_row} calls in a row failed, the last with "
                             f"{describe_error(exc)}") from exc


async def _awaitable(response: Any) -> Any:
    """``asyncio.wait_for`` wants a coroutine; a DeploymentResponse is only awaitable."""
    return await response


async def answer_within(response: Any, answer: Awaitable[T], timeout_s: float) -> T:
    """What a handle call (``response``) brings back through ``answer``, or ``TimeoutError`` after
    ``timeout_s``: the call is then cancelled, freeing the replica from a call nobody waits for."""
    try:
        return await asyncio.wait_for(answer, timeout=timeout_s)
    except asyncio.TimeoutError:
        response.cancel()
        raise TimeoutError(f"no answer within {timeout_s:g} s") from None


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


def describe_error(exc: BaseException) -> str:
    """The exception's type and the first line of its text, for an error column."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


def forget_serve_client() -> bool:
    """Drop this process's cached Serve client (Ray has no public call for it); False when this
    Ray has no such private function, and nothing was dropped."""
    from ray.serve import context

    disconnect = getattr(context, "_disconnect", None)
    if disconnect is None:
        return False
    disconnect()
    return True
