"""Errors a user can act on: each names the file, field or row at fault."""


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
