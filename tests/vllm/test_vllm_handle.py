"""The vLLM handle provider under the engine's model against a stand-in for the handle of a ray.serve.llm engine deployment: what it
sends, how answers, error answers, exceptions and timeouts become Completions, and the breaker.
No Ray cluster or engine is started (tests/vllm/test_vllm_serve.py calls a real one)."""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from ray.exceptions import RayTaskError

from halluscope.errors import ModelDown
from halluscope.models.base import GenerationRequest, SamplingParams
from halluscope.models.model import Model
from halluscope.models.provider import CallLimits
from halluscope.models.vllm_handle import VLLMHandleProvider


def _answer(text: str, prompt_tokens: int = 3, completion_tokens: int = 2) -> Any:
    return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content=text), finish_reason="stop")],
                           usage=SimpleNamespace(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens))


def _error(code: int, message: str) -> Any:
    return SimpleNamespace(error=SimpleNamespace(code=code, message=message, type="x"))


@dataclass
class _Response:
    """What ``handle.options(stream=True).chat.remote(...)`` returns: an async iterator, cancellable."""

    run: Callable[[], Any]
    cancelled: list[bool] = field(default_factory=list)

    def __aiter__(self) -> Any:
        return self._items()

    async def _items(self) -> Any:
        result = await self.run()
        for item in result:
            yield item

    def cancel(self) -> None:
        self.cancelled.append(True)


class _Handle:
    """``answer(request, call_number)``: a list of items, or raises; ``delay_s`` before answering."""

    def __init__(self, answer: Callable[[Any, int], list], delay_s: float = 0.0) -> None:
        self.answer, self.delay_s = answer, delay_s
        self.requests: list[Any] = []
        self.responses: list[_Response] = []
        self.in_flight = self.peak = 0
        self.chat = SimpleNamespace(remote=self._remote)

    def _remote(self, request: Any, raw_request_info: Any) -> _Response:
        assert raw_request_info is None
        self.requests.append(request)
        number = len(self.requests)

        async def run() -> list:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            try:
                await asyncio.sleep(self.delay_s)
                return self.answer(request, number)
            finally:
                self.in_flight -= 1

        response = _Response(run)
        self.responses.append(response)
        return response


def _provider(handle: _Handle, sampling: SamplingParams = SamplingParams(), **limits: Any) -> VLLMHandleProvider:
    p = VLLMHandleProvider("m", "m-app", "LLMServer:m", limits=CallLimits(backoff_base_s=0.0, **limits),
                           sampling=sampling)
    p._handle, p._request_cls = handle, SimpleNamespace  # what open() finds on a worker
    return p


def _backend(handle: _Handle, **kw: Any) -> Model:
    return Model(_provider(handle, **kw))


def _requests(*prompts: str) -> list[GenerationRequest]:
    return [GenerationRequest(task="t", item_id=str(i), prompt=p) for i, p in enumerate(prompts)]


def test_one_chat_request_per_prompt_in_order_within_the_concurrency():
    handle = _Handle(lambda req, n: [_answer(req.messages[0]["content"].upper(), completion_tokens=n)], delay_s=0.01)
    backend = _backend(handle, calls_in_flight=3, sampling=SamplingParams(temperature=0.5, max_tokens=7))
    out = backend.generate_batch(_requests(*[f"p{i}" for i in range(10)]))
    assert [c.text for c in out] == [f"P{i}" for i in range(10)]
    assert all(c.error is None and c.attempts == 1 and c.input_tokens == 3 for c in out)
    assert handle.peak == 3
    first = handle.requests[0]
    assert first.model == "m" and first.messages == [{"role": "user", "content": "p0"}] and first.stream is False
    assert (first.temperature, first.top_p, first.max_tokens) == (0.5, 1.0, 7)
    assert not hasattr(first, "stop")  # an empty stop list is left out


def test_an_answer_format_goes_as_vllms_structured_outputs():
    """The engine's own request class takes it (a choice, or a JSON schema without free whitespace);
    a request without a format carries none."""
    from ray.serve.llm.openai_api_models import ChatCompletionRequest

    from halluscope.contract.roles import AnswerFormat

    flag = AnswerFormat.json_object("is_abstaining", {"is_abstaining": {"type": "boolean"}})
    handle = _Handle(lambda req, n: [_answer("Yes")])
    backend = _backend(handle)
    backend.provider._request_cls = ChatCompletionRequest  # type: ignore[attr-defined]
    out = backend.generate_batch([GenerationRequest("t", "0", "a", answer_format=AnswerFormat(choices=("Yes", "No"))),
                                  GenerationRequest("t", "1", "b", answer_format=flag),
                                  GenerationRequest("t", "2", "c")])
    assert [c.text for c in out] == ["Yes"] * 3 and backend.constrains_answers
    choice, schema, free = sorted(handle.requests, key=lambda r: r.messages[0]["content"])
    assert choice.structured_outputs.choice == ["Yes", "No"]
    assert schema.structured_outputs.json == flag.json_schema and schema.structured_outputs.disable_any_whitespace
    assert free.structured_outputs is None


def test_busy_answers_are_retried_and_bad_requests_are_final():
    def answer(req: Any, n: int) -> list:
        prompt = req.messages[0]["content"]
        if prompt == "long":
            return [_error(400, "This model's maximum context length is 256 tokens")]
        return [_error(503, "busy")] if n <= 2 else [_answer("ok")]

    out = _backend(_Handle(answer)).generate_batch(_requests("long", "fine"))
    assert out[0].text is None and out[0].attempts == 1
    assert out[0].error == "HTTP 400: This model's maximum context length is 256 tokens"
    assert out[1].text == "ok" and out[1].attempts in (2, 3)


def test_failures_after_the_retries_are_data():
    out = _backend(_Handle(lambda req, n: [_error(500, "engine error")]), max_retries=2).generate_batch(_requests("a"))
    assert out[0].text is None and out[0].attempts == 3
    assert out[0].error == "HTTP 500: engine error (after 3 attempts)"


def test_a_replica_that_raises_is_retried_without_tripping_the_breaker():
    def answer(req: Any, n: int) -> list:
        raise RayTaskError("chat", "Traceback ...", ValueError("engine hiccup"))

    backend = _backend(_Handle(answer), max_retries=1, breaker_threshold=2)
    out = backend.generate_batch(_requests("a", "b", "c"))
    assert [c.attempts for c in out] == [2, 2, 2]
    assert all(c.text is None and "RayTaskError" in (c.error or "") for c in out)


def test_calls_no_replica_answers_trip_the_breaker():
    def answer(req: Any, n: int) -> list:
        raise RuntimeError("Deployment 'LLMServer:m' in app 'm-app' is unavailable")

    with pytest.raises(ModelDown, match=r"model 'm' \(Serve app 'm-app'.*3 calls in a row got no answer"):
        _backend(_Handle(answer), breaker_threshold=3).generate_batch(_requests(*"abcdef"))


def test_a_call_without_an_answer_in_time_is_cancelled_and_retried():
    handle = _Handle(lambda req, n: [_answer("late")], delay_s=5.0)
    out = _backend(handle, timeout_s=0.05, max_retries=1).generate_batch(_requests("a"))
    assert out[0].text is None and out[0].error == "no answer within 0.05 s (after 2 attempts)"
    assert [r.cancelled for r in handle.responses] == [[True], [True]]


def test_pickled_without_its_handle():
    backend = _provider(_Handle(lambda req, n: [_answer("x")]))
    copy = pickle.loads(pickle.dumps(Model(backend))).provider
    assert copy._handle is None and copy._request_cls is None
    assert (copy.model_id, copy.app_name, copy.limits.calls_in_flight) == ("m", "m-app", 16)
