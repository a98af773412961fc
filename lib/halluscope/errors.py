"""Errors a user can act on: each names the file, field or row at fault."""

import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

MAX_SHOWN_CHARS = 200  # of a value echoed in an error message: a 100 MB path is not printed whole


class HalluscopeError(Exception):
    """Base class; the CLI prints these without a traceback."""


class ConfigError(HalluscopeError):
    """A run configuration is malformed or names something that does not exist."""


class DataError(HalluscopeError):
    """A data source is missing, unreachable or unreadable."""


class StorageError(HalluscopeError):
    """The run's storage does not answer: an endpoint that does not connect, no credentials, no
    such bucket, access denied."""


class StorageFull(StorageError):
    """No space left (or a quota reached) where the run writes: resumable once space is freed."""


class OverBudget(HalluscopeError):
    """What a run has spent, over all its attempts, crossed ``costs.budget_usd``: it stops, its
    committed work kept, and resumes under a raised budget. The command exits ``EXIT_CODE``, and
    a retry under the same budget stops again before it starts anything."""

    EXIT_CODE = 3


class RunError(HalluscopeError):
    """A run cannot start or continue (e.g. resuming with a different config)."""


class Superseded(RunError):
    """A resubmission of the same run id took the run over; this attempt must not commit."""


class Interrupted(KeyboardInterrupt):
    """A stop signal (SIGTERM from Kubernetes or `timeout`, SIGHUP from a closed terminal) taken as
    Ctrl-C is: the run records itself interrupted and the CLI says how to resume it. A
    KeyboardInterrupt, so the pipeline's ``except Exception`` blocks do not swallow it."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.signame = signal.Signals(signum).name
        super().__init__(f"interrupted ({self.signame})")


STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class Stops:
    """What ``stop_signals`` yields: ``rearm`` installs its handlers again after something replaced
    them (``ray.init`` puts in its own, which outlives ``ray.shutdown``); ``check`` raises the stop
    a signal asked for whose exception was lost, raised while the main thread ran a finalizer or a
    weakref callback, where Python prints and drops it (a run then ended ``complete``)."""

    def __init__(self, handler: Callable[[int, object], None] | None) -> None:
        self._handler = handler  # None: not in the main thread, where no handler can be set
        self.raised: list[int] = []
        self.lost: list[int] = []

    def rearm(self) -> None:
        if self._handler is not None:
            for s in STOP_SIGNALS:
                signal.signal(s, self._handler)

    def check(self) -> None:
        if self.lost:
            raise Interrupted(self.lost[-1])


@contextmanager
def stop_signals() -> Iterator[Stops]:
    """SIGTERM and SIGHUP raise ``Interrupted`` while the block runs (a run then records why it
    stopped, as for Ctrl-C); the handlers before are restored afterwards. A second signal while the
    run unwinds from the first (removing its deployments) is ignored, unless the first one's
    exception was lost: then it is raised again, as ``Stops.check`` raises it. Python takes
    signals in the main thread alone, so elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield Stops(None)
        return

    def stop(signum: int, frame: object) -> None:
        if stops.raised and not stops.lost:
            return
        stops.lost.clear()
        stops.raised.append(signum)
        raise Interrupted(signum)

    stops = Stops(stop)
    hook_before = sys.unraisablehook

    def unraisable(info: Any) -> None:
        if isinstance(info.exc_value, Interrupted):
            stops.lost.append(info.exc_value.signum)
        hook_before(info)

    before = {s: signal.signal(s, stop) for s in STOP_SIGNALS}
    sys.unraisablehook = unraisable
    try:
        yield stops
    finally:
        sys.unraisablehook = hook_before
        for s, handler in before.items():
            signal.signal(s, handler)


def clip(value: object, limit: int = MAX_SHOWN_CHARS) -> str:
    """A value for an error message, cut to its first ``limit`` characters with its length said."""
    text = str(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


class EndpointDown(HalluscopeError):
    """A model endpoint failed so many calls in a row that the stage stops (circuit breaker)."""


class ModelDown(EndpointDown, RuntimeError):
    """The model breaker's error (``models.model``): an ``EndpointDown``, and a RuntimeError, so a
    Ray Data stage stops on it instead of retrying the batch."""


def user_error(err: BaseException | None) -> HalluscopeError | str | None:
    """A HalluscopeError, also when a Ray worker raised it: Ray wraps it in its own exceptions
    and only the traceback text keeps it, as "halluscope.errors.<Class>: <message>"."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, HalluscopeError):
            return err
        seen.add(id(err))
        found = re.findall(r"halluscope\.errors\.\w+: (.+)", str(err))
        if found:
            return found[-1]
        err = getattr(err, "cause", None) or err.__cause__
    return None


def error_summary(err: BaseException) -> str:
    """One line for a manifest: the user error's message, else the exception's type and the last
    line of its text (a Ray task error's text is the worker's whole traceback)."""
    found = user_error(err)
    if found is not None:
        return str(found)
    lines = [line for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[-1].strip() if lines else ''}"[:500]
