"""HALOGEN scientific attribution: prompts ask for references supporting false claims.

D: the extractor copies each cited title (real output cites in APA, IEEE, "title" by author and
free prose, which a title regex misses). V: each title is looked up in a scholarly index
(offline normalised-title index or Semantic Scholar; the match rule is in the manifest). A
response that cites no title has abstained, as in the authors' scorer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import halluscope.halogen.paper as paper
import halluscope.halogen.prompts as prompts
from halluscope.contract.completion import Completion
from halluscope.contract.cost_rules import StageRule, once, verdict
from halluscope.contract.replies import reply_text
from halluscope.contract.roles import RoleCall, RoleName
from halluscope.contract.task import Item, Verdict
from halluscope.halogen.common import HalogenTask
from halluscope.halogen.llm_verified import judge_verdict, listed_items
from halluscope.halogen.options import options_of
from halluscope.halogen.steps import TITLE_FOUND, TITLES

if TYPE_CHECKING:
    from pydantic import BaseModel

# one title extraction per response; the cited titles are part of it (half assumed)
_TITLES_RULE = StageRule("decompose", "extractor", once, lambda s: s.tokens(prompts.titles_prompt("")) + s.G,
                         lambda s: 0.5 * s.G, prompts.TITLES)
# paper: one judge call per cited title (the authors' Semantic Scholar lookup)
_TITLE_FOUND_RULE = StageRule("verify", "judge", lambda s: s.titles,
                              lambda s: s.tokens(prompts.title_found_prompt("")) + s.title_tokens, verdict,
                              prompts.TITLE_FOUND)


class References(HalogenTask):
    base_name = "halogen/references"
    kind = "refusal"
    decomposer = f"extractor:{prompts.TITLES}"
    roles: tuple[RoleName, ...] = ("extractor",)
    empty_is_abstention = True
    prompt_file = "prompts_references.csv.gz"
    response_dir = "references"

    def __init__(self, rules="paper") -> None:
        super().__init__(rules)
        self.abstention_rule += "+no-titles"
        # paper: the authors' Semantic Scholar lookups, on record (a judge role answers them);
        # corrected: the run's own title index
        self.verifier = "semantic-scholar-on-record-v1" if rules == "paper" else "scholarly-title-index-v1"
        self.knowledge = ("titles",) if rules == "corrected" else ()
        self.roles = ("extractor", "judge") if rules == "paper" else ("extractor",)

    def cost_rules(self, options: BaseModel | None = None) -> tuple[StageRule, ...]:
        """Corrected rules look titles up in the run's own index instead of asking the judge."""
        return (_TITLES_RULE, _TITLE_FOUND_RULE) if self.rules == "paper" else (_TITLES_RULE,)

    def decompose_call(self, text: str, item: Item) -> RoleCall | None:
        return self.recorded_call("extractor", TITLES, [prompts.titles_prompt(text)], prompts.TITLES, text, item)

    def decompose(self, text: str, item: Item, replies: Sequence[Completion] = ()) -> list[str]:
        if replies[0].extra.get("recorded"):  # the authors' extracted titles, as a list literal
            return [str(t) for t in paper.literal_list(reply_text(replies[0], "extractor"))]
        return listed_items(replies[0], "extractor", "titles")

    def verify_call(self, atoms, text, item, kb) -> RoleCall | None:
        if self.rules == "corrected":
            return None
        return self.recorded_call("judge", TITLE_FOUND, [prompts.title_found_prompt(a) for a in atoms],
                             prompts.TITLE_FOUND, text, item, atoms)

    def verify(self, atoms, text, item, kb, replies: Sequence[Completion] = ()) -> list[Verdict]:
        if self.rules == "paper":
            return [judge_verdict(r) for r in replies]
        spec = options_of(kb).titles
        if spec is None:  # the config requires it for this task: a task driven outside a run
            raise ValueError("benchmarks.halogen.titles is not configured")
        return [Verdict(m.supported, m.evidence) for m in map(kb.titles(spec).lookup, atoms)]
