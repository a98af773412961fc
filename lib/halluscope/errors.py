"""Errors a user can act on: each names the file, field or row at fault."""

import re


class HalluscopeError(Exception):
    """Base class; the CLI prints these without a traceback."""


class ConfigError(HalluscopeError):
    """A run configuration is malformed or names something that does not exist."""


class DataError(HalluscopeError):
    """A data source is missing, unreachable or unreadable."""


class RunError(HalluscopeError):
    """A run cannot start or continue (e.g. resuming with a different config)."""


class Superseded(RunError):
    """A resubmission of the same run id took the run over; this attempt must not commit."""


class EndpointDown(HalluscopeError):
    """A model endpoint failed so many calls in a row that the stage stops (circuit breaker)."""


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
