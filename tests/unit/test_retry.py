"""The one retry policy: attempts, what is retried, the waits (recorded, never slept), the
Retry-After reader and the breaker's count."""

from __future__ import annotations

import asyncio
import email.utils
from collections.abc import Callable

import pytest

from halluscope import retry
from halluscope.retry import Breaker, GaveUp, RetryPolicy, Transient, retry_after_s


@pytest.fixture()
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits the policy asked for, sync and async alike, instead of sleeping."""
    seen: list[float] = []

    async def apause(seconds: float) -> None:
        seen.append(seconds)

    monkeypatch.setattr(retry, "pause", seen.append)
    monkeypatch.setattr(retry, "apause", apause)
    return seen


def flaky(failures: list[Transient], answer: str = "ok") -> tuple[list[int], Callable[[int], str]]:
    """An attempt function failing with ``failures`` in turn, then answering; records attempt numbers."""
    calls: list[int] = []

    def attempt(number: int) -> str:
        calls.append(number)
        if failures:
            raise failures.pop(0)
        return answer

    return calls, attempt


def test_transient_failures_are_retried_until_an_answer(waits: list[float]) -> None:
    calls, attempt = flaky([Transient("HTTP 503"), Transient("timeout")])
    assert RetryPolicy(3, 0.5, 10.0).run(attempt) == "ok"
    assert calls == [1, 2, 3]
    assert len(waits) == 2
    assert 0.0 <= waits[0] <= 0.5 and 0.0 <= waits[1] <= 1.0  # full jitter under base * 2**(n-1)


def test_out_of_attempts_gives_up_with_the_last_reason(waits: list[float]) -> None:
    calls, attempt = flaky([Transient("HTTP 500"), Transient("HTTP 502"), Transient("HTTP 503")])
    with pytest.raises(GaveUp, match=r"^HTTP 503 after 3 attempts$") as caught:
        RetryPolicy(2, 0.0, 0.0).run(attempt)
    assert (caught.value.reason, caught.value.attempts) == ("HTTP 503", 3)
    assert calls == [1, 2, 3] and waits == [0.0, 0.0]


def test_no_retries_means_one_attempt(waits: list[float]) -> None:
    calls, attempt = flaky([Transient("busy")])
    with pytest.raises(GaveUp, match="busy after 1 attempts"):
        RetryPolicy(0, 1.0, 1.0).run(attempt)
    assert calls == [1] and waits == []


def test_other_errors_end_the_call_at_once(waits: list[float]) -> None:
    calls: list[int] = []

    def attempt(number: int) -> str:
        calls.append(number)
        raise ValueError("HTTP 400: bad request")

    with pytest.raises(ValueError, match="HTTP 400"):
        RetryPolicy(5, 0.1, 1.0).run(attempt)
    assert calls == [1] and waits == []


def test_retry_after_replaces_the_backoff_up_to_the_cap(waits: list[float]) -> None:
    _, attempt = flaky([Transient("HTTP 429", 0.3), Transient("HTTP 429", 120.0), Transient("HTTP 503")])
    RetryPolicy(3, 0.0, 30.0).run(attempt)
    assert waits == [0.3, 30.0, 0.0]


def test_the_jitter_cap_grows_then_stops_at_the_max(waits: list[float]) -> None:
    _, attempt = flaky([Transient("busy")] * 6)
    RetryPolicy(6, 1.0, 4.0).run(attempt)
    caps = [1.0, 2.0, 4.0, 4.0, 4.0, 4.0]
    assert len(waits) == 6 and all(0.0 <= w <= cap for w, cap in zip(waits, caps))


def test_async_attempts_and_waits(waits: list[float]) -> None:
    calls: list[int] = []

    async def attempt(number: int) -> int:
        calls.append(number)
        if number < 3:
            raise Transient("HTTP 429", 2.0)
        return number

    assert asyncio.run(RetryPolicy(4, 0.5, 10.0).arun(attempt)) == 3
    assert calls == [1, 2, 3] and waits == [2.0, 2.0]


def test_async_gives_up_and_lets_cancellation_through(waits: list[float]) -> None:
    async def busy(number: int) -> None:
        raise Transient("HTTP 503")

    with pytest.raises(GaveUp, match="HTTP 503 after 2 attempts"):
        asyncio.run(RetryPolicy(1, 0.0, 0.0).arun(busy))

    async def cancelled(number: int) -> None:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(RetryPolicy(3, 0.0, 0.0).arun(cancelled))
    assert waits == [0.0]


def test_negative_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(-1, 0.5, 1.0)
    with pytest.raises(ValueError):
        RetryPolicy(1, -0.5, 1.0)


@pytest.mark.parametrize(("value", "expected"), [
    ("0", 0.0), ("5", 5.0), (" 0.3 ", 0.3), ("-4", 0.0),
    (None, None), ("", None), ("soon", None), ("nan", None), ("inf", None),
    ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),  # a date gone by: retry now
])
def test_retry_after_reader(value: str | None, expected: float | None) -> None:
    assert retry_after_s(value) == expected


def test_retry_after_http_date_is_seconds_from_now() -> None:
    now = 1_800_000_000.0
    assert retry_after_s(email.utils.formatdate(now + 90, usegmt=True), now=now) == 90.0
    assert retry_after_s("Fri, 15 Jan 2027 08:00:00 GMT", now=now - 3600) == 3600.0


def test_breaker_trips_at_the_threshold_and_an_answer_resets_it() -> None:
    breaker = Breaker(3)
    assert [breaker.failed(), breaker.failed()] == [False, False]
    breaker.answered()
    assert [breaker.failed(), breaker.failed(), breaker.failed()] == [False, False, True]
    assert breaker.in_a_row == 3
    with pytest.raises(ValueError):
        Breaker(0)
