"""One call counter for every stage and job that calls models: calls, cache hits, failures, tokens."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

from halluscope.contract.completion import Completion


@dataclass
class Usage:
    """Calls of one model in one stage; answers from the call cache are counted apart and cost nothing."""

    calls: int = 0
    cached_calls: int = 0
    failed_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    def add(self, completions: Iterable[Completion]) -> Usage:
        for c in completions:
            if c.extra.get("cached"):
                self.cached_calls += 1
                continue
            self.calls += 1
            self.failed_calls += c.error is not None
            self.input_tokens += c.input_tokens or 0
            self.output_tokens += c.output_tokens or 0
        return self

    def __add__(self, other: Usage) -> Usage:
        return Usage(**{k: v + getattr(other, k) for k, v in asdict(self).items()})

    def as_dict(self) -> dict:
        # by hand: dataclasses.asdict deep-copies, and this runs once per row that calls a model
        return {"calls": self.calls, "cached_calls": self.cached_calls, "failed_calls": self.failed_calls,
                "input_tokens": self.input_tokens, "output_tokens": self.output_tokens}
