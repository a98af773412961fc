"""The run's judge and extractor as the verifying actors call them: batched, cached, accounted.

One phase of one batch sends every row's prompts for a role in one ``generate_batch``, so they
are in flight together; answers come back to the rows that asked. Each call's tokens are
recorded per (generation, stage, role) for the cost ledger; answers from the call cache are
counted apart and cost nothing.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from halluscope.config import ModelSpec
from halluscope.models.base import Completion, GenerationRequest, ModelBackend
from halluscope.models.cache import CachedBackend
from halluscope.models.recorded import RecordedBackend
from halluscope.models.registry import live_backend, revision_of, sampling_of
from halluscope.models.usage import Usage
from halluscope.sources import DataResolver
from halluscope.storage.fs import Location
from halluscope.tasks.base import RoleCall

ROLES = ("judge", "extractor")


def role_models(models: Sequence[ModelSpec]) -> dict[str, ModelSpec]:
    """role -> the model that plays it (the config allows at most one per role)."""
    return {m.role: m for m in models if m.role in ROLES}


class RoleModels:
    def __init__(self, models: Sequence[ModelSpec], endpoints: dict, cache: Location | None,
                 resolver: DataResolver | None = None) -> None:
        self.specs = role_models(models)
        self._endpoints = endpoints
        self._cache = cache
        self._resolver = resolver
        self._backends: dict[tuple[str, str], ModelBackend] = {}

    def _backend(self, role: str, template: str) -> ModelBackend:
        key = (role, template)
        if key not in self._backends:
            spec = self.specs.get(role)
            if spec is None:
                raise RuntimeError(f"a task needs a {role} model but the run configures none")
            if spec.backend == "recorded":
                # answers on record cost nothing and depend on the model under test, which a
                # cache keyed by the prompt would merge: they are looked up, never cached
                if self._resolver is None:
                    raise RuntimeError(f"recorded {role} '{spec.id}' needs the run's data resolver")
                self._backends[key] = RecordedBackend(spec.id, spec.params.steps, self._resolver)
                return self._backends[key]
            backend = live_backend(spec, self._endpoints.get(spec.id))
            if self._cache is not None:
                backend = CachedBackend(backend, self._cache, revision_of(spec), template,
                                        sampling_of(spec).as_dict())
            self._backends[key] = backend
        return self._backends[key]

    def answer(self, calls: dict[str, RoleCall], stage: str, usage: dict[str, list[dict]],
               subjects: dict[str, str] | None = None) -> dict[str, list[Completion]]:
        """Replies per row key (the generation id), one per prompt; usage is added to ``usage``.
        ``subjects`` maps a row key to its model under test (what a recorded role looks up)."""
        groups: dict[tuple[str, str], list[tuple[str, int, str, str]]] = defaultdict(list)
        for key, call in calls.items():
            for i, prompt in enumerate(call.prompts):
                groups[(call.role, call.template)].append((key, i, prompt, call.keys[i] if call.keys else ""))
        replies: dict[str, list[Completion | None]] = {k: [None] * len(c.prompts) for k, c in calls.items()}
        for (role, template), entries in groups.items():
            backend = self._backend(role, template)
            done = backend.generate_batch([
                GenerationRequest(f"{role}:{template}", f"{key}:{i}", prompt, ckey, (subjects or {}).get(key, ""))
                for key, i, prompt, ckey in entries])
            per_row: dict[str, Usage] = defaultdict(Usage)
            for (key, i, _, _), completion in zip(entries, done):
                replies[key][i] = completion
                per_row[key].add([completion])
            for key, u in per_row.items():
                usage[key].append({"stage": stage, "role": role, "role_model": backend.model_id, **u.as_dict()})
        return {k: [c for c in v if c is not None] for k, v in replies.items()}
