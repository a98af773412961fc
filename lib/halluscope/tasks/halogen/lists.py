"""HALOGEN's list tasks: rationalization (numerical) and false presuppositions.

Both use the entity list and the letter condition released with each prompt; the gold answer
(``list_condition``) is the members that satisfy the condition."""

from __future__ import annotations

import re
from typing import Any, Mapping

from halluscope.tasks.base import Item, Verdict
from halluscope.tasks.halogen.common import ABSTENTION_RULE, HalogenTask, abstained, parse_list_field
from halluscope.tasks.halogen.entity_mentions import mentioned_entities

_NUMBER_WORDS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen twenty".split())}
_NUMBER = re.compile(r"\b(\d+|" + "|".join(_NUMBER_WORDS) + r")\b", re.IGNORECASE)


def _condition_key(condition: str) -> str:
    return {"contains": "contain", "starts with": "start with", "ends with": "end with"}.get(
        condition.strip().lower(), condition.strip().lower())


class _ListTask(HalogenTask):
    abstention_rule = ABSTENTION_RULE

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

    def _entities(self, text: str, item: Item) -> list[str]:
        return mentioned_entities(text, list(item.fields["universe"]), item.fields["list_name"])

    def _entity_verdicts(self, entities: list[str], item: Item) -> list[Verdict]:
        gold = set(item.fields["gold"])
        cond = f"{item.fields['condition']} '{item.fields['letter']}'"
        return [Verdict(True, f"satisfies: {cond}") if e in gold
                else Verdict(False, f"does not satisfy: {cond}") for e in entities]


class RationalizationNumerical(_ListTask):
    """Units: the count the response gives, then every entity it names."""

    name = "halogen/rationalization_numerical"
    kind = "response"
    decomposer = "count+entity-mentions-v1"
    verifier = "gold-list-v1"
    prompt_file = "prompts_rationalization_numerical.csv.gz"
    response_dir = "rationalization_numerical"

    def responded(self, text: str, item: Item, replies=()) -> bool:
        return not abstained(text)

    def decompose(self, text: str, item: Item, replies=()) -> list[str]:
        first_line = next((line for line in text.splitlines() if line.strip()), "")
        m = _NUMBER.search(first_line) or _NUMBER.search(text)
        atoms = []
        if m:
            tok = m.group(1).lower()
            atoms.append(f"count: {_NUMBER_WORDS.get(tok, tok)}")
        return atoms + self._entities(text, item)

    def verify(self, atoms, text, item, kb, replies=()) -> list[Verdict]:
        gold_count = item.fields["count"]
        out = []
        for atom in atoms:
            if atom.startswith("count: "):
                claimed = int(atom.split(": ", 1)[1])
                out.append(Verdict(claimed == gold_count, f"gold count {gold_count}"))
            else:
                out.extend(self._entity_verdicts([atom], item))
        return out


class FalsePresuppositions(_ListTask):
    """Refusal-based: the prompt asks for more items than exist. Listing any is a failure to
    refuse (R = 1); listed items that break the condition are the hallucinated units."""

    name = "halogen/false_presuppositions"
    kind = "refusal"
    abstention_rule = "halogen-phrases-v1+no-response+lists-items"
    decomposer = "entity-mentions-v1"
    verifier = "gold-list-v1"
    prompt_file = "prompts_falsepresupposition.csv.gz"
    response_dir = "numerical_falsepresupposition"

    def item_fields(self, row: Mapping[str, str], where: str) -> dict[str, Any]:
        fields = super().item_fields(row, where)
        try:
            fields["n_requested"] = int(row["val"])
        except ValueError:
            raise ValueError(f"{where} column 'val': not an integer: {row['val']!r}") from None
        return fields

    def responded(self, text: str, item: Item, replies=()) -> bool:
        if abstained(text) or "no response" in text.lower():
            return False
        return bool(self._entities(text, item))

    def decompose(self, text: str, item: Item, replies=()) -> list[str]:
        return self._entities(text, item)

    def verify(self, atoms, text, item, kb, replies=()) -> list[Verdict]:
        return self._entity_verdicts(atoms, item)
