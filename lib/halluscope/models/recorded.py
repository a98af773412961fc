"""A role model that answers from a benchmark's recorded pipeline instead of a live model.

Published results were computed from LLM steps (parses, extractions, judge answers) that the
authors recorded per response. Replaying those answers through the same role path a live judge
uses reproduces the published numbers with the run's own rules, costs nothing, and shows every
call in the ledger. A call is looked up by its content key (the step, the response, the unit)
for the model under test; a call with no record comes back as an error, counted and left
unverified, never guessed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from halluscope.contract.completion import Completion
from halluscope.models.base import GenerationRequest
from halluscope.models.provider import LocalProvider, ProviderKind
from halluscope.sources import DataResolver
from halluscope.task_registry import recorded_steps

if TYPE_CHECKING:
    from halluscope.config.schema import RecordedModel
    from halluscope.models.provider import Context

NO_RECORD = "no recorded answer for this call"

class Answers(Protocol):
    """content key -> the answer, or (the answer, notes on how its source file was produced)"""

    def get(self, key: str) -> str | tuple[str, dict] | None: ...


Replies = Callable[[DataResolver, str], Answers]


def load_provider(ref: str) -> Replies:
    """``package.module:function`` -> the function that maps (resolver, subject model) to the
    recorded answers by content key, one a registered benchmark declares (``recorded_steps``): a
    config names code, and is refused, only through the benchmarks installed."""
    declared = recorded_steps()
    fn = declared.get(ref)
    if fn is None:
        raise ValueError(f"recorded steps {ref!r} are not declared by a registered benchmark "
                         f"(declared: {', '.join(sorted(declared)) or 'none'})")
    return fn


class RecordedProvider(LocalProvider):
    """``shared``: answers by (provider, subject) that several backends fill and read, so the
    extractor and the judge of a run read a recorded file once between them, not once each."""

    cached = False  # answers on record cost nothing and depend on the model under test, not the prompt alone

    def __init__(self, model_id: str, provider: str, resolver: DataResolver,
                 shared: dict[tuple[str, str], Answers] | None = None) -> None:
        self.model_id = model_id
        self._ref = provider
        self._provider = load_provider(provider)
        self._resolver = resolver
        self._replies: dict[tuple[str, str], Answers] = {} if shared is None else shared

    def answer_keys(self, asks: Sequence[tuple[str, str]]) -> list[Completion]:
        """One completion per (content key, model under test): what is on record, or NO_RECORD. A
        key may list alternatives (one per way the item is joined), tried in order."""
        out = []
        subject, replies = "", None
        for key, asker in asks:
            if replies is None or asker != subject:  # a batch's rows are mostly one model's
                subject, replies = asker, self._for(asker)
            reply = None
            for k in key.split():
                reply = replies.get(k)
                if reply is not None:
                    break
            if reply is None:
                out.append(Completion(text=None, error=NO_RECORD, attempts=0))
            elif isinstance(reply, tuple):
                out.append(Completion(text=reply[0], input_tokens=0, output_tokens=0,
                                      extra={"recorded": True, **reply[1]}))
            else:
                out.append(Completion(text=reply, input_tokens=0, output_tokens=0, extra={"recorded": True}))
        return out

    def _for(self, subject: str) -> Answers:
        found = self._replies.get((self._ref, subject))
        if found is None:
            found = self._replies[(self._ref, subject)] = self._provider(self._resolver, subject)
        return found

    def answer(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        return self.answer_keys([(r.key, r.subject) for r in requests])


def _build(spec: RecordedModel, context: Context) -> RecordedProvider:
    """The ``recorded`` backend's factory: the run's resolver finds the files; the answers read are
    shared by the recorded providers of the process (the extractor's and the judge's)."""
    if context.resolver is None:
        raise RuntimeError(f"recorded model '{spec.id}' needs the run's data resolver")
    return RecordedProvider(spec.id, spec.params.steps, context.resolver, context.shared)


KIND = ProviderKind(_build)
