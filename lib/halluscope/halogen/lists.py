"""HALOGEN's list tasks: rationalization (numerical) and false presuppositions.

Both use the entity list and the letter condition released with each prompt; the gold answer
(``list_condition``) is the members that satisfy the condition."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import halluscope.halogen.paper as paper
import halluscope.halogen.prompts as prompts
from halluscope.contract.cost_rules import StageRule
from halluscope.contract.replies import reply_text
from halluscope.contract.task import Item, Verdict
from halluscope.halogen.common import HalogenTask, parse_list_field
from halluscope.halogen.llm_verified import parse_rule
from halluscope.halogen.steps import PARSE

if TYPE_CHECKING:
    from pydantic import BaseModel

_REPEAT = Verdict(True, "repeat: counted once")


def _condition_key(condition: str) -> str:
    return {"contains": "contain", "starts with": "start with", "ends with": "end with"}.get(
        condition.strip().lower(), condition.strip().lower())


class _ListTask(HalogenTask):
    """The extractor parses the response (the paper's parse step); units are read from the parse."""

    roles = ("extractor",)

    def item_fields(self, row: Mapping[str, str], where: str) -> dict[str, Any]:
        universe = parse_list_field(row["list"], f"{where} column 'list'")
        gold = parse_list_field(row["list_condition"], f"{where} column 'list_condition'")
        unknown = sorted(set(gold) - set(universe))
        if unknown:
            raise ValueError(f"{where}: list_condition members {unknown} are not in 'list'")
        try:
            count = int(row["count"])
        except ValueError:
            raise ValueError(f"{where} column 'count': not an integer: {row['count']!r}") from None
        return {"list_name": row["list_name"], "condition": row["condition"], "letter": row["letter"],
                "universe": universe, "gold": gold, "count": count}

    def replay_keys(self, record: Mapping[str, Any]) -> list[str]:
        """Prompt first; then (list, condition, letter), which also joins the one released file
        whose prompts were worded differently (RedPajama-7B, false presuppositions)."""
        keys = super().replay_keys(record)
        if all(record.get(k) for k in ("list_name", "condition", "letter")):
            keys.append("list:" + "|".join([str(record["list_name"]).strip().lower(),
                                            _condition_key(str(record["condition"])),
                                            str(record["letter"]).strip().lower()]))
        return keys

    def parsed(self, replies) -> tuple[str, dict, bool]:
        """The parse, the notes a recorded answer carries about its file, and whether the parse
        copies the extraction prompt's worked example instead of reading the response."""
        text = reply_text(replies[0], "extractor")
        return text, replies[0].extra, paper.copies_few_shot(text)

    def _key(self, unit: str) -> str:
        """How a unit is compared with the gold list. Paper: lower case, outer spaces off;
        corrected: also a trailing period and a leading "the" ("The Bahamas." is "bahamas")."""
        key = unit.lower().strip()
        if self.rules == "corrected":
            key = key.rstrip(".").strip().removeprefix("the ").strip()
        return key

    def _verdicts(self, atoms: list[str], true: set[str], what: str) -> list[Verdict]:
        """The paper's set difference: a unit is hallucinated when it is not a true answer, each
        distinct unit once (a repeat is marked "#k" by the decomposition when the file counted repeats)."""
        true = {self._key(t) for t in true}
        # three verdicts at most, each made once (a verdict is immutable)
        satisfies, does_not = Verdict(True, f"satisfies: {what}"), Verdict(False, f"does not satisfy: {what}")
        seen: set[str] = set()
        out = []
        for atom in atoms:
            norm = self._key(atom)
            if self._key(atom.rsplit(" #", 1)[0]) in true:
                out.append(satisfies)
            elif norm in seen:
                out.append(_REPEAT)
            else:
                out.append(does_not)
            seen.add(norm)
        return out

    def condition(self, item: Item) -> str:
        return f"{item.fields['condition']} '{item.fields['letter']}'"


class RationalizationNumerical(_ListTask):
    """Units: the count the parse gives, then every item it lists; none when the parse does not
    start with a number. A count of 0 in the response's first line is right when nothing qualifies."""

    base_name = "halogen/rationalization_numerical"
    kind = "response"
    prompt_file = "prompts_rationalization_numerical.csv.gz"
    response_dir = "rationalization_numerical"

    def __init__(self, rules="paper") -> None:
        super().__init__(rules)
        self.decomposer = f"count+entities-from-parse-{rules}-v2:{prompts.PARSE_NUMERICAL}"
        self.verifier = f"gold-count+list-{rules}-v2"

    def cost_rules(self, options: BaseModel | None = None) -> tuple[StageRule, ...]:
        return (parse_rule(lambda s: s.tokens(prompts.parse_numerical_prompt("")), prompts.PARSE_NUMERICAL),)

    def decompose_call(self, text: str, item: Item):
        prompt = prompts.parse_numerical_prompt(text)
        return self.recorded_call("extractor", PARSE, [prompt], prompts.PARSE_NUMERICAL, text, item)

    def decompose(self, text: str, item: Item, replies=()) -> list[str]:
        parsed, _, copied = self.parsed(replies)
        count, entities = paper.count_and_entities(parsed)
        if copied and self.rules == "corrected":
            # the example's count and planets are not the response's: keep the number the
            # response's first line gives, and no items
            count, entities = paper.first_number(text), []
        if count is None:
            return []
        if item.fields["count"] == 0 and not item.fields["gold"] and paper.zero_answer(text):
            return []
        return [f"count: {count}", *entities]

    def verify(self, atoms, text, item, kb, replies=()) -> list[Verdict]:
        true = {str(item.fields["count"]), *item.fields["gold"]}
        counted = [a.removeprefix("count: ") for a in atoms]
        verdicts = self._verdicts(counted, true, self.condition(item))
        return [Verdict(v.supported, f"gold count {item.fields['count']}") if a.startswith("count: ") else v
                for a, v in zip(atoms, verdicts)]


class FalsePresuppositions(_ListTask):
    """Refusal-based: the prompt asks for more items than exist. A response that is not an
    abstention and does not say "no response" has responded (failed to refuse); listed items
    that break the condition are the hallucinated units."""

    base_name = "halogen/false_presuppositions"
    kind = "refusal"
    prompt_file = "prompts_falsepresupposition.csv.gz"
    response_dir = "numerical_falsepresupposition"

    def __init__(self, rules="paper") -> None:
        super().__init__(rules)
        self.abstention_rule = f"halogen-phrases-{rules}-v2+no-response"
        self.decomposer = f"items-from-parse-{rules}-v2:{prompts.PARSE_LIST}"
        self.verifier = f"gold-list-{rules}-v2"

    def item_fields(self, row: Mapping[str, str], where: str) -> dict[str, Any]:
        fields = super().item_fields(row, where)
        try:
            fields["n_requested"] = int(row["val"])
        except ValueError:
            raise ValueError(f"{where} column 'val': not an integer: {row['val']!r}") from None
        return fields

    def responded(self, text: str, item: Item, replies=()) -> bool:
        return not paper.abstained(text, self.rules) and "no response" not in text.lower()

    def cost_rules(self, options: BaseModel | None = None) -> tuple[StageRule, ...]:
        return (parse_rule(lambda s: s.tokens(prompts.parse_list_prompt("")), prompts.PARSE_LIST),)

    def decompose_call(self, text: str, item: Item):
        return self.recorded_call("extractor", PARSE, [prompts.parse_list_prompt(text)], prompts.PARSE_LIST, text, item)

    def decompose(self, text: str, item: Item, replies=()) -> list[str]:
        parsed, notes, copied = self.parsed(replies)
        if copied and self.rules == "corrected":
            # the example's planets are not the response's: read the items the prompt asked
            # for (separated by semicolons) from the response's first line
            return [x.strip() for x in text.strip().split("\n")[0].split(";") if x.strip()]
        if notes.get("list_split") == "comma-stripped-repeats" and self.rules == "paper":
            items = paper.list_items(parsed, comma_split_strips=True)
            seen: dict[str, int] = {}
            marked = []
            for x in items:  # repeats are told apart so each one counts
                seen[x.lower()] = seen.get(x.lower(), 0) + 1
                marked.append(x if seen[x.lower()] == 1 else f"{x} #{seen[x.lower()]}")
            return marked
        return paper.list_items(parsed)

    def verify(self, atoms, text, item, kb, replies=()) -> list[Verdict]:
        return self._verdicts(atoms, set(item.fields["gold"]), self.condition(item))
