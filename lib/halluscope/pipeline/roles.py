"""The run's judge and extractor as the verifying actors call them: batched, cached, accounted.

One phase of one batch sends every row's prompts for a role in one ``generate_batch``, so they
are in flight together; answers come back to the rows that asked. Each call's tokens are
recorded per (generation, stage, role) for the cost ledger; answers from the call cache are
counted apart and cost nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace

from halluscope.config.schema import ModelSpec
from halluscope.contract.completion import Completion
from halluscope.contract.roles import AnswerFormat, RoleCall
from halluscope.models.base import GenerationRequest, ModelBackend
from halluscope.models.cache import CachedBackend
from halluscope.models.recorded import Answers, RecordedBackend
from halluscope.models.registry import live_backend, revision_of, sampling_of
from halluscope.models.usage import Usage
from halluscope.sources import DataResolver
from halluscope.storage.fs import Location

Entry = tuple[str, int, str, str, AnswerFormat | None]  # row key, reply slot, prompt, content key, format


def role_models(models: Sequence[ModelSpec]) -> dict[str, list[ModelSpec]]:
    """role -> the models that play it (one judge and one extractor at most; references, any number)."""
    out: dict[str, list[ModelSpec]] = defaultdict(list)
    for m in models:
        if m.role != "test":
            out[m.role].append(m)
    return dict(out)


class RoleModels:
    def __init__(self, models: Sequence[ModelSpec], endpoints: dict, cache: Location | None,
                 resolver: DataResolver | None = None, clients: int = 1) -> None:
        """``clients``: the Evaluate actors that each hold a RoleModels; their calls to one role
        model together stay within its endpoint's capacity."""
        self.specs = role_models(models)
        self._clients = clients
        self._endpoints = endpoints
        self._cache = cache
        self._resolver = resolver
        self._backends: dict[tuple[str, str, str | None], ModelBackend] = {}
        self._recorded: dict[tuple[str, str], Answers] = {}  # shared by every recorded backend

    def _spec(self, role: str, model: str | None) -> ModelSpec:
        players = self.specs.get(role, [])
        if model is None:
            if len(players) != 1:
                raise RuntimeError(f"a task needs the {role} model but the run configures {len(players)}")
            return players[0]
        spec = next((m for m in players if m.id == model), None)
        if spec is None:
            raise RuntimeError(f"a task asks {role} model '{model}' but the run's {role} models are "
                               f"{[m.id for m in players]}")
        return spec

    def _backend(self, role: str, template: str, model: str | None) -> ModelBackend:
        key = (role, template, model)
        if key not in self._backends:
            spec = self._spec(role, model)
            if spec.backend == "recorded":
                # answers on record cost nothing and depend on the model under test, which a
                # cache keyed by the prompt would merge: they are looked up, never cached
                if self._resolver is None:
                    raise RuntimeError(f"recorded {role} '{spec.id}' needs the run's data resolver")
                self._backends[key] = RecordedBackend(spec.id, spec.params.steps, self._resolver,
                                                       self._recorded)
                return self._backends[key]
            backend = live_backend(spec, self._endpoints.get(spec.id), self._clients)
            if self._cache is not None:
                backend = CachedBackend(backend, self._cache, revision_of(spec), template,
                                        sampling_of(spec).as_dict())
            self._backends[key] = backend
        return self._backends[key]

    def answer(self, calls: Mapping[str, Sequence[RoleCall]], stage: str, usage: dict[str, list[dict]],
               subjects: dict[str, str] | None = None) -> dict[str, list[Completion]]:
        """Replies per row key (the generation id), one per prompt of its calls in order; usage is
        added to ``usage``. ``subjects`` maps a row key to its model under test (what a recorded
        role looks up), and each prompt carries its call's answer format. Each (role, template, model)
        gets one ``generate_batch`` per phase."""
        groups: dict[tuple[str, str, str | None], list[Entry]] = defaultdict(list)
        sizes: dict[str, int] = {}
        for key, row_calls in calls.items():
            i = 0
            for call in row_calls:
                if not call.prompts:
                    continue
                group, keys, fmt = groups[(call.role, call.template, call.model)], call.keys, call.answer_format
                for j, prompt in enumerate(call.prompts):
                    group.append((key, i, prompt, keys[j] if keys else "", fmt))
                    i += 1
            sizes[key] = i
        replies: dict[str, list[Completion | None]] = {k: [None] * n for k, n in sizes.items()}
        subject_of = subjects or {}
        for (role, template, model), entries in groups.items():
            backend = self._backend(role, template, model)
            if isinstance(backend, RecordedBackend):
                done, answered_by = _ask_recorded(backend, entries, subject_of)
            else:
                done, answered_by = _ask(backend, f"{role}:{template}", entries, subject_of)
            per_row: dict[str, list[Completion]] = {}
            paid: set[int] = set()
            for (key, i, _, _, _), j in zip(entries, answered_by):
                completion = done[j] if j not in paid else replace(done[j], extra={**done[j].extra, "cached": True})
                paid.add(j)
                replies[key][i] = completion
                per_row.setdefault(key, []).append(completion)
            for key, completions in per_row.items():
                usage[key].append({"stage": stage, "role": role, "role_model": backend.model_id,
                                   **Usage().add(completions).as_dict()})
        return {k: [c for c in v if c is not None] for k, v in replies.items()}


def _ask(backend: ModelBackend, task: str, entries: Sequence[Entry],
         subject_of: Mapping[str, str]) -> tuple[list[Completion], list[int]]:
    """The group's completions and, per entry, the one that answers it. Rows asking the same (e.g.
    FEWL's neighbour questions) share one call: the first asker pays for it, the others get a copy
    counted as a cache hit."""
    asked: dict[tuple[str, str, str, AnswerFormat | None], int] = {}
    requests: list[GenerationRequest] = []
    answered_by: list[int] = []
    for key, i, prompt, ckey, fmt in entries:
        subject = subject_of.get(key, "")
        j = asked.setdefault((prompt, ckey, subject, fmt), len(requests))
        if j == len(requests):
            requests.append(GenerationRequest(task, f"{key}:{i}", prompt, ckey, subject, answer_format=fmt))
        answered_by.append(j)
    return backend.generate_batch(requests), answered_by


def _ask_recorded(backend: RecordedBackend, entries: Sequence[Entry],
                  subject_of: Mapping[str, str]) -> tuple[list[Completion], list[int]]:
    """As ``_ask``, for answers on record: one depends on its content key and the model under test
    alone, so those are what makes two questions the same, and no request is built (a recorded
    demo asks some 700,000 of them)."""
    asked: dict[tuple[str, str, AnswerFormat | None], int] = {}
    asks: list[tuple[str, str]] = []
    answered_by: list[int] = []
    for key, _, _, ckey, fmt in entries:
        subject = subject_of.get(key, "")
        j = asked.setdefault((ckey, subject, fmt), len(asks))
        if j == len(asks):
            asks.append((ckey, subject))
        answered_by.append(j)
    return backend.answer_keys(asks), answered_by
