"""The run's judge and extractor as the verifying actors call them: batched, cached, accounted.

One phase of one batch sends every row's prompts for a role in one ``generate_batch``, so they
are in flight together; answers come back to the rows that asked. Each call's tokens are
recorded per (generation, stage, role) for the cost ledger; answers from the call cache are
counted apart and cost nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from halluscope.config.schema import ModelSpec
from halluscope.contract.completion import Completion
from halluscope.contract.roles import AnswerFormat, RoleCall
from halluscope.models.base import GenerationRequest, ModelBackend
from halluscope.models.model import first_asks, spread
from halluscope.models.registry import Context, client
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
        self._shared: dict = {}  # answers the providers of this process share (a recorded file, read once)

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
            context = Context(self._endpoints.get(spec.id), self._clients, self._resolver, self._shared)
            self._backends[key] = client(spec, context, self._cache, template)
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
            by_key = getattr(backend, "by_key", None)
            # an answer on record depends on its content key and the model under test alone: for
            # a role answered ``by_key`` those make two questions the same, prompts not compared
            subject = [subject_of.get(key, "") for key, *_ in entries]
            first = first_asks([(ckey, subject[n], fmt) + (() if by_key is not None else (prompt,))
                                for n, (_, _, prompt, ckey, fmt) in enumerate(entries)])
            asked = sorted(set(first))
            if by_key is not None:  # no request built: ~700,000 of them in the demo
                done = by_key([(entries[a][3], subject[a]) for a in asked])
            else:
                done = backend.generate_batch([
                    GenerationRequest(f"{role}:{template}", f"{key}:{i}", prompt, ckey, subject[a], answer_format=fmt)
                    for a in asked for key, i, prompt, ckey, fmt in (entries[a],)])
            per_row: dict[str, list[Completion]] = {}
            for (key, i, _, _, _), completion in zip(entries, spread(first, dict(zip(asked, done)))):
                replies[key][i] = completion
                per_row.setdefault(key, []).append(completion)
            for key, completions in per_row.items():
                usage[key].append({"stage": stage, "role": role, "role_model": backend.model_id,
                                   **Usage().add(completions).as_dict()})
        return {k: [c for c in v if c is not None] for k, v in replies.items()}
