"""How a task sizes its role-model calls for the cost estimate (``halluscope plan``).

A task that calls role models declares, in ``Task.cost_rules``, one ``StageRule`` per (stage,
role) it calls: how many calls one generation makes there and how large they are, as functions
of the generation's ``Shape``. The rules live with the task because only the task knows which
phase asks which role, once or per atom, with which template; the engine's estimate
(pipeline/estimate.py) applies them without naming any task."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:
    from halluscope.tasks.base import RoleName


class SizeAssumptions(Protocol):
    """The estimate's size assumptions a rule may read (pipeline.estimate.PlanOptions has them)."""

    @property
    def tokens_per_word(self) -> float: ...
    @property
    def words_per_fact(self) -> float: ...
    @property
    def words_per_sentence(self) -> float: ...
    @property
    def words_per_title(self) -> float: ...
    @property
    def parse_tokens(self) -> int: ...
    @property
    def verdict_tokens(self) -> int: ...
    @property
    def json_verdict_tokens(self) -> int: ...
    @property
    def answer_tokens(self) -> int: ...


@dataclass(frozen=True)
class Shape:
    """What a stage's calls are sized from: per generation, the item prompt's tokens P and the
    generation's tokens G; ``evidence`` is the retrieved passages' tokens per judged fact."""

    P: float
    G: float
    evidence: float
    o: SizeAssumptions

    def tokens(self, text: str) -> float:
        """Tokens of a text, e.g. a template rendered with empty inputs (its fixed overhead)."""
        return len(text.split()) * self.o.tokens_per_word

    @property
    def facts(self) -> float:
        return self.G / self.o.tokens_per_word / self.o.words_per_fact

    @property
    def fact_tokens(self) -> float:
        return self.o.words_per_fact * self.o.tokens_per_word

    @property
    def title_tokens(self) -> float:
        return self.o.words_per_title * self.o.tokens_per_word

    @property
    def titles(self) -> float:
        """Cited titles: the half of the response the title extraction is assumed to copy."""
        return 0.5 * self.G / self.title_tokens

    @property
    def sentences(self) -> float:
        return max(1.0, self.G / self.o.tokens_per_word / self.o.words_per_sentence)


Size = Callable[[Shape], float]


@dataclass(frozen=True)
class StageRule:
    """Calls one generation makes in a stage and their sizes (before the role model's max_tokens)."""

    stage: str  # abstain | decompose | verify, as the stage records its role calls
    role: RoleName
    calls: Size
    input_tokens: Size
    output_tokens: Size


# The sizes most rules share. Rules assume every generation responds and every fact finds
# evidence: an upper bound, which a budget wants.

def once(_: Shape) -> float:
    """One call per generation."""
    return 1.0


def per_fact(s: Shape) -> float:
    """One call per atomic fact of the generation."""
    return s.facts


def verdict(s: Shape) -> float:
    """A Yes/No or label answer."""
    return s.o.verdict_tokens


def json_verdict(s: Shape) -> float:
    """A short JSON answer such as {"is_...": true}."""
    return s.o.json_verdict_tokens
