"""HALOGEN summarization and simplification: every fact of the output must follow from the input.

A fact is hallucinated when the judge finds it not entailed by the source text, even when it is
true of the world (the paper's definition for content-grounded tasks)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from halluscope.models.base import Completion
from halluscope.tasks.base import Item, RoleCall, Verdict
from halluscope.tasks.halogen import prompts
from halluscope.tasks.halogen.common import ABSTENTION_RULE, HalogenTask, abstained
from halluscope.tasks.halogen.llm_verified import FactsByExtractor, judge_verdict


class GroundedFacts(FactsByExtractor, HalogenTask):
    kind = "response"
    abstention_rule = ABSTENTION_RULE
    verifier = f"judge:{prompts.ENTAILMENT}"
    roles = ("extractor", "judge")

    def __init__(self, name: str, prompt_file: str, response_dir: str) -> None:
        self.name = name
        self.prompt_file = prompt_file
        self.response_dir = response_dir

    def item_fields(self, row: Mapping[str, str], where: str) -> dict[str, Any]:
        source = (row.get("text") or "").strip()
        if not source:
            raise ValueError(f"{where} column 'text': empty source text")
        return {"source": source}

    def responded(self, text: str, item: Item, replies: Sequence[Completion] = ()) -> bool:
        return not abstained(text)

    def verify_call(self, atoms, text, item, kb) -> RoleCall | None:
        source = item.fields["source"]
        return RoleCall("judge", tuple(prompts.entailment_prompt(source, a) for a in atoms), prompts.ENTAILMENT)

    def verify(self, atoms, text, item, kb, replies: Sequence[Completion] = ()) -> list[Verdict]:
        return [judge_verdict(r) for r in replies]


def summarization() -> GroundedFacts:
    return GroundedFacts("halogen/summarization", "prompts_summarization.csv.gz", "summarization")


def simplification() -> GroundedFacts:
    return GroundedFacts("halogen/simplification", "prompts_simplification.csv.gz", "simplification")
