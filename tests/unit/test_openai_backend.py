"""The OpenAI provider under the engine's model against a local OpenAI-compatible stub: success, retries, limits, secrets."""

from __future__ import annotations

import asyncio
import pickle
import time

import pytest
from tests.support.models import openai_model
from tests.support.openai_server import FailPlan, OpenAIStubServer

from halluscope.contract.completion import Completion
from halluscope.models.base import GenerationRequest, SamplingParams
from halluscope.models.model import Model

KEY_ENV = "HALLUSCOPE_TEST_OPENAI_KEY"
SECRET = "sk-test-secret-4f1c9a"


def make_backend(server: OpenAIStubServer, **overrides) -> Model:
    """Small backoffs so retry tests take milliseconds."""
    kwargs = dict(model_id="stub-model", base_url=server.base_url, max_concurrency=4,
                  timeout_s=5.0, max_retries=3, backoff_base_s=0.01, backoff_max_s=0.05)
    kwargs.update(overrides)
    return openai_model(**kwargs)


def requests_for(*prompts: str) -> list[GenerationRequest]:
    return [GenerationRequest(task="t", item_id=str(i), prompt=p) for i, p in enumerate(prompts)]


def test_success_records_usage_keeps_order_and_respects_concurrency() -> None:
    prompts = [f"question number {i} " + "word " * (i % 5) for i in range(50)]
    with OpenAIStubServer(fail_plan=FailPlan(delay_s=0.02)) as server:
        backend = make_backend(server, max_concurrency=8, model="served-name",
                               sampling=SamplingParams(temperature=0.7, max_tokens=32))
        results = backend.generate_batch(requests_for(*prompts))

    assert len(results) == 50
    for prompt, result in zip(prompts, results):
        answer = f"answer to: {prompt}"
        assert result.error is None
        assert result.text == answer
        assert result.input_tokens == len(prompt.split())
        assert result.output_tokens == len(answer.split())
        assert result.attempts == 1
        assert result.latency_s > 0
        assert result.extra["finish_reason"] == "stop"
    assert server.calls == 50
    assert 1 < server.max_concurrent <= 8
    body = server.bodies[0]
    assert body["model"] == "served-name"
    assert body["messages"][0]["role"] == "user"
    assert body["temperature"] == 0.7 and body["max_tokens"] == 32
    assert "stop" not in body


def test_model_defaults_to_model_id_and_stop_is_sent() -> None:
    with OpenAIStubServer() as server:
        backend = make_backend(server, sampling=SamplingParams(stop=("\n\n",)))
        backend.generate_batch(requests_for("hi"))
    assert server.bodies[0]["model"] == "stub-model"
    assert server.bodies[0]["stop"] == ["\n\n"]


def test_429_then_success_is_retried_and_honours_retry_after() -> None:
    plan = FailPlan(first_n=2, status=429, retry_after="0")
    with OpenAIStubServer(fail_plan=plan) as server:
        # A large backoff base: the test is only fast if Retry-After: 0 replaces the backoff.
        backend = make_backend(server, backoff_base_s=10.0, backoff_max_s=10.0)
        started = time.monotonic()
        [result] = backend.generate_batch(requests_for("one two three"))
        elapsed = time.monotonic() - started

    assert result.error is None
    assert result.text == "answer to: one two three"
    assert result.attempts == 3
    assert result.input_tokens == 3
    assert server.calls == 3
    assert elapsed < 5.0


def test_persistent_503_gives_error_completion_not_exception() -> None:
    with OpenAIStubServer(fail_plan=FailPlan(first_n=1000, status=503)) as server:
        backend = make_backend(server, max_retries=2)
        [result] = backend.generate_batch(requests_for("hello"))

    assert isinstance(result, Completion)
    assert result.text is None
    assert result.error == "HTTP 503 (after 3 attempts)"
    assert result.attempts == 3
    assert server.calls == 3


def test_timeouts_are_retried_then_reported() -> None:
    with OpenAIStubServer(fail_plan=FailPlan(delay_s=0.5)) as server:
        backend = make_backend(server, timeout_s=0.1, max_retries=1)
        [result] = backend.generate_batch(requests_for("slow"))

    assert result.text is None
    assert result.error == "no answer within 0.1 s (after 2 attempts)"
    assert result.attempts == 2
    assert server.calls == 2


def test_timeout_then_success() -> None:
    with OpenAIStubServer(fail_plan=FailPlan(delay_s=0.5, delay_first_n=1)) as server:
        backend = make_backend(server, timeout_s=0.2)
        [result] = backend.generate_batch(requests_for("slow once"))

    assert result.error is None
    assert result.text == "answer to: slow once"
    assert result.attempts == 2


def test_connection_refused_is_retried_then_reported() -> None:
    with OpenAIStubServer() as server:
        base_url = server.base_url
    # The server is stopped, so nothing listens on that port any more.
    backend = openai_model(model_id="m", base_url=base_url, max_retries=1,
                            backoff_base_s=0.01, backoff_max_s=0.05)
    [result] = backend.generate_batch(requests_for("anyone there"))
    assert result.text is None
    assert result.error.startswith("connection error") and result.error.endswith("(after 2 attempts)")
    assert result.attempts == 2


def test_400_is_not_retried() -> None:
    with OpenAIStubServer(fail_plan=FailPlan(prompt_status={"bad prompt": 400})) as server:
        backend = make_backend(server)
        bad, good = backend.generate_batch(requests_for("bad prompt", "good prompt"))

    assert bad.text is None
    assert bad.error.startswith("HTTP 400")
    assert bad.attempts == 1
    assert good.error is None and good.text == "answer to: good prompt"
    assert sum(b["messages"][0]["content"] == "bad prompt" for b in server.bodies) == 1
    assert server.calls == 2


def test_malformed_body_is_an_error_and_not_retried() -> None:
    plan = FailPlan(malformed_prompts=frozenset({"garbled"}))
    with OpenAIStubServer(fail_plan=plan) as server:
        [result] = make_backend(server).generate_batch(requests_for("garbled"))

    assert result.text is None
    assert result.error.startswith("malformed response:")
    assert result.attempts == 1
    assert server.calls == 1


def test_missing_usage_gives_none_token_counts() -> None:
    with OpenAIStubServer(include_usage=False) as server:
        [result] = make_backend(server).generate_batch(requests_for("no usage here"))

    assert result.text == "answer to: no usage here"
    assert result.input_tokens is None and result.output_tokens is None


@pytest.mark.parametrize(("reported", "shown"), [
    ({"completion_tokens": -1_000_000_000}, "usage.completion_tokens '-1000000000'"),
    ({"prompt_tokens": float("nan")}, "usage.prompt_tokens 'nan'"),
    ({"completion_tokens": 2.5}, "usage.completion_tokens '2.5'"),
    ({"prompt_tokens": 10**12}, "usage.prompt_tokens '1000000000000'")])
def test_a_usage_that_is_no_count_fails_the_call_rather_than_the_bill(reported, shown) -> None:
    """An endpoint's usage is billed as it reports it: a negative, NaN, fractional or impossible
    count would make the run's cost negative or unbounded, so that one call fails, not retried."""
    with OpenAIStubServer(usage=reported) as server:
        [result] = make_backend(server).generate_batch(requests_for("counted"))
    assert result.text is None and result.error.startswith(f"malformed response: {shown} is not a count of tokens")
    assert result.input_tokens is None and result.output_tokens is None and server.calls == 1


def test_api_key_sent_as_bearer_and_never_exposed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    plan = FailPlan(prompt_status={"unauthorised": 401, "overloaded": 503})
    with OpenAIStubServer(fail_plan=plan) as server:
        backend = make_backend(server, api_key_env=KEY_ENV, max_retries=1)
        results = backend.generate_batch(requests_for("fine", "unauthorised", "overloaded"))

    assert server.auth_headers == [f"Bearer {SECRET}"] * server.calls
    assert results[0].error is None
    assert results[1].error.startswith("HTTP 401")
    assert results[2].error == "HTTP 503 (after 2 attempts)"
    for result in results:
        assert SECRET not in (result.error or "")
    assert SECRET not in repr(backend)
    assert KEY_ENV in repr(backend)
    assert SECRET not in pickle.dumps(backend).decode("latin-1")


def test_no_api_key_env_sends_no_authorization_header() -> None:
    with OpenAIStubServer() as server:
        make_backend(server).generate_batch(requests_for("x"))
    assert server.auth_headers == [None]


def test_the_sdks_organization_and_project_variables_never_reach_the_endpoint(monkeypatch: pytest.MonkeyPatch
                                                                            ) -> None:
    monkeypatch.setenv("OPENAI_ORG_ID", "org-secret")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-secret")
    with OpenAIStubServer() as server:
        make_backend(server).generate_batch(requests_for("x"))
    [seen] = server.headers
    assert "openai-organization" not in seen and "openai-project" not in seen
    assert not any("secret" in v for v in seen.values())


def test_unset_api_key_env_is_a_setup_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    backend = openai_model(model_id="m", base_url="http://127.0.0.1:9/v1", api_key_env=KEY_ENV)
    with pytest.raises(RuntimeError, match=KEY_ENV):
        backend.generate_batch(requests_for("x"))


def test_backend_is_picklable_before_and_after_use() -> None:
    with OpenAIStubServer() as server:
        backend = make_backend(server)
        pickle.dumps(backend)
        backend.generate_batch(requests_for("first"))
        clone = pickle.loads(pickle.dumps(backend))
        [result] = clone.generate_batch(requests_for("second"))

    assert result.text == "answer to: second"
    assert clone.model_id == backend.model_id and clone.provider.sampling == backend.provider.sampling


def test_generate_batch_works_inside_a_running_event_loop() -> None:
    with OpenAIStubServer() as server:
        backend = make_backend(server)

        async def caller() -> list[Completion]:
            return backend.generate_batch(requests_for("from a loop"))

        [result] = asyncio.run(caller())

    assert result.text == "answer to: from a loop"


def test_empty_batch_makes_no_calls() -> None:
    with OpenAIStubServer() as server:
        assert make_backend(server).generate_batch([]) == []
    assert server.calls == 0


def test_circuit_breaker_stops_a_down_endpoint():
    from halluscope.errors import EndpointDown

    backend = openai_model(model_id="gone", base_url="http://127.0.0.1:9/v1", max_retries=1,
                            backoff_base_s=0.001, breaker_threshold=6)
    with pytest.raises(EndpointDown, match=r"endpoint http://127.0.0.1:9/v1 of model 'gone' is down: 6 calls in a row got no answer "
                                                r"\(last: connection error"):
        backend.generate_batch([GenerationRequest("t", str(i), f"hi {i}") for i in range(10)])


def test_an_endpoint_that_never_answers_trips_the_breaker() -> None:
    """Accepts connections, answers nothing: stopped after breaker_threshold timeouts, not after
    every call's retries (435 s for 20 items before)."""
    from halluscope.errors import EndpointDown

    with OpenAIStubServer(fail_plan=FailPlan(delay_s=3.0)) as server:
        backend = make_backend(server, timeout_s=0.2, max_retries=4, max_concurrency=20, breaker_threshold=10)
        started = time.perf_counter()
        with pytest.raises(EndpointDown, match=r"is down: 10 calls in a row got no answer "
                                               r"\(last: no answer within 0.2 s\)"):
            backend.generate_batch(requests_for(*(f"q{i}" for i in range(20))))
        assert time.perf_counter() - started < 2.0


def test_an_http_date_retry_after_is_waited_up_to_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retry-After as an HTTP-date a minute ahead: the wait is that minute, capped at backoff_max_s
    (recorded through halluscope.retry's patchable wait, not slept)."""
    import email.utils

    from halluscope import retry

    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(retry, "apause", record)
    plan = FailPlan(first_n=1, status=429, retry_after=email.utils.formatdate(time.time() + 60, usegmt=True))
    with OpenAIStubServer(fail_plan=plan) as server:
        [result] = make_backend(server, backoff_max_s=7.0).generate_batch(requests_for("later"))

    assert result.text == "answer to: later" and result.attempts == 2
    assert waits == [7.0]
