"""Backend for any OpenAI-compatible chat-completions endpoint (vLLM, Ray Serve, hosted APIs).

Calls are made concurrently with one ``httpx.AsyncClient`` per batch, bounded by a semaphore.
Transient failures (429, 5xx, timeouts, dropped connections) are retried with exponential
backoff and full jitter; everything else becomes an error ``Completion`` so one bad call never
fails a Ray Data batch. The backend holds only plain configuration, so Ray can pickle it and
ship it to workers; clients, semaphores and the API key are created per call of ``agenerate``.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import httpx

from halluscope.errors import EndpointDown
from halluscope.models.base import Completion, GenerationRequest, SamplingParams

# Longest server text quoted in an error; enough to diagnose, short enough for a results table.
_ERROR_SNIPPET_CHARS = 200


class OpenAIBackend:
    """``ModelBackend`` that sends each prompt as one user message to ``{base_url}/chat/completions``."""

    def __init__(
        self,
        *,
        model_id: str,
        base_url: str,
        model: str | None = None,
        api_key_env: str | None = None,
        max_concurrency: int = 16,
        timeout_s: float = 60.0,
        max_retries: int = 4,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 20.0,
        breaker_threshold: int = 10,
        sampling: SamplingParams = SamplingParams(),
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self.model_id = model_id
        self.base_url = base_url.rstrip("/")
        self.model = model or model_id
        # Only the variable's name is kept: the key is read on the worker at call time, so it is
        # never pickled, logged or shown in repr.
        self.api_key_env = api_key_env
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        # this many connection failures or timeouts in a row, with no answer in between, mean the
        # endpoint is down: the stage fails with a clear message instead of recording errors forever
        self.breaker_threshold = breaker_threshold
        self.sampling = sampling

    def __repr__(self) -> str:
        return (f"OpenAIBackend(model_id={self.model_id!r}, base_url={self.base_url!r}, "
                f"model={self.model!r}, api_key_env={self.api_key_env!r}, "
                f"max_concurrency={self.max_concurrency})")

    def generate_batch(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Sync entry point for Ray Data workers; works whether or not a loop is already running."""
        try:
            asyncio.get_running_loop()
            in_loop = True
        except RuntimeError:
            in_loop = False
        if not in_loop:
            return asyncio.run(self.agenerate(requests))
        # asyncio.run refuses to nest inside a running loop, so give the batch its own thread.
        with ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(lambda: asyncio.run(self.agenerate(requests))).result()

    async def agenerate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Run all requests concurrently (at most ``max_concurrency`` in flight); keeps order."""
        if not requests:
            return []
        headers = {}
        api_key = self._api_key()
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        limits = httpx.Limits(max_connections=self.max_concurrency,
                              max_keepalive_connections=self.max_concurrency)
        semaphore = asyncio.Semaphore(self.max_concurrency)
        breaker = _Breaker(self.breaker_threshold, f"endpoint {self.base_url} of model '{self.model_id}'")
        async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(self.timeout_s),
                                     limits=limits) as client:
            return list(await asyncio.gather(
                *(self._complete(client, semaphore, breaker, req.prompt, api_key) for req in requests)))

    def _api_key(self) -> str | None:
        """Read the key from the named variable; a missing one is a setup error, so it raises."""
        if self.api_key_env is None:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise RuntimeError(f"environment variable {self.api_key_env} (API key) is not set")
        return key

    def _request_body(self, prompt: str) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model,
                                "messages": [{"role": "user", "content": prompt}],
                                **self.sampling.as_dict()}
        if not body["stop"]:
            del body["stop"]  # some servers reject an empty stop list
        return body

    async def _complete(self, client: httpx.AsyncClient, semaphore: asyncio.Semaphore, breaker: "_Breaker",
                        prompt: str, api_key: str | None) -> Completion:
        """One request with retries; the backoff sleep happens outside the semaphore."""
        url = f"{self.base_url}/chat/completions"
        body = self._request_body(prompt)
        total_attempts = self.max_retries + 1
        reason = ""
        for attempt in range(1, total_attempts + 1):
            retry_after: float | None = None
            async with semaphore:
                started = time.perf_counter()
                try:
                    response = await client.post(url, json=body)
                except httpx.TimeoutException:
                    # an endpoint that accepts connections but never answers is as down as one
                    # that refuses them: both count toward the breaker
                    reason = "timeout"
                    breaker.failed(f"no answer within params.timeout_s={self.timeout_s:g} s")
                except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
                    reason = f"connection error ({type(exc).__name__})"
                    breaker.failed(reason)
                except httpx.HTTPError as exc:
                    return Completion(text=None, attempts=attempt,
                                      error=f"request failed ({type(exc).__name__})")
                else:
                    breaker.answered()
                    latency_s = time.perf_counter() - started
                    status = response.status_code
                    if 200 <= status < 300:
                        return _parse_completion(response, latency_s, attempt)
                    if status != 429 and status < 500:
                        snippet = _redact(response.text[:_ERROR_SNIPPET_CHARS], api_key)
                        return Completion(text=None, attempts=attempt,
                                          error=f"HTTP {status}: {snippet}")
                    reason = f"HTTP {status}"
                    retry_after = _retry_after_s(response)
            if attempt < total_attempts:
                await asyncio.sleep(self._backoff_s(attempt, retry_after))
        return Completion(text=None, attempts=total_attempts,
                          error=f"{reason} after {total_attempts} attempts")

    def _backoff_s(self, attempt: int, retry_after: float | None) -> float:
        """Server's Retry-After if given, else full jitter over an exponentially growing cap."""
        if retry_after is not None:
            return min(retry_after, self.backoff_max_s)
        return random.uniform(0.0, min(self.backoff_max_s, self.backoff_base_s * 2 ** (attempt - 1)))


class _Breaker:
    """Counts connection failures and timeouts in a row across the concurrent calls of one batch."""

    def __init__(self, threshold: int, what: str) -> None:
        self.threshold, self.what, self.in_a_row = threshold, what, 0

    def failed(self, reason: str) -> None:
        self.in_a_row += 1
        if self.in_a_row >= self.threshold:
            raise EndpointDown(f"{self.what} is down: {self.in_a_row} connection failures or timeouts in a "
                               f"row (last: {reason})")

    def answered(self) -> None:
        self.in_a_row = 0


def _retry_after_s(response: httpx.Response) -> float | None:
    """Retry-After in seconds; the HTTP-date form is ignored and ordinary backoff applies."""
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def _parse_completion(response: httpx.Response, latency_s: float, attempts: int) -> Completion:
    """Turn a 2xx body into a Completion; a body without a usable answer is an error, not retried."""
    try:
        data = response.json()
        choice = data["choices"][0]
        text = choice["message"]["content"]
        if not isinstance(text, str):
            raise TypeError(f"message content is {type(text).__name__}")
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        detail = f"{type(exc).__name__}: {exc}"[:_ERROR_SNIPPET_CHARS]
        return Completion(text=None, latency_s=latency_s, attempts=attempts,
                          error=f"malformed response: {detail}")
    usage = data.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    return Completion(text=text, input_tokens=usage.get("prompt_tokens"),
                      output_tokens=usage.get("completion_tokens"), latency_s=latency_s,
                      attempts=attempts, extra={"finish_reason": choice.get("finish_reason")})


def _redact(text: str, secret: str | None) -> str:
    """Mask the key in server-echoed text, in case a server reflects request headers."""
    return text.replace(secret, "***") if secret else text
