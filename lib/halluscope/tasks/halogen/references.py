"""HALOGEN scientific attribution: prompts ask for references supporting false claims.

D: the extractor copies each cited title (real output cites in APA, IEEE, "title" by author and
free prose, which a title regex misses). V: each title is looked up in a scholarly index
(offline normalised-title index or Semantic Scholar; the match rule is in the manifest). A
response that cites no title has abstained, as in the authors' scorer."""

from __future__ import annotations

from typing import Sequence

from halluscope.models.base import Completion
from halluscope.tasks.base import Item, RoleCall, Verdict
from halluscope.tasks.halogen import prompts
from halluscope.tasks.halogen.common import ABSTENTION_RULE, HalogenTask, abstained
from halluscope.tasks.halogen.llm_verified import listed_items


class References(HalogenTask):
    name = "halogen/references"
    kind = "refusal"
    abstention_rule = ABSTENTION_RULE + "+no-titles"
    decomposer = f"extractor:{prompts.TITLES}"
    verifier = "scholarly-title-index-v1"
    knowledge = ("titles",)
    roles = ("extractor",)
    empty_is_abstention = True
    prompt_file = "prompts_references.csv.gz"
    response_dir = "references"

    def responded(self, text: str, item: Item, replies: Sequence[Completion] = ()) -> bool:
        return not abstained(text)

    def decompose_call(self, text: str, item: Item) -> RoleCall | None:
        return RoleCall("extractor", (prompts.titles_prompt(text),), prompts.TITLES)

    def decompose(self, text: str, item: Item, replies: Sequence[Completion] = ()) -> list[str]:
        return listed_items(replies[0], "extractor", "titles")

    def verify(self, atoms, text, item, kb, replies: Sequence[Completion] = ()) -> list[Verdict]:
        return [Verdict(m.supported, m.evidence) for m in map(kb.titles.lookup, atoms)]
