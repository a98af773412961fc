"""One call counter for every stage and job that calls models: calls, cache hits, failures, tokens."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from halluscope.contract.completion import Completion

# no model's context holds more: a count beyond it is no count of a call's tokens
MAX_TOKENS_PER_CALL = 10_000_000


def reported_tokens(usage: Any) -> tuple[int | None, int | None] | str:
    """The prompt and completion tokens an answer's ``usage`` reports (None where it reports none),
    or why they cannot be billed: a negative, fractional, non-finite or impossibly large count
    would make a cost negative or unbounded, so the call fails instead of being believed."""
    counts: list[int | None] = []
    for name in ("prompt_tokens", "completion_tokens"):
        value = getattr(usage, name, None)
        if value is None:
            counts.append(None)
            continue
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
            and float(value).is_integer() and 0 <= value <= MAX_TOKENS_PER_CALL
        if not ok:
            return f"usage.{name} {str(value)[:40]!r} is not a count of tokens (0 to {MAX_TOKENS_PER_CALL:,})"
        counts.append(int(value))
    return counts[0], counts[1]


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
            if c.cached:
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
