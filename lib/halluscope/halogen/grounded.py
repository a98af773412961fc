"""HALOGEN summarization and simplification: every fact of the output must follow from the input.

A fact is hallucinated when the judge finds it not entailed by the source text, even when it is
true of the world (the paper's definition for content-grounded tasks)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import halluscope.halogen.prompts as prompts
from halluscope.contract.completion import Completion
from halluscope.contract.cost_rules import StageRule, per_fact, verdict
from halluscope.contract.roles import RoleCall
from halluscope.contract.task import Verdict
from halluscope.halogen.common import HalogenTask, normalize_prompt
from halluscope.halogen.llm_verified import FACTS_RULE, FactsByExtractor, judge_verdict
from halluscope.halogen.steps import FACT_VERDICT

if TYPE_CHECKING:
    from pydantic import BaseModel


class GroundedFacts(FactsByExtractor, HalogenTask):
    kind = "response"
    verifier = f"judge:{prompts.ENTAILMENT}"
    roles = ("extractor", "judge")

    def __init__(self, name: str, prompt_file: str, response_dir: str, rules="paper") -> None:
        self.base_name = name
        self.prompt_file = prompt_file
        self.response_dir = response_dir
        super().__init__(rules)

    def item_fields(self, row: Mapping[str, str], where: str) -> dict[str, Any]:
        source = (row.get("text") or "").strip()
        if not source:
            raise ValueError(f"{where} column 'text': empty source text")
        return {"source": source}

    def replay_group(self, record: Mapping[str, Any]) -> str:
        """Recorded rows carry the source as ``passage`` (quoted, maybe with the instruction
        after it) and no prompt: repeats are counted over the source text (the simplification
        prompts hold two texts twice)."""
        if "passage" in record:
            return normalize_prompt(_quoted(str(record["passage"])))
        return super().replay_group(record)

    def replay_keys(self, record: Mapping[str, Any]) -> list[str]:
        """Prompt first; then the source text and its occurrence, which joins the recorded files."""
        keys = super().replay_keys(record)
        source = record.get("source") or _quoted(str(record.get("passage") or ""))
        if source:
            keys.append(f"source:{normalize_prompt(source)}#{record.get('occurrence', 0)}")
        return keys

    def cost_rules(self, options: BaseModel | None = None) -> tuple[StageRule, ...]:
        """The facts extraction, then one entailment call per fact with the source (~ the item
        prompt) as premise."""
        return FACTS_RULE, StageRule(
            "verify", "judge", per_fact,
            lambda s: s.tokens(prompts.entailment_prompt("", "")) + s.P + s.fact_tokens, verdict, prompts.ENTAILMENT,
            self.verdict_format)

    def verify_call(self, atoms, text, item, kb) -> RoleCall | None:
        source = item.fields["source"]
        return self.recorded_call("judge", FACT_VERDICT, [prompts.entailment_prompt(source, a) for a in atoms],
                             prompts.ENTAILMENT, text, item, atoms, answer_format=self.verdict_format)

    def verify(self, atoms, text, item, kb, replies: Sequence[Completion] = ()) -> list[Verdict]:
        return [judge_verdict(r) for r in replies]


def _quoted(passage: str) -> str:
    """The source text of a recorded passage: the passage itself, or, where the authors kept
    the prompt's quotes (and an instruction after them), the text between the outer quotes."""
    passage = passage.strip()
    end = passage.rfind("'")
    return passage[1:end] if passage.startswith("'") and end > 0 else passage


def summarization(rules="paper") -> GroundedFacts:
    return GroundedFacts("halogen/summarization", "prompts_summarization.csv.gz", "summarization", rules)


def simplification(rules="paper") -> GroundedFacts:
    return GroundedFacts("halogen/simplification", "prompts_simplification.csv.gz", "simplification", rules)
