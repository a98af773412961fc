"""What a model call returns, to the engine and to the task that reads a role model's reply.

Failures are data: a call that failed after its retries has ``error`` set and no text."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Completion:
    text: str | None
    input_tokens: int | None = None
    output_tokens: int | None = None
    latency_s: float = 0.0
    error: str | None = None
    attempts: int = 1
    # answered without a call of its own (the call cache, or an equal prompt of its batch): the
    # ledger counts it as a hit, at no cost
    cached: bool = False
    extra: dict = field(default_factory=dict)
