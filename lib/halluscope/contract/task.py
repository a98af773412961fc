"""What a task is: a prompt set, a refusal rule R, a decomposition engine D and a verifier V."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from halluscope.contract.roles import Calls, RoleName

if TYPE_CHECKING:
    from pydantic import BaseModel

    from halluscope.contract.completion import Completion
    from halluscope.contract.cost_rules import StageRule
    from halluscope.sources import DataResolver
    from halluscope.storage.fs import Location

# What a task's verifier reads (a package index, retrieved passages, ...): the engine hands each task
# the knowledge object of the run, loaded once per worker; the contract names no type of it.
K = TypeVar("K")


@dataclass(frozen=True)
class Item:
    task: str
    item_id: str
    prompt: str
    fields: Mapping[str, Any] = field(default_factory=dict)
    source_row: int = -1

    def fields_json(self) -> str:
        return json.dumps(dict(self.fields), sort_keys=True, ensure_ascii=False)


@dataclass(frozen=True)
class Verdict:
    supported: bool | None  # None: the verifier could not decide; never counted either way
    evidence: str = ""


@dataclass
class LoadedItems:
    items: list[Item]
    # data files read, relative name -> sha256, for the manifest
    sources: dict[str, str] = field(default_factory=dict)

    @cached_property
    def by_id(self) -> dict[str, Item]:
        """item id -> item, built once per process that looks rows' items up."""
        return {i.item_id: i for i in self.items}


class Task(ABC, Generic[K]):
    """A benchmark task. Instances are stateless and picklable: knowledge comes in per call.

    A task that calls role models (``roles``) must also say what those calls cost: override
    ``cost_rules`` to return one ``tasks.cost_rules.StageRule`` per (stage, role) a phase calls,
    sized from the generation's ``Shape`` (calls per generation, input and output tokens per call;
    ``Shape.tokens`` of a template rendered with empty inputs gives its fixed overhead). The cost
    estimate (``halluscope plan``, ``costs.budget_usd``) refuses a run with a task that has roles
    and no rules."""

    name: str
    kind: Literal["response", "refusal"]
    abstention_rule: str  # versioned id of R
    decomposer: str  # versioned id of D
    verifier: str  # versioned id of V
    # knowledge sources V needs, loaded once per worker; one named like a field of its benchmark's
    # options (``wiki``) must be set there, which the config checks
    knowledge: tuple[str, ...] = ()
    roles: tuple[RoleName, ...] = ()  # role models the task calls; a run must configure each
    # refusal tasks whose decomposition finds no atom count the response as an abstention
    empty_is_abstention: bool = False
    # items come from generated test sets, which a run must list under testsets.<task>
    needs_testsets: bool = False

    @abstractmethod
    def load_items(self, resolver: DataResolver, testsets: Sequence[Location] = (),
                   options: BaseModel | None = None) -> LoadedItems:
        """The task's items: from released files, from the generated test sets the run lists, or
        from files its benchmark's options name (``options``: the run's validated section)."""

    # Each phase may first ask a role model: ``*_call`` returns the prompts (or None), and the
    # phase method then gets one reply per prompt, in order. Program-only tasks ignore replies.

    def abstain_call(self, text: str, item: Item) -> Calls:
        return None

    def decompose_call(self, text: str, item: Item) -> Calls:
        return None

    def verify_call(self, atoms: list[str], text: str, item: Item, kb: K) -> Calls:
        return None

    @abstractmethod
    def responded(self, text: str, item: Item, replies: Sequence[Completion] = ()) -> bool:
        """R(y): True when the model answered rather than abstained."""

    @abstractmethod
    def decompose(self, text: str, item: Item, replies: Sequence[Completion] = ()) -> list[str]:
        """D(y): the atomic units of a response (only called when R(y) = 1)."""

    @abstractmethod
    def verify(self, atoms: list[str], text: str, item: Item, kb: K,
               replies: Sequence[Completion] = ()) -> list[Verdict]:
        """V: one verdict per atom, in order."""

    def cost_rules(self, options: BaseModel | None = None) -> tuple[StageRule, ...]:
        """The role-model calls one generation makes, per stage, for the cost estimate; a task
        that calls no role model makes none. ``options``: its benchmark's section of the run
        config, for a task whose calls depend on it (e.g. the reference models it asks)."""
        return ()

    def replay_file(self, model_name: str, which: Literal["released", "recorded"]) -> str | None:
        """The data name of a model's responses to this task that its benchmark released
        (``released``), or the ones its published numbers were computed from (``recorded``); None
        when that model has none here. Raises LookupError where the benchmark released none."""
        raise LookupError(f"task {self.name} has no {which} responses")

    def replay_group(self, record: Mapping[str, Any]) -> str:
        """What repeats of a recorded row are counted over (its ``occurrence``): the
        whitespace-normalised prompt, unless a task's rows are identified otherwise."""
        return " ".join(str(record.get("prompt", "")).split())

    def replay_keys(self, record: Mapping[str, str]) -> list[str]:
        """Keys that join a recorded generation to an item, tried in order.

        The default is the whitespace-normalised prompt; ``record`` is an item's fields plus its
        prompt, or a recorded row's columns. Duplicated prompts are told apart by occurrence."""
        return ["prompt:" + " ".join(str(record.get("prompt", "")).split())]

    def utility(self, responded: bool, f: float | None) -> float:
        """g(x): response tasks reward a correct answer, refusal tasks reward abstaining."""
        if self.kind == "refusal":
            return 0.0 if responded else 1.0
        return (1.0 - (f or 0.0)) if responded else 0.0

    def describe(self) -> dict[str, str]:
        return {"task": self.name, "kind": self.kind, "abstention_rule": self.abstention_rule,
                "decomposer": self.decomposer, "verifier": self.verifier}
