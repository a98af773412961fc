"""The one retry policy of every client that calls a service: model endpoints (OpenAI-compatible
HTTP, Serve handles), Semantic Scholar and Brave Search.

An attempt that fails in a way worth repeating (busy, 429, 5xx, a timeout, a dropped connection)
raises ``Transient``; whatever it returns, or any other exception it raises, ends the call. Waits
between attempts are full jitter over an exponentially growing cap (``base * 2**(n-1)``, at most
``max``), or the server's ``Retry-After`` when it gave one, also at most ``max``. Out of attempts,
``GaveUp`` says why and after how many, for the client to turn into its own error data.

The waits go through ``pause`` and ``apause``, looked up at each call: tests patch them to
record the waits instead of sleeping. ``Breaker`` counts the failures in a row that mean an
endpoint is down; each client decides what counts and what it raises.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC
from typing import Any, NoReturn, TypeVar

import tenacity

T = TypeVar("T")


class Transient(Exception):
    """An attempt failed in a way another attempt may not; ``retry_after_s`` is the wait the
    server asked for, if any."""

    def __init__(self, reason: str, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after_s = retry_after_s


class GaveUp(Exception):
    """Every attempt failed; ``reason`` is the last one's."""

    def __init__(self, reason: str, attempts: int) -> None:
        super().__init__(f"{reason} after {attempts} attempts")
        self.reason = reason
        self.attempts = attempts


def pause(seconds: float) -> None:
    """The wait between attempts of a blocking call."""
    time.sleep(seconds)


async def apause(seconds: float) -> None:
    """The wait between attempts of an async call."""
    await asyncio.sleep(seconds)


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP-date (RFC 9110),
    never negative; None when absent or unreadable, so ordinary backoff applies."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)  # HTTP-dates are GMT
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


@dataclass(frozen=True)
class RetryPolicy:
    """``max_retries`` more attempts after the first, with the backoff above."""

    max_retries: int
    backoff_base_s: float
    backoff_max_s: float

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.backoff_base_s < 0 or self.backoff_max_s < 0:
            raise ValueError("max_retries and backoffs must be >= 0")

    @property
    def attempts(self) -> int:
        return self.max_retries + 1

    def _settings(self) -> dict[str, Any]:
        jitter = tenacity.wait_random_exponential(multiplier=self.backoff_base_s, max=self.backoff_max_s)

        def wait(state: tenacity.RetryCallState) -> float:
            failure = state.outcome.exception() if state.outcome is not None else None
            asked = failure.retry_after_s if isinstance(failure, Transient) else None
            return min(asked, self.backoff_max_s) if asked is not None else jitter(state)

        return {"stop": tenacity.stop_after_attempt(self.attempts), "wait": wait,
                "retry": tenacity.retry_if_exception_type(Transient), "retry_error_callback": _gave_up}

    def run(self, attempt: Callable[[int], T]) -> T:
        """``attempt(1)``, ``attempt(2)``, ... until one returns or raises other than ``Transient``;
        raises ``GaveUp`` when the last allowed attempt raised ``Transient``."""
        count = 0

        def once() -> T:
            nonlocal count
            count += 1
            return attempt(count)

        return tenacity.Retrying(sleep=pause, **self._settings())(once)

    async def arun(self, attempt: Callable[[int], Awaitable[T]]) -> T:
        """``run`` for a coroutine; the wait happens outside the attempt (and any semaphore it holds)."""
        count = 0

        async def once() -> T:
            nonlocal count
            count += 1
            return await attempt(count)

        # a new controller per call: tenacity keeps its state per thread, not per task
        return await tenacity.AsyncRetrying(sleep=apause, **self._settings())(once)


def _gave_up(state: tenacity.RetryCallState) -> NoReturn:
    failure = state.outcome.exception() if state.outcome is not None else None
    raise GaveUp(failure.reason if isinstance(failure, Transient) else str(failure),
                 state.attempt_number) from failure


class Breaker:
    """Failures in a row with no answer between; ``failed`` says when they reach ``threshold``.
    The count is plain data, so an object holding a breaker still pickles."""

    def __init__(self, threshold: int) -> None:
        if threshold < 1:
            raise ValueError("breaker threshold must be >= 1")
        self.threshold = threshold
        self.in_a_row = 0

    def failed(self) -> bool:
        """Count one failure; True when the endpoint counts as down."""
        self.in_a_row += 1
        return self.in_a_row >= self.threshold

    def answered(self) -> None:
        self.in_a_row = 0
