"""The Serve handle provider under the engine's model against a stand-in for a Serve DeploymentHandle: chunking, the retry of the
prompts that failed, the errors after the retries, timeouts that cancel, and the breaker. No Ray is
started (tests/integration/test_serving.py calls real deployments)."""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from halluscope import retry
from halluscope.errors import EndpointDown, ModelDown
from halluscope.models.base import GenerationRequest
from halluscope.models.model import Model
from halluscope.models.provider import CallLimits
from halluscope.models.serve_handle import ServeHandleProvider, deployment_handle


class _Response:
    """What ``handle.complete_batch.remote(...)`` returns: awaitable once, cancellable."""

    def __init__(self, run: Callable[[], Any]) -> None:
        self.run, self.cancelled = run, False

    def __await__(self) -> Any:
        return self.run().__await__()

    def cancel(self) -> None:
        self.cancelled = True


class _Handle:
    """``answer(batch, call_number)``: the items of one chunk, or raises; ``delay_s`` before answering."""

    def __init__(self, answer: Callable[[list[str], int], list[dict]], delay_s: float = 0.0) -> None:
        self.answer, self.delay_s = answer, delay_s
        self.batches: list[list[str]] = []
        self.responses: list[_Response] = []
        self.complete_batch = SimpleNamespace(remote=self._remote)

    def _remote(self, batch: list[str], sampling: dict) -> _Response:
        self.batches.append(list(batch))
        number = len(self.batches)

        async def run() -> list[dict]:
            await asyncio.sleep(self.delay_s)
            return self.answer(batch, number)

        self.responses.append(_Response(run))
        return self.responses[-1]


@pytest.fixture(autouse=True)
def no_waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The backoff waits, recorded instead of slept."""
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(retry, "apause", record)
    return waits


def _backend(handle: _Handle, **kw: Any) -> Model:
    provider = ServeHandleProvider("m", "m-app", "M", limits=CallLimits(**{"prompts_per_call": 2, "max_retries": 3,
                                                                      "breaker_threshold": 5, **kw}))
    provider._handle = handle  # what open() finds on a worker
    return Model(provider)


def _requests(*prompts: str) -> list[GenerationRequest]:
    return [GenerationRequest(task="t", item_id=str(i), prompt=p) for i, p in enumerate(prompts)]


def _ok(prompt: str) -> dict:
    return {"text": prompt.upper(), "input_tokens": 1, "output_tokens": 2}


def test_chunks_answer_in_request_order() -> None:
    handle = _Handle(lambda batch, n: [_ok(p) for p in batch])
    out = _backend(handle).generate_batch(_requests("a", "b", "c", "d", "e"))
    assert [c.text for c in out] == ["A", "B", "C", "D", "E"]
    assert all(c.attempts == 1 and c.error is None and c.output_tokens == 2 for c in out)
    assert sorted(map(len, handle.batches)) == [1, 2, 2]


def test_only_the_prompts_that_failed_are_sent_again(no_waits: list[float]) -> None:
    def answer(batch: list[str], n: int) -> list[dict]:
        return [{"error": "busy"} if p == "b" and n == 1 else _ok(p) for p in batch]

    handle = _Handle(answer)
    out = _backend(handle).generate_batch(_requests("a", "b"))
    assert [(c.text, c.attempts) for c in out] == [("A", 1), ("B", 2)]
    assert handle.batches == [["a", "b"], ["b"]] and len(no_waits) == 1


def test_errors_after_the_retries_are_data() -> None:
    def answer(batch: list[str], n: int) -> list[dict]:
        return [{"error": "engine error"} if p == "bad" else _ok(p) for p in batch]

    out = _backend(_Handle(answer), max_retries=2).generate_batch(_requests("bad", "good"))
    assert out[0].text is None and out[0].attempts == 3
    assert out[0].error == "engine error (after 3 attempts)"
    assert out[1].text == "GOOD" and out[1].attempts == 1


def test_a_call_without_an_answer_in_time_is_cancelled_and_retried() -> None:
    handle = _Handle(lambda batch, n: [_ok(p) for p in batch], delay_s=5.0)
    out = _backend(handle, timeout_s=0.05, max_retries=1).generate_batch(_requests("a"))
    assert out[0].text is None and out[0].error == "no answer within 0.05 s (after 2 attempts)"
    assert [r.cancelled for r in handle.responses] == [True, True]


def test_failed_calls_in_a_row_trip_the_breaker() -> None:
    def answer(batch: list[str], n: int) -> list[dict]:
        raise RuntimeError("Deployment 'M' in app 'm-app' is unavailable")

    backend = _backend(_Handle(answer), breaker_threshold=3)
    with pytest.raises(ModelDown, match=r"model 'm' \(Serve app 'm-app'.*3 calls in a row got no answer") as err:
        backend.generate_batch(_requests(*"abcdef"))
    assert isinstance(err.value, EndpointDown) and isinstance(err.value, RuntimeError)


def test_an_answer_resets_the_breaker() -> None:
    def answer(batch: list[str], n: int) -> list[dict]:
        if n % 2:
            raise RuntimeError("replica restarting")
        return [_ok(p) for p in batch]

    out = _backend(_Handle(answer), breaker_threshold=2, calls_in_flight=1).generate_batch(
        _requests(*"abcdef"))
    assert [c.text for c in out] == list("ABCDEF")  # every other call failed: never 2 in a row
    assert max(c.attempts for c in out) > 1


def test_pickled_without_its_handle_or_count() -> None:
    backend = _backend(_Handle(lambda batch, n: [_ok(p) for p in batch]))
    backend.generate_batch(_requests("a"))
    assert backend._opened is not None
    copy = pickle.loads(pickle.dumps(backend))
    assert copy.provider._handle is None and copy._opened is None and copy.provider.limits.breaker_threshold == 5


def test_a_dead_serve_client_cached_by_the_worker_is_forgotten_and_the_deployment_found_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A pooled worker keeps the Serve client it first reached; Serve restarted in the same Ray
    (as between tests) leaves that client dead. A deployment that is not there is a ModelDown."""
    from ray import serve
    from ray.serve import context

    calls: list[str] = []
    deployments = {("M", "m-app")}

    def lookup(name: str, app_name: str) -> tuple[str, str]:
        calls.append("lookup")
        if "forget" not in calls or (name, app_name) not in deployments:
            raise KeyError(f"no deployment {name} in {app_name}")
        return name, app_name

    monkeypatch.setattr(serve, "get_deployment_handle", lookup)
    monkeypatch.setattr(context, "_disconnect", lambda: calls.append("forget"))
    provider = ServeHandleProvider("m", "m-app", "M", limits=CallLimits())
    assert deployment_handle(provider, "m-app", "M") == ("M", "m-app")
    assert calls == ["lookup", "forget", "lookup"]
    with pytest.raises(ModelDown, match=r"model 'm' .* is down: no such deployment \(KeyError"):
        deployment_handle(provider, "m-app", "gone")
