"""A model provider in one file: canned replies, looked up by a word of the prompt.

What a provider writes is one call and how its failures read; everything around the call is the
engine's model: retries with backoff, the limit of calls in flight, the timeout, the breaker, the
call cache and the count of calls and tokens for the ledger. Its config is its own pydantic
model, validated when the run config is read. A real provider's ``call`` would send the prompts
to its service; this one answers from its table and, with ``busy_first``, says "busy" to each
prompt's first attempt, so a run shows the engine retrying it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from halluscope.contract.completion import Completion
from halluscope.models.base import GenerationRequest
from halluscope.models.provider import CallLimits, Context, ProviderKind, RemoteProvider, Retry


class CannedParams(BaseModel):
    """A ``backend: canned`` model's ``params``."""

    model_config = ConfigDict(extra="forbid")
    replies: dict[str, str] = Field(description="a reply per word: the first word found in the prompt answers")
    default: str = "I don't know."
    busy_first: bool = Field(default=False, description="answer each prompt's first attempt with a busy error")
    max_concurrency: int = Field(default=4, ge=1)


class CannedProvider(RemoteProvider):
    LIVE: ClassVar[tuple[str, ...]] = ("_tried",)

    def __init__(self, model_id: str, params: CannedParams) -> None:
        self.model_id = model_id
        self.params = params
        self.limits = CallLimits(calls_in_flight=params.max_concurrency, backoff_base_s=0.01, backoff_max_s=0.05)
        self._tried: set[str] | None = None

    async def open(self) -> None:
        self._tried = set()

    async def call(self, requests: Sequence[GenerationRequest]) -> list[Completion | Retry]:
        assert self._tried is not None
        out: list[Completion | Retry] = []
        for r in requests:
            if self.params.busy_first and r.prompt not in self._tried:
                self._tried.add(r.prompt)
                out.append(Retry("busy: try again"))
                continue
            replies = self.params.replies
            text = next((reply for word, reply in replies.items() if word in r.prompt), self.params.default)
            out.append(Completion(text, input_tokens=len(r.prompt.split()), output_tokens=len(text.split())))
        return out


def _build(spec: Any, context: Context) -> CannedProvider:
    return CannedProvider(spec.id, spec.params)


KIND = ProviderKind(_build, params=CannedParams, billing="free")
