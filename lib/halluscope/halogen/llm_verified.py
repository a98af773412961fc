"""What HALOGEN's LLM-verified tasks share: extractor decomposition into facts, judge verdicts.

A failed call or an answer that cannot be read is never counted as supported: a failed or
unreadable extraction fails its row (counted in the task's errors), and a failed or unreadable
judge answer leaves its atom unverified (counted in ``n_unverified``, excluded from H).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Protocol

import halluscope.halogen.paper as paper
import halluscope.halogen.prompts as prompts
from halluscope.contract.completion import Completion
from halluscope.contract.cost_rules import Shape, Size, StageRule, once
from halluscope.contract.replies import excerpt, parse_list, parse_yes_no, reply_text
from halluscope.contract.roles import RoleCall
from halluscope.contract.task import Item, Verdict
from halluscope.halogen.steps import FACTS


def listed_items(reply: Completion, role: str, what: str) -> list[str]:
    """Items of an extractor answer; raises when the answer lists nothing and does not say so."""
    text = reply_text(reply, role)
    parsed = parse_list(text)
    if not parsed.items and not parsed.explicit_none:
        raise ValueError(f"unreadable {role} answer (no {what} found): {excerpt(text)!r}")
    return parsed.items


def judge_verdict(reply: Completion) -> Verdict:
    """Yes: supported; No: unsupported; a failed call or an unreadable answer: unverified."""
    if reply.error is not None or reply.text is None:
        return Verdict(None, f"judge call failed: {reply.error or 'no text'}")
    return _judged(reply.text)


@lru_cache(maxsize=4096)
def _judged(answer: str) -> Verdict:
    """The verdict an answer gives. Judges answer in a few words ("Yes", "No"), the same ones
    over and over, and a verdict is immutable: each distinct answer is read once."""
    decided = parse_yes_no(answer)
    if decided is None:
        return Verdict(None, f"unreadable judge answer: {excerpt(answer)!r}")
    return Verdict(decided, f"judge: {excerpt(answer, 200)}")


# FactsByExtractor's cost: one call per response; the facts restate it, so output ~ G
FACTS_RULE = StageRule("decompose", "extractor", once, lambda s: s.tokens(prompts.facts_prompt("")) + s.G,
                       lambda s: s.G, prompts.FACTS)


def parse_rule(template: Size, template_id: str) -> StageRule:
    """The paper's parse step: one extractor call per response (``template``: the prompt's own
    tokens; ``template_id``: its ``RoleCall.template``), a short parse back."""
    return StageRule("decompose", "extractor", once, lambda s: template(s) + s.G, _parse_tokens, template_id)


def _parse_tokens(s: Shape) -> float:
    return s.o.parse_tokens


class _RecordedCaller(Protocol):
    """What ``FactsByExtractor`` needs of the task it is mixed into (``HalogenTask`` provides it)."""

    def recorded_call(self, role: str, step: str, prompts: list[str], template: str, text: str, item: Item,
                      units: list[str] | None = None) -> RoleCall: ...


class FactsByExtractor:
    """D: the extractor breaks the response into independent facts (one call per response).
    An answer on record is in the authors' layout (one "| fact |" per line), split as their
    scorer splits it; a live answer is a list. Mixed into a ``HalogenTask``."""

    decomposer = f"extractor:{prompts.FACTS}"

    def decompose_call(self: _RecordedCaller, text: str, item: Item) -> RoleCall | None:
        return self.recorded_call("extractor", FACTS, [prompts.facts_prompt(text)], prompts.FACTS, text, item)

    def decompose(self, text: str, item: Item, replies: Sequence[Completion] = ()) -> list[str]:
        if replies[0].extra.get("recorded"):
            return paper.recorded_units(reply_text(replies[0], "extractor"))
        return listed_items(replies[0], "extractor", "facts")
