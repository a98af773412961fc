"""Backend for any OpenAI-compatible chat-completions endpoint (vLLM, Ray Serve, hosted APIs).

Calls go through the official ``openai`` SDK, one ``AsyncOpenAI`` client per batch, concurrently
and bounded by a semaphore. The SDK's own retries are off (``max_retries=0``): transient failures
(429, 5xx, timeouts, dropped connections) are retried under ``halluscope.retry``'s policy, the one
every client shares; everything else becomes an error ``Completion`` so one bad call never fails a
Ray Data batch. The backend holds only plain configuration, so Ray can pickle it and ship it to
workers; clients, semaphores and the API key are created per call of ``agenerate``.

A request's answer format is sent as ``structured_output`` says the endpoint takes it: ``off``
(nothing is sent), ``json_schema`` (OpenAI's ``response_format``; a choice comes back as
``{"answer": ...}`` and is unwrapped) or ``vllm`` (vLLM's ``structured_outputs``).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import openai

from halluscope.contract.completion import Completion
from halluscope.contract.roles import AnswerFormat
from halluscope.errors import EndpointDown
from halluscope.models.answer_formats import chosen, response_format, structured_outputs
from halluscope.models.base import GenerationRequest, SamplingParams, run_blocking
from halluscope.retry import Breaker, GaveUp, RetryPolicy, Transient, retry_after_s

# Longest server text quoted in an error; enough to diagnose, short enough for a results table.
_ERROR_SNIPPET_CHARS = 200
# The SDK insists on a key; with none configured this stands in and the header is left out.
_NO_KEY = "unused"

StructuredOutput = Literal["off", "json_schema", "vllm"]
STRUCTURED_OUTPUTS: tuple[StructuredOutput, ...] = ("off", "json_schema", "vllm")


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
        structured_output: StructuredOutput = "off",
    ) -> None:
        if structured_output not in STRUCTURED_OUTPUTS:
            raise ValueError(f"structured_output must be one of {STRUCTURED_OUTPUTS}, got {structured_output!r}")
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if breaker_threshold < 1:
            raise ValueError("breaker_threshold must be >= 1")
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
        self.structured_output = structured_output
        self._retry_policy()  # checks the backoffs now, not on a worker

    @property
    def constrains_answers(self) -> bool:
        """Whether a request's answer format is sent (and so is part of its call-cache key)."""
        return self.structured_output != "off"

    def __repr__(self) -> str:
        return (f"OpenAIBackend(model_id={self.model_id!r}, base_url={self.base_url!r}, "
                f"model={self.model!r}, api_key_env={self.api_key_env!r}, "
                f"max_concurrency={self.max_concurrency})")

    def generate_batch(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Sync entry point for Ray Data workers; works whether or not a loop is already running."""
        return run_blocking(lambda: self.agenerate(requests))

    async def agenerate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Run all requests concurrently (at most ``max_concurrency`` in flight); keeps order."""
        if not requests:
            return []
        api_key = self._api_key()
        # Without a key no Authorization header goes out: the SDK would otherwise read
        # OPENAI_API_KEY, meant for api.openai.com, and send it to this endpoint.
        # only the key this model names goes out: not the SDK's OPENAI_ORG_ID / OPENAI_PROJECT_ID
        # from the environment, which would reach whatever endpoint a config points at
        headers: Mapping[str, str | openai.Omit] = {"OpenAI-Organization": openai.Omit(),
                                                    "OpenAI-Project": openai.Omit(),
                                                    **({} if api_key else {"Authorization": openai.Omit()})}
        semaphore = asyncio.Semaphore(self.max_concurrency)
        breaker = Breaker(self.breaker_threshold)
        async with openai.AsyncOpenAI(base_url=self.base_url, api_key=api_key or _NO_KEY,
                                      timeout=self.timeout_s, max_retries=0) as client:
            return list(await asyncio.gather(
                *(self._complete(client, semaphore, breaker, req, api_key, headers) for req in requests)))

    def _retry_policy(self) -> RetryPolicy:
        return RetryPolicy(self.max_retries, self.backoff_base_s, self.backoff_max_s)

    def _api_key(self) -> str | None:
        """Read the key from the named variable; a missing one is a setup error, so it raises."""
        if self.api_key_env is None:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise RuntimeError(f"environment variable {self.api_key_env} (API key) is not set")
        return key

    def _request_body(self, prompt: str, answer_format: AnswerFormat | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model,
                                "messages": [{"role": "user", "content": prompt}],
                                **self.sampling.as_dict()}
        if not body["stop"]:
            del body["stop"]  # some servers reject an empty stop list
        if answer_format is not None and self.structured_output == "json_schema":
            body["response_format"] = response_format(answer_format)
        elif answer_format is not None and self.structured_output == "vllm":
            body["extra_body"] = {"structured_outputs": structured_outputs(answer_format)}  # top level of the JSON
        return body

    async def _complete(self, client: openai.AsyncOpenAI, semaphore: asyncio.Semaphore, breaker: Breaker,
                        request: GenerationRequest, api_key: str | None,
                        headers: Mapping[str, str | openai.Omit]) -> Completion:
        """One request under the retry policy; the backoff wait happens outside the semaphore."""
        body = self._request_body(request.prompt, request.answer_format)
        unwrap = request.answer_format if self.structured_output == "json_schema" else None

        async def attempt(number: int) -> Completion:
            async with semaphore:
                return await self._attempt(client, breaker, body, headers, api_key, number)

        try:
            completion = await self._retry_policy().arun(attempt)
        except GaveUp as out:
            return Completion(text=None, attempts=out.attempts, error=str(out))
        if completion.text is not None and unwrap is not None:
            completion.text = chosen(completion.text, unwrap)
        return completion

    async def _attempt(self, client: openai.AsyncOpenAI, breaker: Breaker, body: dict[str, Any],
                       headers: Mapping[str, str | openai.Omit], api_key: str | None, number: int) -> Completion:
        """One call: a Completion (the answer, or an error not worth retrying), or ``Transient``."""
        started = time.perf_counter()
        try:
            raw = await client.chat.completions.with_raw_response.create(**body, extra_headers=headers)
        except openai.APITimeoutError:
            # an endpoint that accepts connections but never answers is as down as one that
            # refuses them: both count toward the breaker
            self._failed(breaker, f"no answer within params.timeout_s={self.timeout_s:g} s")
            raise Transient("timeout") from None
        except openai.APIConnectionError as exc:
            reason = f"connection error ({type(exc.__cause__ or exc).__name__})"
            self._failed(breaker, reason)
            raise Transient(reason) from None
        except openai.APIStatusError as exc:
            breaker.answered()
            status = exc.status_code
            if status == 429 or status >= 500:
                raise Transient(f"HTTP {status}", retry_after_s(exc.response.headers.get("Retry-After"))) from None
            snippet = _redact(exc.response.text[:_ERROR_SNIPPET_CHARS], api_key)
            return Completion(text=None, attempts=number, error=f"HTTP {status}: {snippet}")
        except openai.OpenAIError as exc:
            return Completion(text=None, attempts=number, error=f"request failed ({type(exc).__name__})")
        breaker.answered()
        return _parse_completion(raw, time.perf_counter() - started, number)

    def _failed(self, breaker: Breaker, reason: str) -> None:
        """Count a call no answer came back to; raise ``EndpointDown`` when the breaker trips."""
        if breaker.failed():
            raise EndpointDown(f"endpoint {self.base_url} of model '{self.model_id}' is down: {breaker.in_a_row} "
                               f"connection failures or timeouts in a row (last: {reason})")


def _parse_completion(raw: Any, latency_s: float, attempts: int) -> Completion:
    """Turn a 2xx answer into a Completion; one without a usable answer is an error, not retried."""
    try:
        data = raw.parse()  # a ChatCompletion; the body's text when it is not JSON
        choice = data.choices[0]
        text = choice.message.content
        if not isinstance(text, str):
            raise TypeError(f"message content is {type(text).__name__}")
    except (ValueError, AttributeError, KeyError, IndexError, TypeError) as exc:
        detail = f"{type(exc).__name__}: {exc}"[:_ERROR_SNIPPET_CHARS]
        return Completion(text=None, latency_s=latency_s, attempts=attempts,
                          error=f"malformed response: {detail}")
    usage = getattr(data, "usage", None)
    return Completion(text=text, input_tokens=getattr(usage, "prompt_tokens", None),
                      output_tokens=getattr(usage, "completion_tokens", None), latency_s=latency_s,
                      attempts=attempts, extra={"finish_reason": getattr(choice, "finish_reason", None)})


def _redact(text: str, secret: str | None) -> str:
    """Mask the key in server-echoed text, in case a server reflects request headers."""
    return text.replace(secret, "***") if secret else text
