"""How a task sizes its role-model calls for the cost estimate (``halluscope plan``).

A task that calls role models declares, in ``Task.cost_rules``, one ``StageRule`` per (stage,
role, role model) it calls: how many calls one generation makes there and how large they are, as functions
of the generation's ``Shape``. The rules live with the task because only the task knows which
phase asks which role, once or per atom, with which template; the engine's estimate
(pipeline/estimate.py) applies them without naming any task."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from halluscope.contract.roles import AnswerFormat, RoleName


class SizeAssumptions(BaseModel):
    """The sizes a rule may read; the estimate's options (serving.throughput.PlanOptions) extend them."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    tokens_per_word: float = Field(1.3, gt=0)
    fill_factor: float = Field(0.5, gt=0, le=1, description="share of max_tokens a generation uses")
    words_per_fact: float = Field(8.0, gt=0, description="an atomic fact restates about one clause")
    words_per_sentence: float = Field(20.0, gt=0, description="LongWiki extracts claims per sentence")
    words_per_title: float = Field(7.0, gt=0, description="a cited title (HALOGEN's recorded titles: 6.8 words)")
    parse_tokens: int = Field(32, ge=1, description="an extractor's parse: a number, names or items (HALOGEN's "
                                                    "recorded parses: 12-25 words on average per task)")
    verdict_tokens: int = Field(5, ge=1, description="a Yes/No or label answer")
    json_verdict_tokens: int = Field(12, ge=1, description='a {"is_...": true} answer')
    answer_tokens: int = Field(10, ge=0, description="a PreciseWikiQA gold answer in the judge prompt")


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
    """Calls one generation makes in a stage and their sizes (before the role model's max_tokens).

    ``template`` and ``answer_format`` are its calls' (``RoleCall``'s): two tasks whose rules give
    the same ones put a generation the same prompts (a rule set's twin tasks do), which the call
    cache answers once; None: not known to share. ``model``: the role model asked, where the role
    has several (``RoleCall.model``); None: the role's only one."""

    stage: str  # abstain | decompose | verify, as the stage records its role calls
    role: RoleName
    calls: Size
    input_tokens: Size
    output_tokens: Size
    template: str | None = None
    answer_format: AnswerFormat | None = None
    model: str | None = None


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
