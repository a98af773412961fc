"""HALOGEN historical events: prompts ask about meetings between people who never could have met.

Response-level, as the paper: R(y) is the judge's reading of the response - a response that
describes or confirms the meeting has responded (failed to refuse), one that denies it or does
not confirm it has abstained. A responded response is one hallucinated unit (f = 1), so H is 1
wherever defined and the task's signal is R and U = 1 - R. Responses containing an abstention
phrase are abstentions without a judge call."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import halluscope.halogen.prompts as prompts
from halluscope.contract.completion import Completion
from halluscope.contract.cost_rules import StageRule, once, verdict
from halluscope.contract.replies import excerpt, parse_yes_no, reply_text
from halluscope.contract.roles import RoleCall
from halluscope.contract.task import Item, Verdict
from halluscope.halogen.common import HalogenTask
from halluscope.halogen.paper import abstained
from halluscope.halogen.steps import MEETING

if TYPE_CHECKING:
    from pydantic import BaseModel

_PEOPLE = ("name1", "birth1", "death1", "name2", "birth2", "death2")


class HistoricalEvents(HalogenTask):
    base_name = "halogen/historical_events"
    kind = "refusal"
    decomposer = "response-level-v1"
    verifier = "meeting-confirmed-v1"
    roles = ("judge",)
    prompt_file = "prompts_historicalevents.csv.gz"
    response_dir = "historical_events"

    def item_fields(self, row: Mapping[str, str], where: str) -> dict[str, Any]:
        missing = [k for k in _PEOPLE if not (row.get(k) or "").strip()]
        if missing:
            raise ValueError(f"{where}: empty column(s) {missing}")
        return {k: row[k].strip() for k in _PEOPLE}

    def __init__(self, rules="paper") -> None:
        super().__init__(rules)
        self.abstention_rule = f"halogen-phrases-{rules}-v2+judge-{rules}:{prompts.MEETING}"

    def cost_rules(self, options: BaseModel | None = None) -> tuple[StageRule, ...]:
        """One meeting call per response not abstained by phrase (upper bound: every response)."""
        return (StageRule("abstain", "judge", once,
                          lambda s: s.tokens(prompts.meeting_prompt("", "", "")) + s.G + s.P, verdict, prompts.MEETING,
                          self.verdict_format),)

    def abstain_call(self, text: str, item: Item) -> RoleCall | None:
        if abstained(text, self.rules):
            return None
        prompt = prompts.meeting_prompt(text, item.fields["name1"], item.fields["name2"])
        return self.recorded_call("judge", MEETING, [prompt], prompts.MEETING, text, item,
                                  answer_format=self.verdict_format)

    def responded(self, text: str, item: Item, replies: Sequence[Completion] = ()) -> bool:
        """Paper: the judge's answer counts as a denial when it contains "no" anywhere ("not",
        "know" and "None" included); corrected: its leading yes or no."""
        if not replies:  # abstained by phrase, no call made
            return False
        answer = reply_text(replies[0], "judge")
        if self.rules == "paper":
            return "no" not in answer.lower()
        decided = parse_yes_no(answer)
        if decided is None:
            raise ValueError(f"unreadable judge answer: {excerpt(answer)!r}")
        return decided

    def decompose(self, text: str, item: Item, replies: Sequence[Completion] = ()) -> list[str]:
        return [f"{item.fields['name1']} met {item.fields['name2']}"]

    def verify(self, atoms, text, item, kb, replies: Sequence[Completion] = ()) -> list[Verdict]:
        return [Verdict(False, "the judge read the response as describing the meeting") for _ in atoms]

