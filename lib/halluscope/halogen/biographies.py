"""HALOGEN biographies, FActScore-style: each atomic fact of a bio is checked against passages
retrieved from the person's Wikipedia article.

D: the extractor's independent facts. V: the top-k passages of the person's article by dense
retrieval (the fact is the query), then the judge decides whether they support the fact. A
person without an article leaves every fact unverified (counted), never supported. FActScore's
length penalty (gamma) is not applied: HALOGEN's H is the plain unsupported fraction."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import halluscope.halogen.prompts as prompts
from halluscope.contract.completion import Completion
from halluscope.contract.cost_rules import StageRule, per_fact, verdict
from halluscope.contract.roles import RoleCall
from halluscope.contract.task import Verdict
from halluscope.halogen.common import HalogenTask
from halluscope.halogen.llm_verified import FACTS_RULE, FactsByExtractor, judge_verdict
from halluscope.halogen.options import options_of
from halluscope.halogen.steps import FACT_VERDICT

if TYPE_CHECKING:
    from pydantic import BaseModel

_ASKED = re.compile(r"bio of\s+(['\"]?)(.+?)\1\s*[.?]?\s*$", re.IGNORECASE | re.DOTALL)


def _asked_name(prompt: str) -> str:
    """The person a prompt asks about ("Tell me a bio of 'Suthida'" -> Suthida): recorded
    files carry the prompt, not the name column."""
    m = _ASKED.search(prompt.strip())
    return m.group(2).strip() if m else ""


class Biographies(FactsByExtractor, HalogenTask):
    base_name = "halogen/biographies"
    kind = "response"
    verifier = f"wiki-retrieval+judge:{prompts.BIO_FACT}"
    knowledge: tuple[str, ...] = ("wiki",)
    roles = ("extractor", "judge")
    prompt_file = "prompts_biographies.csv.gz"
    response_dir = "biographies"

    def item_fields(self, row: Mapping[str, str], where: str) -> dict[str, Any]:
        name = (row.get("name") or "").strip()
        if not name:
            raise ValueError(f"{where} column 'name': empty")
        return {"name": name}

    def replay_keys(self, record: Mapping[str, Any]) -> list[str]:
        """Prompt first; then the person's name, which joins Llama-2-70B's file (its prompts
        quote the name: "Tell me a bio of 'Suthida'")."""
        keys = super().replay_keys(record)
        name = record.get("name") or _asked_name(str(record.get("prompt") or ""))
        if name:
            keys.append(f"name:{' '.join(str(name).split())}#{record.get('occurrence', 0)}")
        return keys

    def __init__(self, rules="paper") -> None:
        super().__init__(rules)
        # the paper variant also runs without an article store: a recorded judge needs none
        self.knowledge = ("wiki",) if rules == "corrected" else ()

    def cost_rules(self, options: BaseModel | None = None) -> tuple[StageRule, ...]:
        """The facts extraction, then one judge call per fact against the top_k retrieved
        passages; the prompt holds the person's name (~ the item prompt)."""
        return FACTS_RULE, StageRule(
            "verify", "judge", per_fact,
            lambda s: s.tokens(prompts.bio_fact_prompt("", [], "")) + s.evidence + s.fact_tokens + s.P, verdict,
            prompts.BIO_FACT, self.verdict_format)

    def verify_call(self, atoms, text, item, kb) -> RoleCall | None:
        name = item.fields["name"]
        spec = options_of(kb).wiki
        evidence = kb.wiki(spec).evidence(name, atoms) if spec is not None else [[] for _ in atoms]
        if evidence is None:
            return None
        return self.recorded_call("judge", FACT_VERDICT, [prompts.bio_fact_prompt(name, passages, atom)
                                                     for atom, passages in zip(atoms, evidence)],
                             prompts.BIO_FACT, text, item, atoms, answer_format=self.verdict_format)

    def verify(self, atoms, text, item, kb, replies: Sequence[Completion] = ()) -> list[Verdict]:
        if not replies:
            return [Verdict(None, f"no Wikipedia article for {item.fields['name']!r}")] * len(atoms)
        return [judge_verdict(r) for r in replies]
