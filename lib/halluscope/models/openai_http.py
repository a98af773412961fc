"""Provider for any OpenAI-compatible chat-completions endpoint (vLLM, Ray Serve, hosted APIs).

Calls go through the official ``openai`` SDK, one prompt per call, on one ``AsyncOpenAI`` client per
process (opened on the model's loop). The SDK's own retries are off (``max_retries=0``): the
engine's ``Model`` retries what this provider sorts as worth it (429 and 5xx answers as ``Retry``,
timeouts and dropped connections as ``Unanswered``); any other failure is a final error
``Completion``. Only the name of the key's environment variable is kept: the key is read on the
worker when the client opens, so it is never pickled, logged or shown in repr.

A request's answer format is sent as ``structured_output`` says the endpoint takes it: ``off``
(nothing is sent), ``json_schema`` (OpenAI's ``response_format``; a choice comes back as
``{"answer": ...}`` and is unwrapped) or ``vllm`` (vLLM's ``structured_outputs``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from halluscope.contract.completion import Completion
from halluscope.contract.roles import AnswerFormat
from halluscope.models.answer_formats import chosen, response_format, structured_outputs
from halluscope.models.base import GenerationRequest, SamplingParams, share_of
from halluscope.models.provider import CallLimits, ProviderKind, RemoteProvider, Retry, Unanswered
from halluscope.models.registry import sampling_of
from halluscope.models.usage import reported_tokens
from halluscope.retry import retry_after_s

if TYPE_CHECKING:
    import openai

    from halluscope.config.schema import OpenAIModel
    from halluscope.models.provider import Context

# Longest server text quoted in an error; enough to diagnose, short enough for a results table.
_ERROR_SNIPPET_CHARS = 200
# The SDK insists on a key; with none configured this stands in and the header is left out.
_NO_KEY = "unused"

StructuredOutput = Literal["off", "json_schema", "vllm"]
STRUCTURED_OUTPUTS: tuple[StructuredOutput, ...] = ("off", "json_schema", "vllm")


class OpenAIProvider(RemoteProvider):
    """Each prompt as one user message to ``{base_url}/chat/completions``."""

    LIVE: ClassVar[tuple[str, ...]] = ("_client", "_api_key", "_headers")

    def __init__(self, *, model_id: str, base_url: str, model: str | None = None, api_key_env: str | None = None,
                 limits: CallLimits = CallLimits(), sampling: SamplingParams = SamplingParams(),
                 structured_output: StructuredOutput = "off") -> None:
        if structured_output not in STRUCTURED_OUTPUTS:
            raise ValueError(f"structured_output must be one of {STRUCTURED_OUTPUTS}, got {structured_output!r}")
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        self.model_id = model_id
        self.base_url = base_url.rstrip("/")
        self.model = model or model_id
        self.api_key_env = api_key_env
        self.limits = limits
        self.sampling = sampling
        self.structured_output = structured_output
        self.constrains_answers = structured_output != "off"
        self._client: openai.AsyncOpenAI | None = None
        self._api_key: str | None = None
        self._headers: Mapping[str, str | openai.Omit] = {}

    def __repr__(self) -> str:
        return (f"OpenAIProvider(model_id={self.model_id!r}, base_url={self.base_url!r}, "
                f"model={self.model!r}, api_key_env={self.api_key_env!r}, limits={self.limits})")

    def where(self) -> str:
        return f"{self.base_url} of model '{self.model_id}'"

    async def open(self) -> None:
        # imported where a client opens: every process that reads the installed providers loads
        # this module (each Ray Data worker of a run among them), and the SDK takes 0.6 s to import
        import openai

        self._api_key = self._read_key()
        # Without a key no Authorization header goes out: the SDK would otherwise read
        # OPENAI_API_KEY, meant for api.openai.com, and send it to this endpoint; nor do the SDK's
        # OPENAI_ORG_ID / OPENAI_PROJECT_ID from the environment.
        self._headers = {"OpenAI-Organization": openai.Omit(), "OpenAI-Project": openai.Omit(),
                         **({} if self._api_key else {"Authorization": openai.Omit()})}
        # the model's timeout cancels a call; the SDK's is a backstop behind it
        self._client = openai.AsyncOpenAI(base_url=self.base_url, api_key=self._api_key or _NO_KEY,
                                          timeout=self.limits.timeout_s + 10.0, max_retries=0)

    def _read_key(self) -> str | None:
        """The key from the named variable; a missing one is a setup error, so it raises."""
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

    async def call(self, requests: Sequence[GenerationRequest]) -> list[Completion | Retry]:
        import openai  # loaded by open()

        (request,) = requests  # limits.prompts_per_call is 1
        assert self._client is not None
        try:
            raw = await self._client.chat.completions.with_raw_response.create(
                **self._request_body(request.prompt, request.answer_format), extra_headers=self._headers)
        except openai.APITimeoutError:
            raise Unanswered("no answer in time (the client's timeout)") from None
        except openai.APIConnectionError as exc:
            raise Unanswered(f"connection error ({type(exc.__cause__ or exc).__name__})") from None
        except openai.APIStatusError as exc:
            status = exc.status_code
            if status == 429 or status >= 500:
                return [Retry(f"HTTP {status}", retry_after_s(exc.response.headers.get("Retry-After")))]
            snippet = _redact(exc.response.text[:_ERROR_SNIPPET_CHARS], self._api_key)
            return [Completion(text=None, error=f"HTTP {status}: {snippet}")]
        except openai.OpenAIError as exc:
            return [Completion(text=None, error=f"request failed ({type(exc).__name__})")]
        completion = _parse_completion(raw)
        if completion.text is not None and self.structured_output == "json_schema" \
                and request.answer_format is not None:
            completion.text = chosen(completion.text, request.answer_format)
        return [completion]


def _parse_completion(raw: Any) -> Completion:
    """Turn a 2xx answer into a Completion; one without a usable answer is an error, not retried."""
    try:
        data = raw.parse()  # a ChatCompletion; the body's text when it is not JSON
        choice = data.choices[0]
        text = choice.message.content
        if not isinstance(text, str):
            raise TypeError(f"message content is {type(text).__name__}")
    except (ValueError, AttributeError, KeyError, IndexError, TypeError) as exc:
        detail = f"{type(exc).__name__}: {exc}"[:_ERROR_SNIPPET_CHARS]
        return Completion(text=None, error=f"malformed response: {detail}")
    tokens = reported_tokens(getattr(data, "usage", None))
    if isinstance(tokens, str):
        return Completion(text=None, error=f"malformed response: {tokens}")
    return Completion(text=text, input_tokens=tokens[0], output_tokens=tokens[1],
                      extra={"finish_reason": getattr(choice, "finish_reason", None)})


def _redact(text: str, secret: str | None) -> str:
    """Mask the key in server-echoed text, in case a server reflects request headers."""
    return text.replace(secret, "***") if secret else text


def _build(spec: OpenAIModel, context: Context) -> OpenAIProvider:
    """The ``openai`` backend's factory: ``context.clients`` clients share ``max_concurrency``."""
    p = spec.params
    return OpenAIProvider(model_id=spec.id, base_url=p.base_url, model=p.model, api_key_env=p.api_key_env,
                          limits=CallLimits(calls_in_flight=share_of(p.max_concurrency, context.clients),
                                        timeout_s=p.timeout_s, max_retries=p.max_retries),
                          sampling=sampling_of(spec),
                          structured_output=p.structured_output)


KIND = ProviderKind(_build, constrains=lambda spec: spec.params.structured_output != "off")
