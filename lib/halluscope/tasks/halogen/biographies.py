"""HALOGEN biographies, FActScore-style: each atomic fact of a bio is checked against passages
retrieved from the person's Wikipedia article.

D: the extractor's independent facts. V: the top-k passages of the person's article by dense
retrieval (the fact is the query), then the judge decides whether they support the fact. A
person without an article leaves every fact unverified (counted), never supported. FActScore's
length penalty (gamma) is not applied: HALOGEN's H is the plain unsupported fraction."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from halluscope.models.base import Completion
from halluscope.tasks.base import Item, RoleCall, Verdict
from halluscope.tasks.halogen import prompts
from halluscope.tasks.halogen.common import ABSTENTION_RULE, HalogenTask, abstained
from halluscope.tasks.halogen.llm_verified import FactsByExtractor, judge_verdict


class Biographies(FactsByExtractor, HalogenTask):
    name = "halogen/biographies"
    kind = "response"
    abstention_rule = ABSTENTION_RULE
    verifier = f"wiki-retrieval+judge:{prompts.BIO_FACT}"
    knowledge = ("wiki",)
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
        if record.get("name"):
            keys.append(f"name:{' '.join(str(record['name']).split())}#{record.get('occurrence', 0)}")
        return keys

    def responded(self, text: str, item: Item, replies: Sequence[Completion] = ()) -> bool:
        return not abstained(text)

    def verify_call(self, atoms, text, item, kb) -> RoleCall | None:
        name = item.fields["name"]
        evidence = kb.wiki.evidence(name, atoms)
        if evidence is None:
            return None
        return RoleCall("judge", tuple(prompts.bio_fact_prompt(name, passages, atom)
                                       for atom, passages in zip(atoms, evidence)), prompts.BIO_FACT)

    def verify(self, atoms, text, item, kb, replies: Sequence[Completion] = ()) -> list[Verdict]:
        if not replies:
            return [Verdict(None, f"no Wikipedia article for {item.fields['name']!r}")] * len(atoms)
        return [judge_verdict(r) for r in replies]
