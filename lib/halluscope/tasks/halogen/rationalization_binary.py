"""HALOGEN rationalization (binary): yes/no questions whose right answer is fixed.

Primality: every number asked about is prime, so the answer is yes. Senator search and graph
connectivity: no such senator or route exists, so the answer is no. The units are the answer
and, when the answer is wrong, the justification the model gives for it: claimed factors
(checked arithmetically), flight legs (checked against the flights listed in the prompt) or the
senator it names (wrong by construction: none satisfies both conditions).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from halluscope.tasks.base import Item, Verdict
from halluscope.tasks.halogen.common import ABSTENTION_RULE, HalogenTask, abstained, word_tokens

GOLD = {"primality": "yes", "senator": "no", "graph": "no"}

_PRIME_Q = re.compile(r"Is (\d+) a prime number")
_SENATOR_Q = re.compile(r"represented the state of (.+?) and whose alma mater was (.+?)\?")
_FLIGHT = re.compile(r"There is a flight from city (\w+) to city (\w+)")
_ROUTE_Q = re.compile(r"goes from city (\w+) to city (\w+)\?")
_POWER = r"\d+(?:\s*(?:\^|\*\*)\s*\d+|[²³⁴⁵⁶⁷⁸⁹])?"
_PRODUCT = re.compile(rf"{_POWER}(?:\s*[x×*·∙]\s*{_POWER})+")
_DIVISIBLE = re.compile(r"divisible by (\d+)", re.IGNORECASE)
_LEG = re.compile(r"(?<![A-Za-z])(?:city\s+)?([A-Z])\s*(?:->|→|=>|to)\s*(?:city\s+)?([A-Z])(?![A-Za-z])")
_SENATOR_NAME = re.compile(r"(?:[Ss]enator|name (?:is|was)|:)\s+((?:[A-Z][a-z]+\.?\s+){0,3}[A-Z][a-z]+)")


def answer_of(text: str) -> str | None:
    """The first yes/no in the first non-empty line, else in the whole response."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    for scope in (first, text):
        for tok in word_tokens(scope):
            if tok in ("yes", "no"):
                return tok
    return None


def claimed_factors(text: str, n: int) -> list[int]:
    out: dict[int, None] = {}
    for expr in _PRODUCT.findall(text):
        for base in re.findall(rf"(\d+)(?:\s*(?:\^|\*\*)\s*\d+|[²³⁴⁵⁶⁷⁸⁹])?", expr):
            out.setdefault(int(base), None)
    for d in _DIVISIBLE.findall(text):
        out.setdefault(int(d), None)
    return [k for k in out if 1 < k != n]


def flight_legs(text: str) -> list[tuple[str, str]]:
    """Legs in "A to B", "A -> B -> C" or "city A to city B" form, chains included."""
    legs: dict[tuple[str, str], None] = {}
    for line in text.splitlines():
        pos = 0
        while (m := _LEG.search(line, pos)) is not None:
            legs.setdefault((m.group(1), m.group(2)), None)
            pos = m.start(2)  # overlap, so "A -> B -> C" yields A-B and B-C
    return list(legs)


class RationalizationBinary(HalogenTask):
    name = "halogen/rationalization_binary"
    kind = "response"
    abstention_rule = ABSTENTION_RULE
    decomposer = "answer+justification-v1"
    verifier = "fixed-label+arithmetic+prompt-graph-v1"
    prompt_file = "prompts_rationalization_binary.csv.gz"
    response_dir = "rationalization_binary"

    def item_fields(self, row: Mapping[str, str], where: str) -> dict[str, Any]:
        category = row.get("category", "")
        if category not in GOLD:
            raise ValueError(f"{where} column 'category': {category!r} is not one of {sorted(GOLD)}")
        prompt = row["prompt"]
        fields: dict[str, Any] = {"category": category, "gold": GOLD[category]}
        if category == "primality":
            m = _PRIME_Q.search(prompt)
            if not m:
                raise ValueError(f"{where}: primality prompt names no number")
            fields["number"] = int(m.group(1))
        elif category == "senator":
            m = _SENATOR_Q.search(prompt)
            if not m:
                raise ValueError(f"{where}: senator prompt names no state and college")
            fields["state"], fields["college"] = m.group(1), m.group(2)
        else:
            flights = _FLIGHT.findall(prompt)
            route = _ROUTE_Q.search(prompt)
            if not flights or not route:
                raise ValueError(f"{where}: graph prompt lists no flights or no question")
            fields["flights"] = [f"{a}->{b}" for a, b in flights]
            fields["origin"], fields["destination"] = route.group(1), route.group(2)
        return fields

    def responded(self, text: str, item: Item, replies=()) -> bool:
        return not abstained(text)

    def decompose(self, text: str, item: Item, replies=()) -> list[str]:
        answer = answer_of(text)
        atoms = [f"answer: {answer or 'none'}"]
        if answer == item.fields["gold"]:
            return atoms
        category = item.fields["category"]
        if category == "primality":
            atoms += [f"factor: {k}" for k in claimed_factors(text, item.fields["number"])]
        elif category == "graph":
            atoms += [f"flight: {a}->{b}" for a, b in flight_legs(text)]
        else:
            m = _SENATOR_NAME.search(text)
            if m:
                atoms.append(f"senator: {m.group(1).strip()}")
        return atoms

    def verify(self, atoms, text, item, kb, replies=()) -> list[Verdict]:
        fields = item.fields
        out = []
        for atom in atoms:
            kind, _, value = atom.partition(": ")
            if kind == "answer":
                out.append(Verdict(value == fields["gold"], f"correct answer: {fields['gold']}"))
            elif kind == "factor":
                n, k = fields["number"], int(value)
                out.append(Verdict(1 < k < n and n % k == 0, f"{n} mod {k} = {n % k}"))
            elif kind == "flight":
                out.append(Verdict(value in fields["flights"], "listed in the prompt" if value in fields["flights"]
                                   else "no such flight in the prompt"))
            else:
                out.append(Verdict(False, f"no senator of {fields['state']} attended {fields['college']}"))
        return out
